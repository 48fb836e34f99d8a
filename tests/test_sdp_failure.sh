# Failures on a multi-rank run. A rank killed by SIGKILL in the middle of training (rank 0, the
# checkpoint writer, and a rank that is not) ends the whole job with a non-zero status within
# 20 seconds, leaves no rank behind, and leaves the last checkpoint valid: its CRC verifies,
# `sdp eval` reads it, and the run resumes from it. A rank stopped by SIGSTOP (alive, so the
# launcher sees nothing) does the same through the other ranks' watchdogs (--stall-timeout),
# and without them the job would wait forever. A rank that hits an error ends every rank within
# seconds, with a message naming the rank.
source "$(dirname "$0")/lib.sh"
: "${SDP_mpi_st_diff:?ctest sets it}"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 60000

# A run far longer than the test, with a checkpoint every 4 steps.
T=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 16 --batch 2
   --steps 1000000 --warmup 2 --lr 1e-3 --log-every 50 --val-every 0 --val-batches 1 --threads 1
   --ckpt-every 4 --sdp-mask backward --sdp-owners 2)

# Each rank records its pid (exec keeps it) before becoming sdp.
cat >"$WORK/rank.sh" <<'SH'
#!/bin/bash
echo $$ >"$PID_DIR/rank.$OMPI_COMM_WORLD_RANK"
exec "$@"
SH
chmod +x "$WORK/rank.sh"

alive() { kill -0 "$1" 2>/dev/null; }
zombie() { [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }

# kill_rank VICTIM SIGNAL [OPTION...]: signals one rank of a 4-rank run after its first checkpoint.
kill_rank() {
  local victim=$1 sig=$2; shift 2
  local dir="$WORK/run_$sig$victim" pids="$WORK/pids_$sig$victim"
  mkdir -p "$pids"
  PID_DIR=$pids timeout 120 "${MPI[@]}" -n 4 "$WORK/rank.sh" "$SDP_BIN" "${T[@]}" "$@" --out "$dir" \
    >"$dir.log" 2>&1 &
  local job=$!
  # Wait (at most 30 s) until the first checkpoint is complete and every rank has its pid.
  local waited=0
  until [ -s "$dir/optim.safetensors" ] && [ -s "$dir/model.safetensors" ] &&
        [ "$(ls "$pids" | wc -l)" -eq 4 ]; do
    sleep 0.1; waited=$((waited + 1))
    if [ $waited -gt 300 ] || ! alive $job; then
      fail "SIG$sig to rank $victim: no checkpoint appeared"; tail -3 "$dir.log"; kill $job 2>/dev/null
      return
    fi
  done
  sleep 0.3 # let it train on (and write more checkpoints) before the kill
  local t0; t0=$(date +%s%N)
  kill -"$sig" "$(cat "$pids/rank.$victim")"
  # mpiexec must notice and end the job.
  local rc=0 n=0
  while alive $job && [ $n -lt 200 ]; do sleep 0.1; n=$((n + 1)); done
  if alive $job; then
    fail "SIG$sig to rank $victim: mpiexec still running 20 s after the kill"; kill $job; wait $job
    return
  fi
  wait $job; rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
    pass "SIG$sig to rank $victim: mpiexec exited with status $rc after $ms ms"
  else
    fail "SIG$sig to rank $victim: mpiexec exit status $rc"
  fi
  if [ "$sig" = STOP ]; then
    grep -q "made no progress for" "$dir.log" &&
      pass "SIGSTOP to rank $victim: $(grep -m1 -o 'rank [0-9]* made no progress for [0-9]* s' "$dir.log")" ||
      { fail "SIGSTOP to rank $victim: no watchdog message"; tail -5 "$dir.log"; }
    # Woken by the launcher on its way down, the stopped rank must not blame "another rank".
    ! grep -q "rank $victim made no progress" "$dir.log" &&
      pass "SIGSTOP to rank $victim: the stopped rank's own watchdog stays quiet" ||
      { fail "SIGSTOP to rank $victim: the stopped rank blamed another"; grep "no progress" "$dir.log"; }
  fi
  # The other ranks go down with the job (mpiexec may return while they are still exiting).
  local left=4
  for n in $(seq 50); do
    left=0
    for f in "$pids"/rank.*; do alive "$(cat "$f")" && ! zombie "$(cat "$f")" && left=$((left + 1)); done
    [ $left -eq 0 ] && break
    sleep 0.1
  done
  [ $left -eq 0 ] && pass "SIG$sig to rank $victim: no rank is left running" ||
    { fail "SIG$sig to rank $victim: $left ranks still running 5 s after mpiexec ended"; ps -o pid,stat,args -p "$(cat "$pids"/rank.* | paste -sd,)"; }
  for f in "$pids"/rank.*; do alive "$(cat "$f")" && kill -KILL "$(cat "$f")"; done

  checkpoint_whole "SIG$sig to rank $victim" "$dir" # the last checkpoint is whole
  if "$SDP_BIN" eval --run "$dir" --threads 1 --batches 4 >"$WORK/eval.log" 2>&1; then
    pass "SIG$sig to rank $victim: sdp eval reads the last checkpoint ($(grep -m1 -o '[0-9.]* nats/token' "$WORK/eval.log"))"
  else
    fail "SIG$sig to rank $victim: sdp eval failed: $(tail -1 "$WORK/eval.log")"
  fi
  if timeout 60 "${MPI[@]}" -n 4 "$SDP_BIN" train --resume "$dir" --stop-after 2 --threads 1 \
      >"$WORK/resume.log" 2>&1; then
    pass "SIG$sig to rank $victim: the run resumes from its last checkpoint ($(grep -o 'resumed at step [0-9]*' "$WORK/resume.log"))"
  else
    fail "SIG$sig to rank $victim: resume failed:"; grep -v "^step" "$WORK/resume.log" | head -20
  fi
}

kill_rank 2 KILL
kill_rank 0 KILL
kill_rank 2 STOP --stall-timeout 3

# The control: without the watchdog, a stopped rank leaves the job waiting (for 8 s here).
pids="$WORK/pids_control"; mkdir -p "$pids"
PID_DIR=$pids timeout 120 "${MPI[@]}" -n 4 "$WORK/rank.sh" "$SDP_BIN" "${T[@]}" --stall-timeout -1 \
  --out "$WORK/run_control" >"$WORK/run_control.log" 2>&1 &
job=$!
for n in $(seq 300); do [ "$(ls "$pids" | wc -l)" -eq 4 ] && [ -s "$WORK/run_control/model.safetensors" ] && break; sleep 0.1; done
kill -STOP "$(cat "$pids/rank.2")"
sleep 8
alive $job && pass "control: with --stall-timeout -1 the job still waits 8 s after a rank stopped" ||
  fail "control: the job ended without the watchdog ($(tail -1 "$WORK/run_control.log"))"
kill -KILL $job 2>/dev/null; for f in "$pids"/rank.*; do kill -KILL "$(cat "$f")" 2>/dev/null; done
wait $job 2>/dev/null

# A checkpoint cut off between its two files: the new optimizer state is in place, the model is
# still the last step's. The previous optimizer file (optim.prev) is kept until the model is in
# place, so the run resumes from the last whole checkpoint; without it, loading fails clearly.
C=(train --data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2
   --steps 100 --warmup 0 --log-every 50 --val-every 0 --val-batches 1 --threads 1 --ckpt-every 2)
cut="$WORK/cut"
timeout 60 "$SDP_BIN" "${C[@]}" --out "$cut" --stop-after 4 >"$WORK/cut.log" 2>&1 &&
  cp "$cut/model.safetensors" "$WORK/model4" && cp "$cut/optim.safetensors" "$WORK/optim4" &&
  timeout 60 "$SDP_BIN" train --resume "$cut" --stop-after 2 >>"$WORK/cut.log" 2>&1 ||
  fail "cut checkpoint: setting up the runs failed: $(tail -3 "$WORK/cut.log")"
cp "$WORK/model4" "$cut/model.safetensors" # optim.safetensors stays at step 6
expect_error "cut checkpoint without optim.prev: loading fails clearly" "different steps" \
  "$SDP_BIN" train --resume "$cut" --stop-after 1
cp "$WORK/optim4" "$cut/optim.prev.safetensors"
if timeout 60 "$SDP_BIN" train --resume "$cut" --stop-after 1 >"$WORK/cut2.log" 2>&1 &&
   grep -q "resumed at step 4" "$WORK/cut2.log"; then
  pass "cut checkpoint: resumes from step 4 with optim.prev"
  [ ! -e "$cut/optim.prev.safetensors" ] && pass "cut checkpoint: optim.prev is removed once the next checkpoint is whole" || fail "cut checkpoint: optim.prev left behind"
else
  fail "cut checkpoint: resume with optim.prev failed:"; grep -v "^step" "$WORK/cut2.log" | head
fi

# One rank of four fails (it was started with other options): every rank ends within seconds,
# and the message names that rank.
t0=$SECONDS
timeout 30 "${MPI[@]}" -n 3 "$SDP_BIN" "${T[@]}" --out "$WORK/mismatch" \
  : -n 1 "$SDP_BIN" "${T[@]}" --out "$WORK/mismatch" --lr 2e-3 >"$WORK/stdout" 2>"$WORK/stderr"
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "rank 3 was started with options that differ" "$WORK/stderr"; then
  pass "a failing rank ends all four in $((SECONDS - t0)) s: $(grep -m1 '^sdp: error' "$WORK/stderr")"
else
  fail "a failing rank: exit status $rc"; cat "$WORK/stderr"
fi
finish
