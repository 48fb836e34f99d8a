# `sdp eval` over a large file shows its progress: every --progress-every seconds (default 2) rank
# 0 prints one line on stderr with the tokens or images done of the total, the rate and the time
# left, and stdout keeps the single result line. --progress-every 0 prints after every batch, so
# a small file here takes many intervals.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/train.txt" 20000
make_text "$WORK/big.txt" 200000
"$SDP_BIN" train --data "$WORK/train.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 4 \
  --warmup 0 --val-batches 1 --threads 1 --steps 2 --out "$WORK/run" >"$WORK/train.log" 2>&1 ||
  { fail "the small training run failed"; cat "$WORK/train.log"; }
E=(eval --run "$WORK/run" --data "$WORK/big.txt" --threads 1)
LINE='^eval +[0-9]+\.[0-9]% \| [0-9.]+[kMG]?/[0-9.]+[kMG]? (tok|img) \| [0-9.]+[kMG]? (tok|img)/s \| (eta|done in) [0-9hms]+$'
RESULT='^eval .*: loss [0-9.]+ nats/token \([0-9.]+ bits/token\), perplexity [0-9.]+ \([0-9]+ tokens\)$'

# check_progress WHAT: $WORK/err holds progress lines only, at least two, the last at 100%, and
# $WORK/out the result line alone.
check_progress() {
  local n; n=$(grep -cE "$LINE" "$WORK/err")
  if [ "$n" -ge 2 ] && [ "$n" -eq "$(wc -l <"$WORK/err")" ] &&
     tail -1 "$WORK/err" | grep -q '^eval 100\.0% | .* | done in ' &&
     [ "$(wc -l <"$WORK/out")" -eq 1 ] && grep -qE "$RESULT" "$WORK/out"; then
    pass "$1: $n progress lines on stderr, the result alone on stdout ($(tail -1 "$WORK/err"))"
  else
    fail "$1: progress lines"; head -3 "$WORK/err"; tail -2 "$WORK/err"; cat "$WORK/out"
  fi
}

timeout 60 "$SDP_BIN" "${E[@]}" --progress-every 0 >"$WORK/out" 2>"$WORK/err"
check_progress "one rank, a line per batch"
cp "$WORK/out" "$WORK/out0"
# 200000 bytes in sequences of 4 x 16 tokens (and their targets, one byte further): 199.9k.
grep -q "| 199.9k/199.9k tok |" "$WORK/err" ||
  fail "the total is not the file's tokens: $(tail -1 "$WORK/err")"

# No lines: with --progress-every -1, and for a pass shorter than the default 2 s; the result is
# the same either way.
timeout 60 "$SDP_BIN" "${E[@]}" --progress-every -1 >"$WORK/out" 2>"$WORK/err"
[ ! -s "$WORK/err" ] && cmp -s "$WORK/out" "$WORK/out0" &&
  pass "--progress-every -1: no progress, the same result" ||
  { fail "--progress-every -1"; cat "$WORK/err" "$WORK/out"; }
timeout 60 "$SDP_BIN" eval --run "$WORK/run" --threads 1 >"$WORK/out" 2>"$WORK/err"
[ ! -s "$WORK/err" ] && grep -qE "$RESULT" "$WORK/out" &&
  pass "a short evaluation prints no progress at the default interval" ||
  { fail "a short evaluation printed progress"; cat "$WORK/err"; }

# Two ranks: rank 0 alone prints, and its totals are both workers'.
timeout 60 "${MPI[@]}" -n 2 "$SDP_BIN" "${E[@]}" --progress-every 0 >"$WORK/out" 2>"$WORK/err"
check_progress "two ranks"
[ "$(grep -c '^eval 100\.0%' "$WORK/err")" -eq 1 ] && pass "two ranks: one closing line" ||
  fail "two ranks: $(grep -c '^eval 100\.0%' "$WORK/err") closing lines"

# Images: a tiny ViT evaluated over the 10000 images of the test split.
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  "$SDP_BIN" train --model vit --layers 1 --heads 2 --width 8 --d-ff 16 --patch 7 --batch 8 \
    --steps 1 --warmup 0 --val-every 0 --val-batches 1 --threads 1 --out "$WORK/vit" \
    >"$WORK/train.log" 2>&1 || { fail "the small ViT run failed"; tail -3 "$WORK/train.log"; }
  timeout 60 "$SDP_BIN" eval --run "$WORK/vit" --threads 1 --progress-every 0 >"$WORK/out" \
    2>"$WORK/err"
  if [ "$(grep -cE "$LINE" "$WORK/err")" -ge 2 ] && tail -1 "$WORK/err" | grep -q '^eval 100\.0% | 10\.0k/10\.0k img' &&
     grep -q 'test accuracy' "$WORK/out" && [ "$(wc -l <"$WORK/out")" -eq 1 ]; then
    pass "images: progress in images ($(tail -1 "$WORK/err"))"
  else
    fail "images: progress"; cat "$WORK/err" "$WORK/out"
  fi
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
finish
