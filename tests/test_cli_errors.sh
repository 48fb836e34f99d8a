# Bad input of every kind gets one line naming the problem, a non-zero exit, and no crash.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 20000
T=(--data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2 --steps 2
   --warmup 0 --out "$WORK/run")

expect_error "missing data file" "nope.txt" "$SDP_BIN" train --data "$WORK/nope.txt" --steps 1
expect_error "no data given" "--data" "$SDP_BIN" train --steps 1
expect_error "heads not dividing width" "does not divide" "$SDP_BIN" train "${T[@]}" --heads 3
expect_error "negative size" "--layers expects an integer from 1 to 2147483647" "$SDP_BIN" train "${T[@]}" --layers -2
expect_error "non-numeric size" "--batch expects an integer" "$SDP_BIN" train "${T[@]}" --batch abc
expect_error "unknown model" "unknown --model 'bert'" "$SDP_BIN" train "${T[@]}" --model bert
expect_error "unknown optimizer" "unknown --optimizer" "$SDP_BIN" train "${T[@]}" --optimizer lion
expect_error "unknown option" "unknown or incomplete option" "$SDP_BIN" train "${T[@]}" --bogus 1
expect_error "unknown command" "unknown command" "$SDP_BIN" frobnicate
expect_error "warmup beyond steps" "--warmup" "$SDP_BIN" train "${T[@]}" --warmup 5
expect_error "odd head size for llama" "even head size" "$SDP_BIN" train "${T[@]}" --model llama --width 6 --heads 2
expect_error "vocab smaller than data" "smaller than the data's vocabulary" "$SDP_BIN" train "${T[@]}" --vocab 10
expect_error "dropout of 1" "--dropout must be in [0, 1)" "$SDP_BIN" train "${T[@]}" --dropout 1
expect_error "negative dropout" "--dropout expects a number from 0" "$SDP_BIN" train "${T[@]}" --dropout -0.1
expect_error "dropout on the resnet" "the resnet has no dropout" "$SDP_BIN" plan --model resnet --dropout 0.1
expect_error "sequence longer than data" "holds 0 sequences of 30001 tokens" "$SDP_BIN" train "${T[@]}" --seq-len 30000 --batch 4

# llm.c shards: wrong magic, truncated, wrong version.
python3 - "$WORK" <<'PY'
import struct, sys
d = sys.argv[1]
def shard(name, magic=20240520, version=1, count=100, actual=100):
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", magic, version, count, *([0] * 253)))
        f.write(struct.pack(f"<{actual}H", *[(i * 7) % 300 for i in range(actual)]))
shard("magic.bin", magic=1234)
shard("short.bin", count=100, actual=60)
shard("version.bin", version=7)
PY
# A .bin file given as --data is a shard, whatever its first bytes say (see test_cli_hostile.sh);
# --val-data is always read as shards.
expect_error "truncated shard" "truncated or corrupt" "$SDP_BIN" train "${T[@]}" --data "$WORK/short.bin"
expect_error "wrong shard version" "version" "$SDP_BIN" train "${T[@]}" --data "$WORK/version.bin"
cp "$WORK/short.bin" "$WORK/good_train.bin"
python3 - "$WORK" <<'PY'
import struct, sys
d = sys.argv[1]
with open(f"{d}/good_train.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 5000, *([0] * 253)))
    f.write(struct.pack("<5000H", *[(i * 7) % 300 for i in range(5000)]))
PY
expect_error "wrong magic" "expected 20240520" "$SDP_BIN" train "${T[@]}" --data "$WORK/good_train.bin" --val-data "$WORK/magic.bin"
expect_error "no shard matches" "no files match" "$SDP_BIN" train "${T[@]}" --data "$WORK/good_train.bin" --val-data "$WORK/none_*.bin"

# A corrupted checkpoint is detected on resume and on eval.
"$SDP_BIN" train "${T[@]}" >/dev/null 2>&1 || fail "small training run failed"
python3 - "$WORK/run/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-5] ^= 0x40
open(p, "wb").write(b)
PY
expect_error "corrupted checkpoint (resume)" "checksum mismatch" "$SDP_BIN" train --resume "$WORK/run" --steps 4
expect_error "corrupted checkpoint (eval)" "checksum mismatch" "$SDP_BIN" eval --run "$WORK/run"
expect_error "resume from a non-run" "not a run directory" "$SDP_BIN" train --resume "$WORK"
expect_error "changing the model on resume" "cannot change when resuming" "$SDP_BIN" train --resume "$WORK/run" --width 32
expect_error "eval without a run" "needs --run" "$SDP_BIN" eval
expect_error "val-data with text" "--val-data is for llm.c shards" "$SDP_BIN" train "${T[@]}" --val-data "$WORK/x_*.bin"

# Data too small for the batch names the file and the split; nothing is left behind.
printf a >"$WORK/one.txt"
expect_error "a one-byte text file" "the training split of --data '$WORK/one.txt' holds 0 sequences" \
  "$SDP_BIN" train "${T[@]}" --data "$WORK/one.txt" --out "$WORK/tiny"
expect_error "a validation split too small" "the validation split (--val-frac 0.001) of --data" \
  "$SDP_BIN" train "${T[@]}" --val-frac 0.001 --out "$WORK/tiny"
# A learning rate that a float cannot hold fails before the run directory is made.
expect_error "a learning rate beyond float" "--lr expects a number from 0 to" \
  "$SDP_BIN" train "${T[@]}" --lr 1e39 --out "$WORK/tiny"
expect_error "sdp plan with a typo in --world" "at most 65536" "$SDP_BIN" plan --world 100000000
[ ! -e "$WORK/tiny" ] && pass "the failed runs left no run directory" || fail "left $(ls -A "$WORK/tiny")"
finish
