# End to end: a short training run learns, writes its run directory, and resumes bit for bit.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 100000
for style in gpt llama; do
  A=(--model $style --data "$WORK/text.txt" --layers 2 --heads 2 --width 32 --seq-len 32 --batch 4
     --steps 40 --warmup 4 --lr 3e-3 --log-every 5 --val-every 20 --val-batches 4 --seed 5)
  "$SDP_BIN" train "${A[@]}" --out "$WORK/full_$style" >"$WORK/full.log" 2>&1 \
    || { fail "$style: uninterrupted run failed"; cat "$WORK/full.log"; continue; }
  # The same run, stopped at step 15 (not a logging step) and resumed.
  "$SDP_BIN" train "${A[@]}" --out "$WORK/part_$style" --stop-after 15 >/dev/null 2>&1 \
    || fail "$style: first half failed"
  # llama's resume repeats the first command line: options given again with the run's own values
  # change nothing, so they must not be refused.
  R=(); [ "$style" = llama ] && R=("${A[@]}")
  "$SDP_BIN" train "${R[@]}" --resume "$WORK/part_$style" >"$WORK/resume.log" 2>&1 \
    || { fail "$style: resume failed"; cat "$WORK/resume.log"; continue; }
  strip() { sed -E 's/"(tokens_per_s|ms_per_step|elapsed_s|ms_forward|ms_backward|ms_sync|ms_update)":[^,}]*//g' "$1"; }
  if diff <(strip "$WORK/full_$style/metrics.jsonl" | grep -v '"step":15,') \
          <(strip "$WORK/part_$style/metrics.jsonl" | grep -v '"step":15,') >/dev/null; then
    pass "$style: resumed run's losses are bitwise identical to the uninterrupted run"
  else
    fail "$style: resumed metrics differ"; diff <(strip "$WORK/full_$style/metrics.jsonl") <(strip "$WORK/part_$style/metrics.jsonl") | head
  fi
  cmp -s "$WORK/full_$style/model.safetensors" "$WORK/part_$style/model.safetensors" \
    && pass "$style: final checkpoints are byte-identical" || fail "$style: final checkpoints differ"
  first=$(grep -m1 '"loss"' "$WORK/full_$style/metrics.jsonl" | sed -E 's/.*"loss":([0-9.e+-]+).*/\1/')
  last=$(grep '"loss"' "$WORK/full_$style/metrics.jsonl" | tail -1 | sed -E 's/.*"loss":([0-9.e+-]+).*/\1/')
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' \
    && pass "$style: loss fell from $first to $last" || fail "$style: loss did not fall ($first -> $last)"
  for f in config.json metrics.jsonl model.safetensors optim.safetensors; do
    [ -s "$WORK/full_$style/$f" ] || fail "$style: $f missing"
  done
  grep -q "peak RSS" "$WORK/full.log" && grep -q "params" "$WORK/full.log" \
    && pass "$style: summary prints memory by category and peak RSS" || fail "$style: no memory summary"
  "$SDP_BIN" eval --run "$WORK/full_$style" >"$WORK/eval.log" 2>&1 \
    && grep -q "nats/token" "$WORK/eval.log" && pass "$style: eval works" || { fail "$style: eval"; cat "$WORK/eval.log"; }
done
# Dropout draws its masks from the seed, the worker and the step: a run with it resumes bit for bit
# too, also with several workers each drawing its own (SDP, 2 ranks); it trains differently from
# the same run without dropout; and it cannot change on resume.
strip() { sed -E 's/"(tokens_per_s|ms_per_step|elapsed_s|ms_forward|ms_backward|ms_sync|ms_update)":[^,}]*//g' "$1"; }
for variant in gpt llama gpt-sdp; do
  style=${variant%-sdp}
  A=(--model $style --data "$WORK/text.txt" --layers 2 --heads 2 --width 32 --seq-len 32 --batch 4
     --steps 40 --warmup 4 --lr 3e-3 --log-every 5 --val-every 20 --val-batches 4 --seed 5
     --dropout 0.2)
  RUN=("$SDP_BIN")
  if [ "$variant" = gpt-sdp ]; then
    RUN=(timeout 120 "$MPIEXEC" -n 2 --oversubscribe "$SDP_BIN")
    A+=(--sdp-mask forward --sdp-unit neuron --threads 1)
  fi
  "${RUN[@]}" train "${A[@]}" --out "$WORK/dfull_$variant" >"$WORK/full.log" 2>&1 \
    || { fail "$variant dropout: uninterrupted run failed"; cat "$WORK/full.log"; continue; }
  "${RUN[@]}" train "${A[@]}" --out "$WORK/dpart_$variant" --stop-after 15 >/dev/null 2>&1 \
    || fail "$variant dropout: first half failed"
  "${RUN[@]}" train --resume "$WORK/dpart_$variant" >"$WORK/resume.log" 2>&1 \
    || { fail "$variant dropout: resume failed"; cat "$WORK/resume.log"; continue; }
  if diff <(strip "$WORK/dfull_$variant/metrics.jsonl" | grep -v '"step":15,') \
          <(strip "$WORK/dpart_$variant/metrics.jsonl" | grep -v '"step":15,') >/dev/null; then
    pass "$variant dropout: resumed run's losses are bitwise identical to the uninterrupted run"
  else
    fail "$variant dropout: resumed metrics differ"
  fi
  cmp -s "$WORK/dfull_$variant/model.safetensors" "$WORK/dpart_$variant/model.safetensors" \
    && pass "$variant dropout: final checkpoints are byte-identical" \
    || fail "$variant dropout: final checkpoints differ"
  if [ -d "$WORK/full_$style" ] && [ "$variant" = "$style" ]; then
    cmp -s "$WORK/full_$style/model.safetensors" "$WORK/dfull_$variant/model.safetensors" \
      && fail "$variant dropout: trained the same model as without dropout" \
      || pass "$variant dropout: trains otherwise than without dropout"
  fi
  grep -q '"dropout":.*0.2' "$WORK/dfull_$variant/config.json" \
    && pass "$variant dropout: config.json records it" || fail "$variant dropout: not in config.json"
done
expect_error "--dropout cannot change on resume" "--dropout 0.1 cannot change when resuming: the run was configured with 0.2" \
  "$SDP_BIN" train --resume "$WORK/dpart_gpt" --dropout 0.1
expect_error "--dropout 1 is refused" "--dropout must be in [0, 1)" \
  "$SDP_BIN" train --data "$WORK/text.txt" --dropout 1 --steps 1 --out "$WORK/bad"
# A briefly trained byte model may emit any byte, NUL included, so compare files, not strings.
"$SDP_BIN" sample --run "$WORK/full_gpt" --prompt "The " --length 50 --seed 1 >"$WORK/s1" 2>&1
"$SDP_BIN" sample --run "$WORK/full_gpt" --prompt "The " --length 50 --seed 1 >"$WORK/s2" 2>&1
bytes=$(wc -c <"$WORK/s1")
[ "$bytes" -eq 55 ] && pass "sample writes the prompt, 50 bytes and a newline" \
  || fail "sample wrote $bytes bytes, expected 55"
cmp -s "$WORK/s1" "$WORK/s2" && pass "sample is deterministic for a seed" || fail "sample not deterministic"
# The model sees up to T tokens: at --seq-len 1 it once slid its window to nothing before each
# forward (and at any T saw only T - 1).
if timeout 60 "$SDP_BIN" train --data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 1 \
    --batch 2 --steps 2 --val-every 0 --threads 1 --out "$WORK/t1" >"$WORK/t1.log" 2>&1 &&
  "$SDP_BIN" sample --run "$WORK/t1" --length 5 --seed 1 >"$WORK/t1.out" 2>"$WORK/t1.err" &&
  [ ! -s "$WORK/t1.err" ]; then
  pass "sample from a --seq-len 1 run"
else fail "sample from a --seq-len 1 run"; cat "$WORK/t1.err"; fi
# Capture first: grep -q exits at the first match, and sdp's SIGPIPE would fail the pipeline.
"$SDP_BIN" train --help >"$WORK/help" 2>&1
grep -q -- "--grad-accum V .*\[1\]" "$WORK/help" && pass "--help lists options with defaults" || fail "--help"
finish
