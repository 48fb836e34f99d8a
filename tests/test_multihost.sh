# Beyond one machine: sdp train across two hosts over TCP, bitwise the same as on one host.
#
# The hosts are network namespaces (ip netns), joined by a veth pair: separate network stacks
# that share this machine's files. Open MPI starts its daemons through an rsh agent that enters
# a host's namespace (as ssh would log in to it), and ranks talk over TCP only (btl tcp,self: no
# shared memory between hosts, nor within one). Two ranks per host, four in all. DDP, forward
# masking and backward masking runs across the hosts must write bitwise the checkpoints of the same
# runs on one host. Every namespace, link and process the test makes is removed when it ends, on
# failure too. Needs root (CAP_NET_ADMIN) and iproute2; without them it is skipped (exit 77).
source "$(dirname "$0")/lib.sh"
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

# Where the ranks run: two on each host's address.
where=$(across sh -c 'ip -o -4 addr show | grep -o "$0\.[0-9]*"' "$PREFIX" 2>&1 | sort | uniq -c |
  awk '{print $1 "x" $2}' | tr '\n' ' ')
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

# Nothing of the test's network outlives it.
trap - EXIT
cleanup
left=$(ip netns list | grep -c "^$TAG-"; ip -o link | grep -c "$TAG")
[ "$(echo $left | tr -d ' ')" = "00" ] && pass "namespaces and links removed" ||
  fail "left behind: $(ip netns list | grep "$TAG") $(ip -o link | grep "$TAG")"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
