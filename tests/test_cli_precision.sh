# --precision: bf16 is a CUDA mode, so the CPU refuses it with one line before any work; unknown
# names are refused too, by sdp plan as well; fp32 (the default) trains on the CPU and is recorded in the run's config.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 20000
T=(--data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2 --steps 2
   --warmup 0 --val-every 0 --val-batches 1 --threads 1)

expect_error "bf16 on the CPU" "--precision bf16 needs --device cuda" \
  "$SDP_BIN" train "${T[@]}" --out "$WORK/bf16" --precision bf16
expect_error "bf16 on the CPU, said explicitly" "--precision bf16 needs --device cuda" \
  "$SDP_BIN" train "${T[@]}" --out "$WORK/bf16" --precision bf16 --device cpu
expect_error "unknown precision" "unknown --precision 'fp16': use fp32 or bf16" \
  "$SDP_BIN" train "${T[@]}" --out "$WORK/fp16" --precision fp16 --device cuda
expect_error "sdp plan: bf16 on the CPU" "--precision bf16 needs --device cuda" \
  "$SDP_BIN" plan --world 2 --precision bf16
expect_error "sdp plan: unknown precision" "unknown --precision 'fp16': use fp32 or bf16" \
  "$SDP_BIN" plan --world 2 --precision fp16 --device cuda
# `sdp` has no CUDA backend: with --device cuda, bf16 passes the option checks and reaches it.
expect_error "bf16 with --device cuda on sdp" "this sdp was built without CUDA" \
  "$SDP_BIN" train "${T[@]}" --out "$WORK/cuda" --precision bf16 --device cuda

if timeout 120 "$SDP_BIN" train "${T[@]}" --out "$WORK/fp32" --precision fp32 >"$WORK/log" 2>&1; then
  pass "--precision fp32 trains on the CPU"
else
  fail "--precision fp32 on the CPU failed"; cat "$WORK/log"
fi
grep -q '"precision":[[:space:]]*"fp32"' "$WORK/fp32/config.json" && pass "config.json records the precision" \
  || { fail "config.json lacks the precision"; cat "$WORK/fp32/config.json"; }
finish
