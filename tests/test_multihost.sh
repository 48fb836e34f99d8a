# Beyond one machine: sdp train across two hosts over TCP, bitwise the same as on one host.
#
# The hosts are network namespaces (ip netns), joined by a veth pair: separate network stacks
# that share this machine's files. Open MPI starts its daemons through an rsh agent that enters
# a host's namespace (as ssh would log in to it), and ranks talk over TCP only (btl tcp,self: no
# shared memory between hosts, nor within one). Two ranks per host, four in all. DDP, forward
# masking and backward masking runs across the hosts must write bitwise the checkpoints of the same
# runs on one host. A rank killed on one host, or its link taken down, ends every rank on both
# hosts within seconds. Every namespace, link and process the test makes is removed when it ends,
# on failure too. Needs root (CAP_NET_ADMIN) and iproute2; without them it is skipped (exit 77).
source "$(dirname "$0")/lib.sh"
: "${SDP_mpi_st_diff:?ctest sets it}"
source "$(dirname "$0")/../scripts/netns_hosts.sh"
MPI=${MPIEXEC:-mpiexec}
TAG=sdp$$ # names of this test's namespaces and links

cleanup() {
  hosts_down
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM # through the EXIT trap

probe() { ip netns add "$TAG-probe" && ip netns exec "$TAG-probe" true; }
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! probe 2>/dev/null; then
  ip netns del "$TAG-probe" 2>/dev/null
  echo "skip: network namespaces need root and iproute2 (ip netns)"
  exit 77
fi
ip netns del "$TAG-probe"
hosts_up "$TAG" || { fail "could not make the hosts"; exit 1; }
PREFIX=$HOSTS_PREFIX
HOSTS_TIMEOUT=120
across() { hosts_mpirun "$@"; }

# Where the ranks run: two on each host's address. Only the addresses count: Open MPI may print a
# warning of its own ("[host:pid] ...") on a loaded machine, which says nothing of placement.
where=$(across sh -c 'ip -o -4 addr show | grep -o "$0\.[0-9]*"' "$PREFIX" 2>&1 |
  grep -E "^${PREFIX//./\\.}\.[0-9]+\$" | sort | uniq -c | awk '{print $1 "x" $2}' | tr '\n' ' ')
[ "$where" = "2x$PREFIX.1 2x$PREFIX.2 " ] && pass "ranks: $where" ||
  fail "the ranks did not land two on each host: '$where'"

make_text "$WORK/text.txt" 60000
T=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 32 --batch 4
   --steps 3 --val-every 0 --threads 1)
same_run() { # name, then the mode's options
  local name=$1; shift
  local one="$WORK/one-$name" multi="$WORK/multi-$name"
  timeout 120 "$MPI" -n 4 --oversubscribe "$SDP_BIN" "${T[@]}" "$@" --out "$one" \
    >"$one.log" 2>&1 || { fail "$name on one host failed: $(tail -1 "$one.log")"; return; }
  across "$SDP_BIN" "${T[@]}" "$@" --out "$multi" >"$multi.log" 2>&1 ||
    { fail "$name across hosts failed: $(grep -m1 -A8 -iE 'warning|error' "$multi.log" | tr -s ' \n' ' ')"; return; }
  if cmp -s "$one/model.safetensors" "$multi/model.safetensors" &&
     cmp -s "$one/optim.safetensors" "$multi/optim.safetensors"; then
    pass "$name: the checkpoint across 2 hosts is bitwise the one-host run's"
  else
    fail "$name: the checkpoints across hosts and on one host differ"
  fi
}
same_run ddp --sdp-mask none
same_run forward-block --sdp-mask forward --sdp-unit block --sdp-coverage 0.5
same_run backward-neuron --sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5
# The comparison can fail: another seed on one host gives another model.
timeout 120 "$MPI" -n 4 --oversubscribe "$SDP_BIN" "${T[@]}" --sdp-mask none --seed 7 \
  --out "$WORK/seed7" >/dev/null 2>&1
cmp -s "$WORK/seed7/model.safetensors" "$WORK/one-ddp/model.safetensors" &&
  fail "another seed gave the same checkpoint: the comparison proves nothing" ||
  pass "another seed gives another checkpoint"

# ---- failure across hosts ------------------------------------------------------------------------
# A rank killed on the second host, or that host's link taken down, ends every rank on both hosts
# within seconds, with Open MPI's message, and the last checkpoint stays whole. (Link loss is
# noticed through the keepalive settings of hosts_mpirun, which the README gives for any
# multi-host run.)
cat >"$WORK/rank.sh" <<'SH'
#!/bin/bash
echo $$ >"$PID_DIR/rank.$OMPI_COMM_WORLD_RANK"
exec "$@"
SH
chmod +x "$WORK/rank.sh"
LONG=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 16 --batch 2
      --steps 1000000 --log-every 100 --val-every 0 --threads 1 --ckpt-every 4
      --sdp-mask backward --sdp-owners 2)
host_pids() { ip netns pids "$TAG-h0" 2>/dev/null; ip netns pids "$TAG-h1" 2>/dev/null; }

fail_across() { # name, action, what the log must say
  local name=$1 action=$2 says=$3
  local dir="$WORK/fail-$name" pids="$WORK/pids-$name"
  mkdir -p "$pids"
  PID_DIR=$pids across -x PID_DIR "$WORK/rank.sh" "$SDP_BIN" "${LONG[@]}" --out "$dir" \
    </dev/null >"$dir.log" 2>&1 &
  local job=$! waited=0
  until [ -s "$dir/model.safetensors" ] && [ -s "$dir/optim.safetensors" ] &&
        [ "$(ls "$pids" | wc -l)" -eq 4 ]; do
    sleep 0.1; waited=$((waited + 1))
    if [ $waited -gt 600 ] || ! kill -0 $job 2>/dev/null; then
      fail "$name: the run across hosts did not start: $(tail -2 "$dir.log")"; kill $job; wait $job
      return
    fi
  done
  sleep 0.5
  local t0; t0=$(date +%s%N)
  $action "$pids"
  local n=0
  while kill -0 $job 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
  if kill -0 $job 2>/dev/null; then
    fail "$name: mpirun still running 30 s later"; kill $job; wait $job; return
  fi
  wait $job; local rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && pass "$name: mpirun exited with status $rc after $ms ms" ||
    fail "$name: mpirun exit status $rc"
  for n in $(seq 100); do [ -z "$(host_pids)" ] && break; sleep 0.1; done
  [ -z "$(host_pids)" ] && pass "$name: no process is left on either host" ||
    fail "$name: left running: $(host_pids | xargs -r ps -o pid=,args= -p | head -4)"
  grep -q "$says" "$dir.log" && pass "$name: the log says '$says'" ||
    fail "$name: the log lacks '$says': $(tail -5 "$dir.log" | tr -s ' \n' ' ')"
  checkpoint_whole "$name" "$dir"
}
kill_rank_on_h1() { kill -KILL "$(cat "$1/rank.2")"; } # ranks 2 and 3 run on h1
link_down_h1() { hosts_link_down h1; }
fail_across kill-rank kill_rank_on_h1 "exited on signal 9"
fail_across link-down link_down_h1 "lost communication"

# Nothing of the test's network outlives it.
trap - EXIT
cleanup
left=$(ip netns list | grep -c "^$TAG-"; ip -o link | grep -c "$TAG")
[ "$(echo $left | tr -d ' ')" = "00" ] && pass "namespaces and links removed" ||
  fail "left behind: $(ip netns list | grep "$TAG") $(ip -o link | grep "$TAG")"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
