# Bad input of every kind gets one line naming the problem, a non-zero exit, and no crash; under
# mpiexec, one line for the whole job (printed by rank 0), with nothing that reads like a crash.
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
expect_error "unknown option" "unknown option '--bogus': run with --help" "$SDP_BIN" train "${T[@]}" --bogus 1
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
# sdp eval keeps the run's --batch and --seq-len: data too small for them gets advice eval can
# follow, on one rank and on four.
printf 'First Citizen:' >"$WORK/short.txt"
expect_error "eval on data too small" "evaluate on fewer ranks, or on more data (--data FILE)" \
  "$SDP_BIN" eval --run "$WORK/run" --data "$WORK/short.txt"
grep -q -- "--batch or" "$WORK/stderr" && fail "eval's advice names an option eval lacks"
head -c 100 "$WORK/text.txt" >"$WORK/small.txt"
expect_job_error "eval on data too small" "evaluate on fewer ranks" 4 "$SDP_BIN" eval --run "$WORK/run" \
  --data "$WORK/small.txt" --threads 1
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
# A run without validation data says how to measure it, and that way works.
"$SDP_BIN" train "${T[@]}" --val-frac 0 --out "$WORK/noval" >"$WORK/noval.log" 2>&1
grep -q "sdp eval --run $WORK/noval --data FILE measures the checkpoint" "$WORK/noval.log" &&
  pass "a run without validation data points at sdp eval --data" ||
  { fail "a run without validation data: summary"; tail -3 "$WORK/noval.log"; }
expect_error "eval of a run without validation data" "run $WORK/noval has no validation data" \
  "$SDP_BIN" eval --run "$WORK/noval"
"$SDP_BIN" eval --run "$WORK/noval" --data "$WORK/text.txt" >"$WORK/noval.eval" 2>&1 &&
  grep -q "nats/token" "$WORK/noval.eval" && pass "... and sdp eval --data measures it" ||
  { fail "sdp eval --data on a run without validation data"; cat "$WORK/noval.eval"; }
mkdir -p "$WORK/nockpt" && cp "$WORK/run/config.json" "$WORK/nockpt/"
expect_error "eval of a run that never saved" "holds no checkpoint (no model.safetensors)" \
  "$SDP_BIN" eval --run "$WORK/nockpt"
expect_error "sample of a run that never saved" "holds no checkpoint (no model.safetensors)" \
  "$SDP_BIN" sample --run "$WORK/nockpt"
ln -sfn "$WORK/loop" "$WORK/loop"
expect_error "a looping link as --out" "cannot be reached (Too many levels of symbolic links)" \
  "$SDP_BIN" train "${T[@]}" --out "$WORK/loop"
expect_error "a prompt past the option limit" "--prompt value is 600 bytes long: give at most 511" \
  "$SDP_BIN" sample --run "$WORK/run" --prompt "$(printf 'a%.0s' $(seq 600))"
expect_error "resnet --channels past the limit" "--channels 100000 makes the last stage 400000 channels wide" \
  "$SDP_BIN" plan --model resnet --channels 100000
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

# ---- option names are whole ---------------------------------------------------------------------
# getopt_long would take an abbreviation as the option it abbreviates (`sdp eval --batch 1` ran as
# --batches 1): every command refuses it and names the option meant.
expect_error "eval: --batch is not --batches" "unknown option '--batch': did you mean --batches?" \
  "$SDP_BIN" eval --run "$WORK/run" --batch 1
expect_error "train: an abbreviation" "unknown option '--lr-mi': did you mean --lr-min?" \
  "$SDP_BIN" train "${T[@]}" --lr-mi 1e-4
expect_error "train: a misspelling" "unknown option '--stpes': did you mean --steps?" \
  "$SDP_BIN" train "${T[@]}" --stpes 3
expect_error "sample: an abbreviation" "unknown option '--len': did you mean --length?" \
  "$SDP_BIN" sample --run "$WORK/run" --len 3
expect_error "plan: an abbreviation" "unknown option '--wor': did you mean --world?" \
  "$SDP_BIN" plan --wor 4
expect_error "report: an abbreviation" "unknown option '--gro': did you mean --group?" \
  "$SDP_BIN" report --gro "$WORK/run"
expect_error "an option without its value" "--steps needs a value" "$SDP_BIN" train "${T[@]}" --steps

# ---- one line per job -----------------------------------------------------------------------------
# An error that every rank detects alike is printed once, by rank 0, and nothing is created: bad
# options before MPI_Init, a broken SDP setup after it, before any data loads.
J=(--data "$WORK/text.txt" --layers 2 --heads 2 --width 16 --seq-len 16 --batch 2 --steps 1
   --warmup 0 --threads 1 --out "$WORK/never")
for n in 4 3; do
  expect_job_error "a bad option" "unknown option '--bogus'" "$n" "$SDP_BIN" train "${J[@]}" --bogus 1
done
expect_job_error "an abbreviated option" "did you mean --lr-min?" 4 "$SDP_BIN" train "${J[@]}" --lr-mi 1
expect_job_error "a bad value" "--warmup 5 exceeds the schedule's 1 steps" 4 "$SDP_BIN" train "${J[@]}" --warmup 5
# What the options decide of the model, optimizer, GEMMs and device is checked before MPI_Init
# too, though the library that would refuse it later sees one rank alone; the data's vocabulary,
# which every rank loads alike, after loading.
expect_job_error "heads not dividing the width" "--heads 3 does not divide --width 16" 2 \
  "$SDP_BIN" train "${J[@]}" --heads 3
expect_job_error "llama with an odd head size" "llama style needs an even head size" 2 \
  "$SDP_BIN" train "${J[@]}" --model llama --width 6
expect_job_error "a dropout of 1" "--dropout must be in [0, 1)" 2 "$SDP_BIN" train "${J[@]}" --dropout 1
expect_job_error "an unknown optimizer" "unknown --optimizer 'foo'" 2 "$SDP_BIN" train "${J[@]}" --optimizer foo
expect_job_error "a zero eps" "adamw eps 0 is invalid" 2 "$SDP_BIN" train "${J[@]}" --eps 0
expect_job_error "a momentum of 2" "sgd momentum 2 is outside [0, 1)" 2 \
  "$SDP_BIN" train "${J[@]}" --optimizer sgd --momentum 2
expect_job_error "an unknown GEMM provider" "unknown --gemm 'foo'" 2 "$SDP_BIN" train "${J[@]}" --gemm foo
expect_job_error "an unknown device" "unknown --device 'foo'" 2 "$SDP_BIN" train "${J[@]}" --device foo
expect_job_error "--device cuda in sdp" "this sdp was built without CUDA" 2 \
  "$SDP_BIN" train "${J[@]}" --device cuda
expect_job_error "a vocabulary below the data's" "--vocab 10 is smaller than the data's vocabulary" 2 \
  "$SDP_BIN" train "${J[@]}" --vocab 10
if [ -d "$FMNIST" ]; then
  expect_job_error "a ViT patch not dividing the image" "--patch 5 does not divide the image size 28" 2 \
    "$SDP_BIN" train --model vit --dataset fashion-mnist --data "$FMNIST" --patch 5 --steps 1 \
    --threads 1 --out "$WORK/never"
else
  echo "skip: a ViT patch not dividing the image: Fashion-MNIST is not in $FMNIST"
fi
# MNIST has no packaged default: without --data it must not read Fashion-MNIST under its name.
expect_job_error "--dataset mnist without --data" "--dataset mnist needs --data DIR" 2 \
  "$SDP_BIN" train --model resnet --dataset mnist --steps 1 --threads 1 --out "$WORK/never"
if [ -d "$FMNIST" ]; then
  expect_job_error "a crop padding past the image" "--crop-pad 1000 exceeds the 28-pixel side" 2 \
    "$SDP_BIN" train --model resnet --data "$FMNIST" --crop-pad 1000 --steps 1 --threads 1 \
    --out "$WORK/never"
fi
# A file where an image dataset's directory belongs is named as a file, not as missing.
echo text >"$WORK/not_a_dir"
expect_job_error "a file as an IDX directory" "is a file, not the directory of an IDX dataset" 2 \
  "$SDP_BIN" train --model resnet --data "$WORK/not_a_dir" --steps 1 --threads 1 --out "$WORK/never"
expect_job_error "a file as a CIFAR directory" "is a file, not the CIFAR-10 directory" 2 \
  "$SDP_BIN" train --model resnet --dataset cifar10 --data "$WORK/not_a_dir" --steps 1 --threads 1 \
  --out "$WORK/never"
# Data every rank reads alike ends the job with one line, not an MPI_Abort banner.
: >"$WORK/empty.txt"
printf 'JUNKJUNKJUNK' >"$WORK/junk.bin"
expect_job_error "a missing text file (2 ranks)" "text file '$WORK/no_such.txt' does not exist" 2 \
  "$SDP_BIN" train --data "$WORK/no_such.txt" --steps 1 --threads 1 --out "$WORK/never"
expect_job_error "an empty text file (2 ranks)" "is empty" 2 \
  "$SDP_BIN" train --data "$WORK/empty.txt" --steps 1 --threads 1 --out "$WORK/never"
expect_job_error "a shard with a wrong magic (2 ranks)" "it is not an llm.c token shard" 2 \
  "$SDP_BIN" train --data "$WORK/junk.bin" --steps 1 --threads 1 --out "$WORK/never"
expect_job_error "a missing IDX directory (2 ranks)" "IDX dataset directory '$WORK/no_such_dir' does not exist" 2 \
  "$SDP_BIN" train --model resnet --data "$WORK/no_such_dir" --steps 1 --threads 1 --out "$WORK/never"
# Ranks whose hosts hold other data at the same path (here rank 1 sees another text file bind-mounted
# over it) must not build models of other sizes and fail in a collective: the data is compared.
head -c 15000 "$WORK/text.txt" >"$WORK/other.txt"
cat >"$WORK/other_data.sh" <<'SH'
#!/bin/bash
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then
  exec unshare -m bash -c 'mount --bind "$OTHER" "$TARGET" && exec "$@"' x "$@"
fi
exec "$@"
SH
chmod +x "$WORK/other_data.sh"
if unshare -m true 2>/dev/null; then
  export OTHER="$WORK/other.txt" TARGET="$WORK/text.txt"
  expect_job_error "ranks reading other data at the same path" "rank 1 reads other data than rank 0" 2 \
    -x OTHER -x TARGET "$WORK/other_data.sh" "$SDP_BIN" train "${J[@]}"
else
  echo "skip: ranks reading other data: unshare -m is not permitted here"
fi
# A disk that fills while the run logs: metrics.jsonl's lost lines end the run with one line naming
# the file and the cause (its writes were once unchecked: lines vanished and the run exited 0).
if unshare -m true 2>/dev/null; then
  mkdir -p "$WORK/small"
  unshare -m bash -c 'mount -t tmpfs -o size=64k tmpfs "$1" && shift && exec "$@"' x "$WORK/small" \
    timeout 60 "$SDP_BIN" train --data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 \
    --batch 2 --steps 100000 --log-every 1 --val-every 0 --ckpt-every 0 --threads 1 \
    --out "$WORK/small/run" >"$WORK/full.out" 2>"$WORK/full.err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(grep -c . "$WORK/full.err")" = 1 ] &&
    grep -q "cannot write $WORK/small/run/metrics.jsonl (No space left on device)" "$WORK/full.err"; then
    pass "a full disk under metrics.jsonl: one line naming it, status 1"
  else fail "a full disk under metrics.jsonl: status $rc"; cat "$WORK/full.err"; fi
  # A disk already full: the lock file cannot be written. One line naming it, and no directory
  # left behind (there was once an unnamed file and an empty directory with a .lock).
  # (The mount lives in unshare's namespace: what is left is listed there, into full.left.)
  unshare -m bash -c 'mount -t tmpfs -o size=8k tmpfs "$1" && head -c 8192 /dev/zero >"$1/fill"
    d=$1; shift; "$@"; rc=$?; ls -A "$d" >"$d.left"; exit $rc' x "$WORK/small" \
    timeout 60 "$SDP_BIN" train --data "$WORK/text.txt" \
    --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2 --steps 2 --threads 1 \
    --out "$WORK/small/full" >"$WORK/full.out" 2>"$WORK/full.err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(grep -c . "$WORK/full.err")" = 1 ] &&
    grep -q "cannot write the lock file '$WORK/small/full/.lock' (No space left on device)" "$WORK/full.err" &&
    [ "$(cat "$WORK/small.left")" = fill ]; then
    pass "a full disk under the run directory's lock: one line naming it, nothing left"
  else fail "a full disk under the run directory's lock: status $rc"; cat "$WORK/full.err"; fi
else
  echo "skip: a full disk under metrics.jsonl: unshare -m is not permitted here"
fi
# Workers that would own nothing: 2 blocks with k = 1 cover 2 workers.
BLOCK=(--sdp-unit block --sdp-coverage 0.25)
expect_job_error "workers owning no block" "with --sdp-unit block, 2 droppable blocks and k = 1 of N = 4, workers 2 and 3 would own no block: use --sdp-unit neuron" \
  4 "$SDP_BIN" train "${J[@]}" --sdp-mask forward "${BLOCK[@]}"
expect_job_error "a worker owning no block" "k = 1 of N = 3, worker 2 would own no block" \
  3 "$SDP_BIN" train "${J[@]}" --sdp-mask backward --sdp-unit block --sdp-owners 1
expect_job_error "workers owning no block (--sim-world)" "workers 2 and 3 would own no block" \
  0 "$SDP_BIN" train "${J[@]}" --sdp-mask forward "${BLOCK[@]}" --sim-world 4 --sim-rank 0
# Masking needs workers to split the model among.
for mask in forward backward; do
  expect_job_error "--sdp-mask $mask without mpirun" \
    "SDP needs at least 2 workers: run it under mpirun -np N (or with --sdp-mask none, data parallelism)" \
    0 "$SDP_BIN" train "${J[@]}" --sdp-mask "$mask"
done
expect_job_error "--sdp-mask on one rank" "SDP needs at least 2 workers" 1 "$SDP_BIN" train "${J[@]}" --sdp-mask backward
# Coverage: in (0, 1], and a fraction that gives a whole k, within rounding of its digits.
expect_job_error "a coverage above 1" "--sdp-coverage must be in (0, 1]" \
  4 "$SDP_BIN" train "${J[@]}" --sdp-mask forward --sdp-coverage 1.5
expect_job_error "a coverage that gives no whole k" "--sdp-coverage 0.5 with 3 workers gives k = 1.5 owners per unit, which is not a whole number: use --sdp-coverage 0.333333 or 0.666667 (k = 1 or 2 of N = 3), or give k itself with --sdp-owners k" \
  3 "$SDP_BIN" train "${J[@]}" --sdp-mask forward --sdp-coverage 0.5
if timeout 60 "$SDP_BIN" train "${J[@]}" --out "$WORK/third" --sdp-mask forward --sdp-unit block \
     --sdp-coverage 0.6666667 --sim-world 3 >"$WORK/third.log" 2>&1 && grep -q "k = 2 of N = 3" "$WORK/third.log"
then pass "--sdp-coverage 0.6666667 of 3 workers is k = 2"
else fail "--sdp-coverage 0.6666667 of 3 workers"; tail -3 "$WORK/third.log"; fi
# SDP options under data parallelism: one warning (rank 0), and the run goes on.
if timeout 60 "$MPIEXEC" --oversubscribe -n 4 "$SDP_BIN" train "${J[@]}" --out "$WORK/dp" \
     --sdp-unit block --branch-scale none >"$WORK/dp.log" 2>&1 &&
   [ "$(grep -c warning "$WORK/dp.log")" = 1 ] &&
   grep -q "^sdp: warning: --sdp-unit and --branch-scale are ignored under data parallelism (--sdp-mask none)" "$WORK/dp.log"
then pass "SDP options under --sdp-mask none: $(grep warning "$WORK/dp.log")"
else fail "SDP options under --sdp-mask none: no single warning"; cat "$WORK/dp.log"; fi

# sdp plan refuses and warns alike.
P=(plan --layers 2 --heads 2 --width 16)
expect_job_error "sdp plan: workers owning no block" "workers 2 and 3 would own no block" \
  0 "$SDP_BIN" "${P[@]}" --world 4 --sdp-mask forward "${BLOCK[@]}"
expect_job_error "sdp plan: masking on one worker" \
  "SDP needs at least 2 workers: use --world N with N >= 2 (or --sdp-mask none for data parallelism)" \
  0 "$SDP_BIN" "${P[@]}" --world 1 --sdp-mask backward
expect_job_error "sdp plan: a coverage above 1" "--sdp-coverage must be in (0, 1]" \
  0 "$SDP_BIN" "${P[@]}" --world 4 --sdp-mask forward --sdp-coverage 1.5
expect_job_error "sdp plan: a coverage that gives no whole k" "use --sdp-coverage 0.333333 or 0.666667" \
  0 "$SDP_BIN" "${P[@]}" --world 3 --sdp-mask forward --sdp-coverage 0.5
"$SDP_BIN" "${P[@]}" --world 3 --sdp-mask forward --sdp-unit block --sdp-coverage 0.6666667 \
  2>&1 | head -1 | grep -q "k = 2 (C = 0.667)" && pass "sdp plan: --sdp-coverage 0.6666667 of 3 is k = 2" ||
  fail "sdp plan: --sdp-coverage 0.6666667 of 3"
if "$SDP_BIN" "${P[@]}" --world 4 --sdp-owners 2 --sdp-chunks 2 >/dev/null 2>"$WORK/plan.err" &&
   [ "$(cat "$WORK/plan.err")" = "sdp: warning: --sdp-owners and --sdp-chunks are ignored under data parallelism (--sdp-mask none): drop them, or choose --sdp-mask forward or backward" ]
then pass "sdp plan: SDP options under --sdp-mask none get one warning"
else fail "sdp plan: SDP options under --sdp-mask none"; cat "$WORK/plan.err"; fi
[ ! -e "$WORK/never" ] && pass "no refused job created its run directory" || fail "$WORK/never exists"
finish
