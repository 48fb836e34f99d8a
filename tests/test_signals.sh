# Stopping a run with SIGINT or SIGTERM: the first signal finishes the step, writes a checkpoint,
# prints one line saying how to resume and exits with 128 + the signal; the run resumes from that
# checkpoint to the end. A second signal (more than a second after the first: closer ones are one
# stop delivered twice) exits at once and leaves no temporary file. Under
# mpiexec, a signal to mpiexec (which passes SIGTERM to every rank) or to one rank alone stops
# every rank after the same step, with one checkpoint, and leaves no rank running.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 60000
T=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 16 --batch 2
   --warmup 2 --lr 1e-3 --log-every 20 --val-every 0 --val-batches 1 --threads 1)
LONG=1000000

# Waits (at most SECONDS, default 30) until DIR's metrics.jsonl has a progress line: the run is in
# its loop.
wait_running() {
  for _ in $(seq $((${2:-30} * 10))); do
    grep -q '"loss"' "$1/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# checks DIR LOG RC WANT_RC WHAT: exit status, the one line, a checkpoint, memory.json, no temp
# file.
check_stopped() {
  local dir=$1 log=$2 rc=$3 want=$4 what=$5
  [ "$rc" -eq "$want" ] && pass "$what: exit status $rc" || fail "$what: exit status $rc, not $want"
  local lines; lines=$(grep -c "stopped by" "$log")
  if [ "$lines" -eq 1 ] && grep -q "resume with: .*sdp train --resume $dir" "$log"; then
    pass "$what: one line says how to resume ($(grep 'stopped by' "$log" | head -c 120))"
  else fail "$what: $lines 'stopped by' lines"; cat "$log"; fi
  local acks; acks=$(grep -c "stopping when this step ends" "$log")
  [ "$acks" -le 1 ] && pass "$what: $acks line(s) acknowledging the signal" ||
    { fail "$what: $acks lines acknowledge the signal"; cat "$log"; }
  [ -s "$dir/model.safetensors" ] && [ -s "$dir/optim.safetensors" ] &&
    pass "$what: a checkpoint was written" || fail "$what: no checkpoint"
  # The run's memory record, every worker's row, as a finished run writes it.
  python3 -c 'import json, sys; w = json.load(open(sys.argv[1]))["workers"]; sys.exit(0 if w and all(r["params"] > 0 for r in w) else 1)' \
    "$dir/memory.json" 2>/dev/null && pass "$what: memory.json was written" ||
    fail "$what: no memory.json"
  [ -z "$(find "$dir" -name '*.tmp*')" ] && pass "$what: no temporary file left" ||
    fail "$what: temporary files left: $(find "$dir" -name '*.tmp*')"
}

# ---- one process: SIGTERM and SIGINT, then resume to the end --------------------------------------
for sig in TERM INT; do
  dir="$WORK/one_$sig"
  timeout 120 "$SDP_BIN" "${T[@]}" --steps $LONG --out "$dir" >"$dir.out" 2>"$dir.err" &
  pid=$!
  wait_running "$dir" || fail "SIG$sig: the run never started"
  kill -"$sig" "$(pgrep -P "$pid" | head -1)" # sdp itself, not the `timeout` around it
  wait "$pid"; rc=$?
  [ $sig = TERM ] && want=143 || want=130
  check_stopped "$dir" "$dir.err" "$rc" "$want" "one process, SIG$sig"
done
# A step can take long (here a million micro-batches): the first signal is acknowledged at once,
# while the step goes on, and a second one ends the run.
dir="$WORK/long_step"
timeout 120 "$SDP_BIN" "${T[@]}" --steps 2 --grad-accum 1000000 --out "$dir" >"$dir.out" 2>"$dir.err" &
pid=$!
for _ in $(seq 100); do grep -q "run dir" "$dir.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM "$(pgrep -P "$pid" | head -1)"
sleep 1.5
if grep -q "SIGTERM: stopping when this step ends" "$dir.err" && kill -0 "$pid" 2>/dev/null; then
  pass "a long step: the first SIGTERM is acknowledged at once, and the step goes on"
else fail "a long step: no acknowledgment while the step runs"; cat "$dir.err"; fi
kill -TERM "$(pgrep -P "$pid" | head -1)" 2>/dev/null
wait "$pid"; rc=$?
[ "$rc" -eq 143 ] && grep -q "second signal" "$dir.err" &&
  pass "a long step: a second SIGTERM ends it at once (exit status $rc)" ||
  { fail "a long step: exit status $rc after a second SIGTERM"; cat "$dir.err"; }

dir="$WORK/one_TERM"
stopped=$(grep -o '"step":[0-9]*' "$dir/metrics.jsonl" | tail -1 | cut -d: -f2)
end=$((stopped + 30))
if timeout 120 "$SDP_BIN" train --resume "$dir" --steps $end >"$dir.resume" 2>&1 &&
   grep -q "\"step\":$end," "$dir/metrics.jsonl"; then
  pass "resumed from step $stopped to step $end"
else fail "resume after SIGTERM"; tail -3 "$dir.resume"; fi

# ---- a second signal: out at once, no temporary file ------------------------------------------------
# Signals less than a second apart are one stop delivered twice (Ctrl-C under mpirun, `timeout`);
# so the second comes 1.5 s after the first, into a step long enough (12 micro-batches) to be
# still running. Its first step takes seconds alone and far longer on a loaded machine, hence the
# long waits.
dir="$WORK/twice"
timeout 300 "$SDP_BIN" "${T[@]}" --layers 4 --width 512 --heads 8 --seq-len 256 --batch 8 --grad-accum 12 \
  --log-every 1 --steps $LONG --out "$dir" >"$dir.out" 2>"$dir.err" &
pid=$!
wait_running "$dir" 180 || fail "second signal: the run never started"
child=$(pgrep -P "$pid" | head -1)
kill -TERM "$child"; sleep 1.5; kill -TERM "$child" 2>/dev/null
wait "$pid"; rc=$?
[ "$rc" -eq 143 ] && pass "second signal: exit status 143" || fail "second signal: exit status $rc"
grep -q "second signal: stopping now" "$dir.err" && pass "second signal: it stopped at once" ||
  fail "second signal: the run was not stopped by it ($(head -c 200 "$dir.err"))"
[ -z "$(find "$dir" -name '*.tmp*')" ] && pass "second signal: no temporary file left" ||
  fail "second signal: temporary files left: $(find "$dir" -name '*.tmp*')"

# ---- four ranks ---------------------------------------------------------------------------------
cat >"$WORK/rank.sh" <<'SH'
#!/bin/bash
echo $$ >"$PID_DIR/rank.$OMPI_COMM_WORLD_RANK"
exec "$@"
SH
chmod +x "$WORK/rank.sh"

# mpi_stop NAME TARGET: a 4-rank run stopped by SIGTERM sent to TARGET (mpiexec, or rank1).
mpi_stop() {
  local name=$1 target=$2 dir="$WORK/$1" pids="$WORK/pids_$1"
  mkdir -p "$pids"
  PID_DIR=$pids timeout 120 "${MPI[@]}" -n 4 "$WORK/rank.sh" "$SDP_BIN" "${T[@]}" \
    --sdp-mask forward --sdp-owners 2 --steps $LONG --out "$dir" >"$dir.out" 2>"$dir.err" &
  local job=$!
  wait_running "$dir" || fail "$name: the run never started"
  for _ in $(seq 50); do [ "$(ls "$pids" | wc -l)" -eq 4 ] && break; sleep 0.1; done
  # mpiexec itself, not the `timeout` around it (which would signal the ranks' group too)
  if [ "$target" = mpiexec ]; then kill -TERM "$(pgrep -P $job | head -1)"
  else kill -TERM "$(cat "$pids/rank.1")"; fi
  wait $job; local rc=$?
  # Signalled itself, mpiexec passes SIGTERM to the ranks and returns 1 without waiting for them;
  # with a rank signalled, it waits and returns that rank's status.
  if [ "$target" = mpiexec ]; then want=1; else want=143; fi
  [ "$rc" -eq $want ] && pass "$name: mpiexec exited with status $rc" ||
    fail "$name: mpiexec exit status $rc, not $want"
  local left=4 t0; t0=$(date +%s%N)
  for _ in $(seq 200); do
    left=0
    for f in "$pids"/rank.*; do kill -0 "$(cat "$f")" 2>/dev/null && left=$((left + 1)); done
    [ $left -eq 0 ] && break
    sleep 0.1
  done
  [ $left -eq 0 ] && pass "$name: every rank ended within $((($(date +%s%N) - t0) / 1000000)) ms of mpiexec" ||
    fail "$name: $left ranks still running 20 s after mpiexec ended"
  check_stopped "$dir" "$dir.err" 143 143 "$name"
  local steps; steps=$(grep -o '"step":[0-9]*' "$dir/metrics.jsonl" | tail -1 | cut -d: -f2)
  local end=$((steps + 20))
  if timeout 120 "${MPI[@]}" -n 4 "$SDP_BIN" train --resume "$dir" --steps $end >"$dir.resume" 2>&1 &&
     grep -q "\"step\":$end," "$dir/metrics.jsonl"; then
    pass "$name: resumed on 4 ranks from step $steps to $end"
  else fail "$name: resume"; tail -3 "$dir.resume"; fi
}
mpi_stop mpi_all mpiexec
mpi_stop mpi_one rank1
finish
