# Inputs as users give them, where sdp once took them wrongly:
#  1. A relative shard pattern (--data 'dir/train_*.bin', --val-data 'dir/val_*.bin', as the
#     README's FineWeb example) expands from the working directory.
#  2. The vocabulary covers the validation shards: an id that only validation holds widens it, and
#     a --vocab too small for it is refused before any step, not at the first evaluation.
#  3. sdp sample conditions on the last --seq-len bytes of a longer prompt, as it slides its
#     window while generating: the continuation is that of the prompt's tail, not of its head.
#  4. Validation data that is empty, or given where it cannot be used, is refused.
#  5. --out naming a file says so.
#  6. An option that --model ignores (--depth for a transformer) is named in one warning.
source "$(dirname "$0")/lib.sh"

# shard PATH SEED N MAX: an llm.c shard of N random token ids in [0, MAX).
shard() {
  python3 - "$@" <<'PY'
import random, struct, sys
path, seed, n, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
random.seed(seed)
toks = [random.randrange(top) for _ in range(n)]
head = [20240520, 1, n] + [0] * 253
open(path, "wb").write(struct.pack("<256i", *head) + struct.pack("<%dH" % n, *toks))
PY
}
M=(--layers 2 --heads 2 --width 16 --seq-len 16 --batch 2 --threads 1)
make_text "$WORK/text0.txt" 20000

mkdir -p "$WORK/fw"
shard "$WORK/fw/part_train_000.bin" 1 20000 100
shard "$WORK/fw/part_train_001.bin" 2 20000 100
shard "$WORK/fw/part_val_000.bin" 3 4000 100
shard "$WORK/wide_val.bin" 4 4000 150

# 1. The pattern as a user types it, from the folder above the shards.
(cd "$WORK" && timeout 60 "$SDP_BIN" train "${M[@]}" --steps 3 --val-every 0 --out "$WORK/rel" \
  --data 'fw/part_train_*.bin' --val-data 'fw/part_val_*.bin' >"$WORK/rel.log" 2>&1)
if grep -q "40000 train tokens, 4000 val tokens" "$WORK/rel.log"; then
  pass "relative shard patterns expand from the working directory"
else fail "relative shard patterns: $(grep -m1 -E 'error|tokens' "$WORK/rel.log")"; fi

# 2. Validation ids past the training ones.
timeout 60 "$SDP_BIN" train "${M[@]}" --steps 4 --val-every 2 --out "$WORK/wide" \
  --data "$WORK/fw/part_train_000.bin" --val-data "$WORK/wide_val.bin" >"$WORK/wide.log" 2>&1
if grep -q "vocab 150," "$WORK/wide.log" && grep -q "final val loss" "$WORK/wide.log"; then
  pass "the vocabulary covers the validation shard (150 tokens) and the run evaluates"
else fail "a validation shard with wider ids: $(grep -m1 -E 'error|vocab' "$WORK/wide.log")"; fi
expect_error "--vocab smaller than the validation shard's ids, refused before training" \
  "--vocab 100 is smaller than the data's vocabulary (150 tokens)" \
  "$SDP_BIN" train "${M[@]}" --steps 4 --val-every 2 --vocab 100 --out "$WORK/never" \
  --data "$WORK/fw/part_train_000.bin" --val-data "$WORK/wide_val.bin"

expect_error "sdp sample of a run on token ids" "has a 150-token vocabulary (llm.c token ids)" \
  "$SDP_BIN" sample --run "$WORK/wide" --length 4

# 4. Validation asked for and not there: an empty --val-data shard, or --val-data for an image
#    model (which validates on its dataset's test split), stops the run with one line for the job
#    instead of training without validation.
shard "$WORK/empty_val.bin" 5 0 100
expect_job_error "an empty --val-data shard" "--val-data '$WORK/empty_val.bin' holds no tokens" 2 \
  "$SDP_BIN" train "${M[@]}" --steps 2 --out "$WORK/never" \
  --data "$WORK/fw/part_train_000.bin" --val-data "$WORK/empty_val.bin"
expect_job_error "--val-data with text" "--val-data is for llm.c shards" 2 \
  "$SDP_BIN" train "${M[@]}" --steps 2 --out "$WORK/never" --data "$WORK/text0.txt" \
  --val-data "$WORK/fw/part_val_000.bin"
if [ -d "$FMNIST" ]; then
  expect_job_error "--val-data for an image model" "--val-data is for llm.c token shards" 2 \
    "$SDP_BIN" train --model resnet --dataset fashion-mnist --data "$FMNIST" --steps 1 \
    --out "$WORK/never" --val-data "$WORK/fw/part_val_000.bin"
else
  echo "skip: --val-data for an image model: Fashion-MNIST is not in $FMNIST"
fi
# 5. --out naming a file: the file is what is wrong, not permissions.
: >"$WORK/a_file"
expect_error "--out naming a file" "run directory '$WORK/a_file' is a file, not a directory" \
  "$SDP_BIN" train "${M[@]}" --steps 2 --out "$WORK/a_file" --data "$WORK/fw/part_train_000.bin"

# 3. A prompt longer than the context.
# Generated, not the shared text: 300 steps learn it well enough to continue two prompts apart.
for i in $(seq 1 1500); do echo "the quick brown fox $i jumps over dogs"; done >"$WORK/text.txt"
timeout 120 "$SDP_BIN" train "${M[@]}" --steps 300 --lr 1e-2 --val-every 0 --data "$WORK/text.txt" \
  --out "$WORK/lm" >"$WORK/lm.log" 2>&1 || fail "training the model to sample from"
long="First Citizen: Before we proceed any further, hear me speak."
tail16=${long: -16}
head16=${long:0:16}
continuation() { # PROMPT: what sdp sample writes after echoing it
  timeout 60 "$SDP_BIN" sample --run "$WORK/lm" --prompt "$1" --length 24 --temperature 0 \
    2>/dev/null | tr -d '\n' | cut -c$((${#1} + 1))-
}
c_long=$(continuation "$long") c_tail=$(continuation "$tail16") c_head=$(continuation "$head16")
if [ "$c_tail" = "$c_head" ]; then
  fail "the model continues the prompt's head and tail alike ('$c_tail'): the check needs a model that tells them apart"
elif [ "$c_long" = "$c_tail" ]; then
  pass "a long prompt continues as its last 16 bytes do ('$c_long')"
else fail "a long prompt continued as '$c_long'; its last 16 bytes as '$c_tail', its first as '$c_head'"; fi

# ---- 6. options that --model ignores ----------------------------------------------------------
make_text "$WORK/w.txt" 20000
W=(--data "$WORK/w.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2 --steps 1 --threads 1)
timeout 60 "$SDP_BIN" train "${W[@]}" --depth 8 --crop-pad 2 --out "$WORK/w1" >/dev/null 2>"$WORK/w1.err"
timeout 60 "$SDP_BIN" train "${W[@]}" --out "$WORK/w2" >/dev/null 2>"$WORK/w2.err"
if grep -qx "sdp: warning: --depth does not apply to --model gpt: it is ignored" "$WORK/w1.err" &&
   grep -qx "sdp: warning: --crop-pad does not apply to --model gpt: it is ignored" "$WORK/w1.err" &&
   [ "$(grep -c warning "$WORK/w1.err")" -eq 2 ] && ! grep -q warning "$WORK/w2.err"; then
  pass "--depth and --crop-pad on a gpt: one warning each, none without them"
else fail "warnings for options a gpt ignores:"; cat "$WORK/w1.err" "$WORK/w2.err"; fi
finish
