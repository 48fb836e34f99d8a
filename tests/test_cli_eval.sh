# Validation during training and `sdp eval` afterwards measure the same thing:
#  - every mode validates on data parallelism's batches: forward masking with k = N (bitwise DDP's
#    model) logs DDP's validation losses, and forward masking with k < N (the assembled model
#    evaluated block by block, no worker holding it whole) logs what `sdp eval` reports on the
#    saved model over the same batches;
#  - `sdp eval --run` reads image runs (ResNet, ViT) and reports the accuracy and loss their last
#    validation logged, also where forward masking with k < N evaluated the assembled model block
#    by block (and, for the ResNet, re-estimated and saved its batch-norm statistics that way);
#  - `sdp eval --batches` counts per worker: N ranks with --batches V read what one process reads
#    with N x V; an image run refuses it (it evaluates the whole test split);
#  - `sdp eval --run DIR --data FILE` evaluates FILE, text or llm.c shards: on a file holding
#    exactly the run's validation split it reports what the run's own validation split gives.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)

# train_on N DIR ARGS...: a run on N ranks, one thread each.
train_on() {
  local n=$1 dir=$2; shift 2
  timeout 120 "${MPI[@]}" -n "$n" "$SDP_BIN" train --threads 1 "$@" --out "$dir" >"$dir.log" 2>&1 ||
    { fail "training $dir on $n ranks failed"; tail -3 "$dir.log"; return 1; }
}

# field DIR KEY: KEY of the last validation logged in DIR/metrics.jsonl.
field() {
  grep '"val_loss"' "$1/metrics.jsonl" | tail -1 | grep -o "\"$2\":[^,}]*" | cut -d: -f2
}

# near A B: |A - B| within 1e-4 (sdp eval prints four decimals).
near() {
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4) }'
}

# eval_loss ARGS...: the loss `sdp eval` prints.
eval_loss() {
  "$SDP_BIN" eval --threads 1 "$@" 2>"$WORK/eval.err" | grep -o 'loss [0-9.]*' | cut -d' ' -f2
}

# ---- validation covers data parallelism's batches in every mode --------------------------------
make_text "$WORK/text.txt" 200000
VB=2
GPT=(--data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 32 --batch 4 --steps 10
     --warmup 2 --log-every 5 --val-every 5 --val-batches $VB --seed 3)
vals() { grep -o '"val_loss":[^,]*' "$1/metrics.jsonl"; }
if train_on 4 "$WORK/ddp" "${GPT[@]}" --sdp-mask none &&
   train_on 4 "$WORK/fwd4" "${GPT[@]}" --sdp-mask forward --sdp-owners 4; then
  cmp -s "$WORK/ddp/model.safetensors" "$WORK/fwd4/model.safetensors" ||
    fail "forward masking with k = N = 4 trained a model other than data parallelism's"
  if [ -n "$(vals "$WORK/ddp")" ] && cmp -s <(vals "$WORK/ddp") <(vals "$WORK/fwd4"); then
    pass "forward masking, k = N = 4: the validation losses are data parallelism's ($(vals "$WORK/ddp" | tr '\n' ' '))"
  else
    fail "forward masking, k = N = 4: validation losses differ from data parallelism's"
    paste <(vals "$WORK/ddp") <(vals "$WORK/fwd4")
  fi
fi
# k < N: the logged validation is that of the saved model over DDP's 4 x VB batches, which one
# `sdp eval` process reads in the same order.
for mask in forward backward; do
  dir="$WORK/${mask}2"
  train_on 4 "$dir" "${GPT[@]}" --sdp-mask "$mask" --sdp-owners 2 || continue
  logged=$(field "$dir" val_loss) evaluated=$(eval_loss --run "$dir" --batches $((4 * VB)))
  if [ -n "$evaluated" ] && near "$logged" "$evaluated"; then
    pass "$mask masking, k = 2 of 4: validation $logged = sdp eval over 4 x $VB batches ($evaluated)"
  else
    fail "$mask masking, k = 2 of 4: validation $logged, sdp eval over 4 x $VB batches '$evaluated'"
    cat "$WORK/eval.err"
  fi
done
# --batches is per worker: 2 ranks with VB each read the 2 x VB batches of one process.
if [ -f "$WORK/forward2/model.safetensors" ]; then
  one=$(eval_loss --run "$WORK/forward2" --batches $((2 * VB)))
  two=$("${MPI[@]}" -n 2 "$SDP_BIN" eval --threads 1 --run "$WORK/forward2" --batches $VB \
        2>"$WORK/eval.err" | grep -o 'loss [0-9.]*' | cut -d' ' -f2)
  if [ -n "$one" ] && [ "$one" = "$two" ]; then
    pass "sdp eval --batches counts per worker: 2 ranks x $VB = 1 rank x $((2 * VB)) ($one)"
  else
    fail "sdp eval on 2 ranks with --batches $VB gave '$two', 1 rank with $((2 * VB)) '$one'"
    cat "$WORK/eval.err"
  fi
fi

# ---- sdp eval --run on image runs ----------------------------------------------------------------
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist"
  IMG=(--data "$WORK/fmnist" --batch 8 --steps 4 --warmup 1 --log-every 2 --val-every 4 --seed 7)
  RESNET=(--model resnet --depth 8 --channels 4 --optimizer sgd --lr 0.05)
  VIT=(--model vit --layers 2 --heads 2 --width 16 --d-ff 32 --patch 7 --lr 1e-2)
  RESNET_FWD=(--model resnet --depth 14 --channels 4 --optimizer sgd --lr 0.05 --sdp-mask forward
              --sdp-unit block --sdp-owners 2 --bn-recal-batches 3)
  VIT_FWD=(--model vit --layers 2 --heads 4 --width 16 --d-ff 32 --patch 7 --lr 1e-2 --sdp-mask forward
           --sdp-unit neuron --sdp-owners 2)
  for model in resnet vit resnet_fwd vit_fwd; do
    case $model in
      resnet) M=("${RESNET[@]}") n=2 ;;
      vit) M=("${VIT[@]}") n=2 ;;
      resnet_fwd) M=("${RESNET_FWD[@]}") n=4 ;;
      vit_fwd) M=("${VIT_FWD[@]}") n=4 ;;
    esac
    train_on $n "$WORK/$model" "${M[@]}" "${IMG[@]}" || continue
    out=$("$SDP_BIN" eval --run "$WORK/$model" --threads 1 2>&1)
    loss=$(grep -o 'test loss [0-9.]*' <<<"$out" | cut -d' ' -f3)
    acc=$(grep -o 'accuracy [0-9.]*' <<<"$out" | cut -d' ' -f2)
    want_acc=$(awk -v a="$(field "$WORK/$model" val_accuracy)" 'BEGIN { printf "%.2f", 100 * a }')
    if [ -n "$loss" ] && near "$loss" "$(field "$WORK/$model" val_loss)" && [ "$acc" = "$want_acc" ]; then
      pass "$model: sdp eval --run reports the last validation logged (loss $loss, accuracy $acc%)"
    else
      fail "$model: sdp eval --run gave '$out'; the run logged loss $(field "$WORK/$model" val_loss), accuracy $want_acc%"
    fi
  done
  [ -f "$WORK/resnet/model.safetensors" ] &&
    expect_job_error "sdp eval --batches on an image run, 2 ranks" \
      "image run, which sdp eval evaluates on its whole test split: drop --batches" 2 \
      "$SDP_BIN" eval --run "$WORK/resnet" --threads 1 --batches 3
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

# ---- sdp eval --run DIR --data FILE --------------------------------------------------------------
# Text: 80000 bytes with --val-frac 0.25 hold out exactly the last 20000.
make_text "$WORK/small.txt" 80000
tail -c 20000 "$WORK/small.txt" >"$WORK/small_val.txt"
TINY=(--layers 2 --heads 2 --width 16 --seq-len 32 --batch 4 --steps 2 --warmup 0 --seed 2)
# Shards: the same bytes as llm.c tokens, training and validation apart.
python3 - "$WORK/small.txt" "$WORK" <<'PY'
import array, struct, sys
data = open(sys.argv[1], "rb").read()
for name, part in (("train", data[:60000]), ("val", data[60000:])):
    with open("%s/shard_%s.bin" % (sys.argv[2], name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
        f.write(array.array("H", list(part)).tobytes())
PY
if train_on 1 "$WORK/text_run" --data "$WORK/small.txt" --val-frac 0.25 "${TINY[@]}" &&
   train_on 1 "$WORK/shard_run" --data "$WORK/shard_train.bin" --val-data "$WORK/shard_val.bin" \
     "${TINY[@]}"; then
  for kind in text shard; do
    if [ $kind = text ]; then file="$WORK/small_val.txt"; else file="$WORK/shard_val.bin"; fi
    own=$(eval_loss --run "$WORK/${kind}_run")
    other=$(eval_loss --run "$WORK/${kind}_run" --data "$file")
    if [ -n "$own" ] && [ "$own" = "$other" ]; then
      pass "$kind: sdp eval --data on the validation split's own bytes gives its loss ($own)"
    else
      fail "$kind: sdp eval --data FILE gave '$other', the run's validation split '$own'"
      cat "$WORK/eval.err"
    fi
  done
  # All of FILE is evaluated, not a tail of it: the training part gives another loss.
  train_part=$(eval_loss --run "$WORK/shard_run" --data "$WORK/shard_train.bin")
  [ -n "$train_part" ] && [ "$train_part" != "$(eval_loss --run "$WORK/shard_run")" ] &&
    pass "shard: sdp eval --data on the training shard evaluates it ($train_part)" ||
    fail "shard: sdp eval --data on the training shard gave '$train_part'"
  # Bytes scored as token ids, or ids as bytes, mean nothing: the kind must be the run's.
  expect_error "sdp eval of a text run on token shards" \
    "was trained on byte-level text, but --data $WORK/shard_val.bin is llm.c token shards" \
    "$SDP_BIN" eval --run "$WORK/text_run" --data "$WORK/shard_val.bin" --threads 1
  expect_error "sdp eval of a shard run on text" \
    "was trained on llm.c token shards, but --data $WORK/small_val.txt is byte-level text" \
    "$SDP_BIN" eval --run "$WORK/shard_run" --data "$WORK/small_val.txt" --threads 1
  # A shard run of 256 token ids passes the vocabulary's check: its data names it.
  train_on 1 "$WORK/shard256" --data "$WORK/shard_train.bin" --val-data "$WORK/shard_val.bin" \
    --vocab 256 "${TINY[@]}" &&
    expect_error "sdp sample of a shard run of 256 token ids" \
      "was trained on llm.c token shards ($WORK/shard_train.bin): sdp sample reads and writes bytes" \
      "$SDP_BIN" sample --run "$WORK/shard256" --threads 1
  # The run's data cut at the same path: its own split would now be another; refused, not
  # evaluated as if it were the run's.
  cp -r "$WORK/text_run" "$WORK/cut_run"
  head -c 60000 "$WORK/small.txt" >"$WORK/cut.txt"
  python3 - "$WORK/cut_run/config.json" "$WORK/cut.txt" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["data"] = sys.argv[2]; json.dump(c, open(sys.argv[1], "w"))
PY
  expect_error "sdp eval of a run whose data changed since" \
    "was trained beside 20000 validation tokens, but its data now gives 15000: the data changed since" \
    "$SDP_BIN" eval --run "$WORK/cut_run" --threads 1
fi
finish
