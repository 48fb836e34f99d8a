# A run's files stay true across resume: config.json records each invocation, data paths work
# from any directory and are checked by identity, rates are per invocation, a longer --steps keeps
# the schedule unless --reschedule, and the summary and progress lines say what happened.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
mkdir -p "$WORK/start" "$WORK/elsewhere"
make_text "$WORK/start/input.txt" 100000
make_text "$WORK/other.txt" 90000
SMALL=(--layers 2 --heads 4 --width 32 --seq-len 32 --batch 4 --val-batches 2 --log-every 5)
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# ---- config.json records each invocation; a relative --data resumes from another directory -----
R="$WORK/mixed"
(cd "$WORK/start" && "${MPI[@]}" -n 4 "$SDP_BIN" train --data input.txt "${SMALL[@]}" --steps 20 \
  --val-every 10 --sdp-mask forward --out "$R" --stop-after 10 >"$WORK/a.log" 2>&1) \
  || { fail "first invocation failed"; cat "$WORK/a.log"; }
[ "$(json "$R/config.json" "d['data']")" = "$WORK/start/input.txt" ] \
  && pass "config.json stores --data input.txt as its absolute path" \
  || fail "config.json data: $(json "$R/config.json" "d['data']")"
(cd "$WORK/elsewhere" && "${MPI[@]}" -n 2 "$SDP_BIN" train --resume "$R" --steps 30 \
  --sdp-mask backward >"$WORK/b.log" 2>&1) \
  && pass "a run started with a relative --data resumes from another directory" \
  || { fail "resume from another directory failed"; cat "$WORK/b.log"; }
got=$(json "$R/config.json" \
  "(d['steps'], d['sdp-mask'], d['resolved']['world'], [(i['from_step'], i['world'], i['owners'], i['sdp-mask']) for i in d['invocations']], d['invocations'][1]['changed'])")
want="(30, 'backward', 2, [(0, 4, 2, 'forward'), (10, 2, 1, 'backward')], {'steps': 30, 'sdp-mask': 'backward'})"
[ "$got" = "$want" ] && pass "config.json: the latest setting on top, both invocations recorded" \
  || fail "config.json after resume: $got (want $want)"
python3 - "$R/metrics.jsonl" <<'EOF' && pass "elapsed_s counts the whole run: it never falls across the resume" || fail "elapsed_s falls across the resume"
import json, sys
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1])]
sys.exit(not all(a <= b for a, b in zip(t, t[1:])))
EOF
(cd "$WORK/elsewhere" && "$SDP_BIN" eval --run "$R" >"$WORK/eval.log" 2>&1) \
  && pass "eval of that run works from another directory" || { fail "eval elsewhere"; cat "$WORK/eval.log"; }

# ---- data given on resume: the same file under another name is fine, other data is not ----------
D="$WORK/ddp"
"$SDP_BIN" train --data "$WORK/start/input.txt" "${SMALL[@]}" --steps 20 --val-every 0 --out "$D" \
  --stop-after 5 >/dev/null 2>&1 || fail "ddp run failed"
ln -s "$WORK/start/input.txt" "$WORK/alias.txt"
(cd "$WORK" && "$SDP_BIN" train --resume "$D" --steps 10 --data alias.txt >"$WORK/c.log" 2>&1) \
  && pass "--data on resume naming the same file by another path is accepted" \
  || { fail "same file refused"; cat "$WORK/c.log"; }
expect_error "--data on resume naming other data is refused" "config.json" \
  "$SDP_BIN" train --resume "$D" --steps 15 --data "$WORK/other.txt"
expect_error "--lr cannot change on resume" "--lr 0.01 cannot change when resuming" \
  "$SDP_BIN" train --resume "$D" --steps 15 --lr 1e-2
expect_error "--reschedule needs --resume" "--reschedule" \
  "$SDP_BIN" train --data "$WORK/other.txt" "${SMALL[@]}" --steps 5 --reschedule --out "$WORK/x"
# An older run recorded its --data as typed: from elsewhere, the error says what to do.
python3 - "$D/config.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); d['data'] = 'input.txt'; json.dump(d, open(sys.argv[1], 'w'))
EOF
(cd "$WORK/elsewhere" && expect_error "a relative --data not found from here names the fix" \
  "pass --data with the absolute path" "$SDP_BIN" train --resume "$D" --steps 15)
(cd "$WORK/elsewhere" && "$SDP_BIN" train --resume "$D" --steps 15 --data "$WORK/start/input.txt" \
  >"$WORK/d.log" 2>&1) && pass "... and passing the absolute path resumes it" \
  || { fail "absolute path after relative record"; cat "$WORK/d.log"; }

# ---- bytes sent per step are the same whole or resumed ------------------------------------------
for how in whole part; do
  extra=(); [ $how = part ] && extra=(--stop-after 10)
  "${MPI[@]}" -n 2 "$SDP_BIN" train --data "$WORK/start/input.txt" "${SMALL[@]}" --steps 20 \
    --val-every 0 --out "$WORK/bytes_$how" "${extra[@]}" >/dev/null 2>&1 || fail "bytes $how run"
done
"${MPI[@]}" -n 2 "$SDP_BIN" train --resume "$WORK/bytes_part" >"$WORK/e.log" 2>&1 || fail "bytes resume"
a=$(json "$WORK/bytes_whole/memory.json" "d['workers'][0]['sent_per_step']")
b=$(json "$WORK/bytes_part/memory.json" "d['workers'][0]['sent_per_step']")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "sent per step is $a bytes, whole and resumed" \
  || fail "sent per step: whole $a, resumed $b"

# ---- a longer --steps keeps the schedule unless --reschedule ------------------------------------
S=(--data "$WORK/start/input.txt" "${SMALL[@]}" --steps 20 --warmup 2 --val-every 0 --lr 1e-3
   --lr-min 1e-4)
for how in keep stretch; do
  "$SDP_BIN" train "${S[@]}" --out "$WORK/sched_$how" >/dev/null 2>&1 || fail "schedule run $how"
done
"$SDP_BIN" train --resume "$WORK/sched_keep" --steps 30 >"$WORK/keep.log" 2>&1 || fail "keep resume"
"$SDP_BIN" train --resume "$WORK/sched_stretch" --steps 30 --reschedule >"$WORK/stretch.log" 2>&1 \
  || fail "stretch resume"
lr_keep=$(python3 -c "import json; print([l['lr'] for l in map(json.loads, open('$WORK/sched_keep/metrics.jsonl')) if l.get('step')==25 and 'lr' in l][0])")
lr_stretch=$(python3 -c "import json; print([l['lr'] for l in map(json.loads, open('$WORK/sched_stretch/metrics.jsonl')) if l.get('step')==25 and 'lr' in l][0])")
grep -q "keeps its schedule of 20 steps" "$WORK/keep.log" && [ "$(grep -c '^resume:' "$WORK/keep.log")" = 1 ] \
  && python3 -c "import sys; sys.exit(abs($lr_keep - 1e-4) > 1e-9)" \
  && pass "without --reschedule: one line says so, and the lr holds at 1e-4 past step 20 ($lr_keep)" \
  || { fail "kept schedule: lr $lr_keep"; cat "$WORK/keep.log"; }
grep -q "stretches the schedule from 20 to 30 steps" "$WORK/stretch.log" \
  && python3 -c "import sys; sys.exit(not $lr_stretch > 1.5e-4)" \
  && pass "--reschedule: one line says so, and the lr at step 25 rises to $lr_stretch" \
  || { fail "stretched schedule: lr $lr_stretch"; cat "$WORK/stretch.log"; }

# ---- the summary of a stopped invocation -------------------------------------------------------
"$SDP_BIN" train --data "$WORK/other.txt" "${SMALL[@]}" --steps 40 --val-every 0 \
  --out "$WORK/stop" --stop-after 7 >"$WORK/stop.log" 2>&1 || fail "stop-after run"
grep -q "^summary: 7 steps in .* (steps 1 to 7 of 40; stopped early)" "$WORK/stop.log" \
  && ! grep -qi "nan" "$WORK/stop.log" && grep -q "no validation in this invocation" "$WORK/stop.log" \
  && pass "--stop-after: the summary counts this invocation's 7 steps and prints no nan" \
  || { fail "stop-after summary"; grep summary "$WORK/stop.log"; }

"$SDP_BIN" report "$WORK/stop" >"$WORK/stop.md" 2>&1
grep -E '^\| stop \|' "$WORK/stop.md" | grep -qvi "nan" \
  && pass "report of a run not yet validated shows no nan" || { fail "report shows nan"; cat "$WORK/stop.md"; }

# ---- the progress rate leaves validation out ---------------------------------------------------
# A validation here costs about a hundred training steps; a rate that counted it would fall
# ten-fold in the window after it. (The first steps after a validation run a little slower, on
# cold caches: hence windows of 10 steps and a loose bound.)
"$SDP_BIN" train --data "$WORK/other.txt" --layers 2 --heads 4 --width 32 --seq-len 32 --batch 4 \
  --steps 60 --log-every 10 --val-every 20 --val-batches 400 --out "$WORK/rate" >"$WORK/rate.log" 2>&1 \
  || fail "rate run"
python3 - "$WORK/rate/metrics.jsonl" <<'EOF' && pass "the rate after a validation stays that of training" || fail "rate counts validation: $(grep -o '"tokens_per_s":[0-9.e+]*' "$WORK/rate/metrics.jsonl" | tr '\n' ' ')"
import json, sys, statistics
lines = [json.loads(l) for l in open(sys.argv[1])]
rate = {l['step']: l['tokens_per_s'] for l in lines if 'tokens_per_s' in l}
after = [rate[s] for s in (30, 50)]  # windows that follow a validation (steps 20 and 40)
plain = [rate[s] for s in (10, 20, 40, 60)]
sys.exit(not statistics.median(after) > 0.25 * statistics.median(plain))
EOF

# ---- the ViT banner names the ViT's own shape ----------------------------------------------------
if [ -d /usr/share/datasets/fashion-mnist ]; then
  "$SDP_BIN" train --model vit --layers 1 --heads 2 --width 16 --patch 7 --batch 4 --steps 1 \
    --val-batches 1 --out "$WORK/vit" >"$WORK/vit.log" 2>&1 || fail "vit run"
  head -1 "$WORK/vit.log" | grep -q "1 layers, 2 heads, width 16.*patch 7" \
    && ! head -1 "$WORK/vit.log" | grep -q "depth" \
    && pass "ViT banner: $(head -1 "$WORK/vit.log")" || fail "ViT banner: $(head -1 "$WORK/vit.log")"
fi
finish
