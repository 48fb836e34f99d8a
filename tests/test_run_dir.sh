# A run directory belongs to one run: a second run on it while the first runs refuses at once,
# naming the holder; a new run into a directory that holds an earlier run refuses unless
# --overwrite (which replaces the run's files, so metrics.jsonl holds the new run alone); and
# --overwrite with --resume is refused; --resume takes the lock like a new run. A run that fails before its first step leaves nothing.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
T=(train --data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2
   --warmup 0 --val-every 0 --val-batches 1 --threads 1 --log-every 1)
digest() { (cd "$1" && find . -type f ! -name .lock -exec md5sum {} + | sort); }

run="$WORK/run"
timeout 60 "$SDP_BIN" "${T[@]}" --steps 3 --out "$run" >"$WORK/first.log" 2>&1 ||
  fail "first run failed: $(tail -1 "$WORK/first.log")"
before=$(digest "$run")
expect_error "a new run into a finished run's directory" "already holds a run" \
  "$SDP_BIN" "${T[@]}" --steps 3 --out "$run"
[ "$(digest "$run")" = "$before" ] && pass "the refused run changed nothing" ||
  fail "the refused run changed the directory"
# A directory of the user's own that holds a file of a run's name is refused and left exactly as
# it was: no lock file either.
mine="$WORK/mine" && mkdir -p "$mine" && echo '{}' >"$mine/config.json"
expect_error "a new run into a directory with a config.json of its own" "already holds a run (config.json)" \
  "$SDP_BIN" "${T[@]}" --steps 3 --out "$mine"
[ "$(ls -A "$mine")" = "config.json" ] && pass "... and it is left as it was" ||
  fail "the refused directory now holds: $(ls -A "$mine" | tr '\n' ' ')"

if timeout 60 "$SDP_BIN" "${T[@]}" --steps 2 --out "$run" --overwrite >"$WORK/over.log" 2>&1; then
  steps=$(grep -c '"loss"' "$run/metrics.jsonl")
  [ "$steps" -eq 2 ] && pass "--overwrite: metrics.jsonl holds the new run's 2 steps alone" ||
    fail "--overwrite: metrics.jsonl has $steps progress lines, not 2"
else fail "--overwrite failed: $(tail -1 "$WORK/over.log")"; fi

expect_error "--overwrite with --resume" "pass one of them" \
  "$SDP_BIN" train --resume "$run" --overwrite --steps 4

# A run that holds the directory: a long one, stopped once the second has been refused.
busy="$WORK/busy"
"$SDP_BIN" "${T[@]}" --steps 100000 --out "$busy" >"$WORK/busy.log" 2>&1 &
holder=$!
for _ in $(seq 100); do [ -s "$busy/.lock" ] && break; sleep 0.1; done
t0=$(date +%s%N)
expect_error "a second run on a directory in use" "is in use by sdp train, pid $holder" \
  "$SDP_BIN" "${T[@]}" --steps 3 --out "$busy" --overwrite
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 5000 ] && pass "refused in $ms ms" || fail "the refusal took $ms ms"
# Resuming it while it runs, before its first save: the lock is what is wrong, not the checkpoint.
expect_error "--resume of a live run before its first save" "is in use by sdp train, pid $holder" \
  "$SDP_BIN" train --resume "$busy"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# A run stopped before its first save (killed): nothing to resume, and the line says how to start.
nosave="$WORK/nosave"
cp -r "$run" "$nosave" && rm -f "$nosave"/*.safetensors
expect_error "--resume of a run with no checkpoint" \
  "run directory '$nosave' holds no checkpoint to resume from: the run stopped before its first save" \
  "$SDP_BIN" train --resume "$nosave"

# --resume takes the lock too: while another process holds it, resuming refuses and writes nothing.
before=$(digest "$run")
flock "$run/.lock" sleep 30 &
locker=$!
for _ in $(seq 50); do flock -n "$run/.lock" true || break; sleep 0.1; done
expect_error "--resume of a directory in use" "is in use by" \
  "$SDP_BIN" train --resume "$run" --steps 4
[ "$(digest "$run")" = "$before" ] && pass "the refused --resume changed nothing" ||
  fail "the refused --resume changed the directory"
kill "$locker" 2>/dev/null; wait "$locker" 2>/dev/null

# A run that fails before its first step leaves nothing: no new directory (on 1 and 4 ranks, also
# where only some ranks fail), and a run directory given to --resume unchanged.
printf 'short' >"$WORK/tiny.txt"
for n in 1 4; do
  new="$WORK/never_$n"
  timeout 60 "$MPIEXEC" -n $n --oversubscribe "$SDP_BIN" "${T[@]}" --steps 3 --data "$WORK/tiny.txt" \
    --out "$new" >"$WORK/never.log" 2>&1
  [ ! -e "$new" ] && pass "$n ranks, data too small: no run directory created" ||
    fail "$n ranks, data too small: $new was created"
  new="$WORK/never_model_$n"
  timeout 60 "$MPIEXEC" -n $n --oversubscribe "$SDP_BIN" "${T[@]}" --steps 3 --width 17 \
    --out "$new" >"$WORK/never.log" 2>&1
  [ ! -e "$new" ] && pass "$n ranks, impossible model: no run directory created" ||
    fail "$n ranks, impossible model: $new was created"
done
# Ranks that disagree (the command line differs on rank 3) fail after every rank loaded its data.
new="$WORK/never_split"
timeout 60 "$MPIEXEC" --oversubscribe -n 3 "$SDP_BIN" "${T[@]}" --steps 3 --out "$new" : \
  -n 1 "$SDP_BIN" "${T[@]}" --steps 4 --out "$new" >"$WORK/never.log" 2>&1
[ ! -e "$new" ] && pass "ranks with different options: no run directory created" ||
  fail "ranks with different options: $new was created ($(grep -m1 error "$WORK/never.log"))"
cp "$run/model.safetensors" "$WORK/model.bak"
printf 'broken' >"$run/model.safetensors"
before=$(digest "$run")
timeout 60 "$SDP_BIN" train --resume "$run" --steps 6 >"$WORK/resume_bad.log" 2>&1 &&
  fail "resume from a broken checkpoint succeeded"
[ "$(digest "$run")" = "$before" ] && pass "a failed --resume left its run directory unchanged" ||
  fail "a failed --resume changed its run directory"
cp "$WORK/model.bak" "$run/model.safetensors"
# A run whose directory is deleted (and perhaps claimed by another run) while it trains: its lock
# guarded a deleted file, and its stop once saved into the new directory. It now refuses.
live="$WORK/live"
"$SDP_BIN" "${T[@]}" --steps 1000000 --log-every 100 --ckpt-every 0 --out "$live" \
  >"$WORK/live.log" 2>"$WORK/live.err" &
pid=$!
for _ in $(seq 100); do grep -q "^step" "$WORK/live.log" && break; sleep 0.1; done
rm -rf "$live"; mkdir "$live"
kill -TERM $pid; wait $pid; rc=$?
if [ $rc -eq 1 ] && grep -q "run directory '$live' was deleted, moved or replaced while this run trained" \
  "$WORK/live.err" && [ -z "$(ls -A "$live")" ]; then
  pass "a run whose directory was replaced stops without writing into it"
else fail "a run whose directory was replaced: status $rc, $(ls -A "$live" | tr '\n' ' ')"; cat "$WORK/live.err"; fi
# memory.json says whether the run reached --steps: a stopped run writes its record too, and the
# study's sweeps (scripts/run_finished.py) once recorded such a run as finished.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
part="$WORK/part"
"$SDP_BIN" "${T[@]}" --steps 6 --stop-after 3 --out "$part" >/dev/null 2>&1
if ! python3 "$ROOT/scripts/run_finished.py" "$part" &&
  timeout 60 "$SDP_BIN" train --resume "$part" >/dev/null 2>&1 &&
  python3 "$ROOT/scripts/run_finished.py" "$part" &&
  python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); assert (m["step"], m["steps"], m["finished"]) == (6, 6, True)' "$part/memory.json"; then
  pass "memory.json: a stopped run is not finished, the resumed one is (run_finished.py)"
else fail "memory.json's finished, or run_finished.py"; head -2 "$part/memory.json"; fi
finish
