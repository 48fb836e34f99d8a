# Activation recomputation (`--recompute layer`) changes no result: every run below trains with
# --recompute none and with --recompute layer and must write byte for byte the same
# model.safetensors, optim.safetensors and metrics.jsonl (without its wall-clock fields and the
# memory it held), while each worker's activations shrink (memory.json), which shows that the
# second run did recompute. Covered: gpt, llama and vit with dropout (masks drawn again in the
# recomputation), the ResNet's batch norm (running statistics moved once per forward), data
# parallelism, forward and backward masking with block and neuron units on 4 ranks (backward
# masking's backward stops at a worker's lowest owned block), gradient accumulation, the
# emulated device, a simulated worker (--sim-world), a resume that turns recomputation on, and an
# unknown value refused once for the job. (Under forward masking the checkpoint's running
# statistics are re-estimated on the assembled model, so there the ResNet's gradients alone are
# compared; its other modes checkpoint the trained statistics.)
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
COMMON=(--steps 3 --warmup 1 --log-every 1 --val-every 2 --val-batches 2 --threads 1 --seed 7)
tiny_models "$WORK/text.txt"

# strip FILE: metrics.jsonl without what measures time or memory.
strip() {
  sed -E 's/"(tokens_per_s|images_per_s|ms_[a-z_]+|elapsed_s|mem_bytes)":[^,}]*,?//g; s/,}/}/g' "$1"
}

# same NAME N ARGS...: the run with --recompute none and layer; equal files, fewer activations on
# every worker.
same() {
  local name=$1 n=$2; shift 2
  local a="$WORK/$name-none" b="$WORK/$name-layer" f diff=""
  train "$n" "$a" "$@" --recompute none || { fail "$name: --recompute none failed"; tail -3 "$a.log"; return; }
  train "$n" "$b" "$@" --recompute layer || { fail "$name: --recompute layer failed"; tail -3 "$b.log"; return; }
  for f in model.safetensors optim.safetensors; do
    if [ -e "$a/$f" ]; then cmp -s "$a/$f" "$b/$f" || diff="$diff $f"
    elif [[ " $* " != *" --sim-world "* ]]; then diff="$diff $f(missing)"; fi
  done
  cmp -s <(strip "$a/metrics.jsonl") <(strip "$b/metrics.jsonl") || diff="$diff metrics.jsonl"
  grep -qE '"(sim_)?val_loss"' "$a/metrics.jsonl" || diff="$diff (no validation logged)"
  if [ -n "$diff" ]; then fail "$name: --recompute layer differs from none:$diff"; return; fi
  local acts
  acts=$(python3 - "$a/memory.json" "$b/memory.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["workers"] for p in sys.argv[1:3])
print(" ".join("%d->%d" % (x["activations"], y["activations"]) for x, y in zip(a, b)))
sys.exit(0 if len(a) == len(b) and all(y["activations"] < x["activations"] for x, y in zip(a, b))
         else 1)
PY
  ) || { fail "$name: activations did not shrink on every worker: $acts"; return; }
  pass "$name: bitwise the same run, activation bytes per worker $acts"
}

same gpt-ddp-dropout-accum 0 "${GPT[@]}" --dropout 0.1 --grad-accum 2
same gpt-forward-neuron-dropout 4 "${GPT[@]}" --sdp-mask forward --sdp-unit neuron --dropout 0.1
same gpt-backward-block 4 "${GPT[@]}" --sdp-mask backward --sdp-unit block --sdp-owners 2
same llama-forward-block 4 "${LLAMA[@]}" --sdp-mask forward --sdp-unit block
same llama-backward-neuron-dropout 4 "${LLAMA[@]}" --sdp-mask backward --sdp-unit neuron \
  --dropout 0.2
same llama-emulated-forward-neuron 4 "${LLAMA[@]}" --sdp-mask forward --sdp-unit neuron \
  --device emulated
# A simulated worker writes no checkpoint: its losses, gradient norms and validation compare.
same gpt-sim-backward-neuron 0 "${GPT[@]}" --sdp-mask backward --sdp-unit neuron --sim-world 4 \
  --sim-rank 1 --dropout 0.1

# A resume may turn recomputation on (it changes no math): the run equals the uninterrupted one.
A=("${GPT[@]}" --dropout 0.1)
if train 0 "$WORK/whole" "${A[@]}" &&
  train 0 "$WORK/part" "${A[@]}" --stop-after 2 &&
  timeout 300 "$SDP_BIN" train --resume "$WORK/part" --recompute layer >"$WORK/resume.log" 2>&1; then
  if cmp -s "$WORK/whole/model.safetensors" "$WORK/part/model.safetensors" &&
    cmp -s "$WORK/whole/optim.safetensors" "$WORK/part/optim.safetensors" &&
    grep -q '"recompute":.*"layer"' "$WORK/part/config.json"; then
    pass "resume with --recompute layer: bitwise the uninterrupted run, recorded in config.json"
  else
    fail "resume with --recompute layer: checkpoints differ or config.json lacks it"
  fi
else
  fail "resume with --recompute layer failed"; tail -3 "$WORK/resume.log"
fi

expect_job_error "unknown --recompute" "unknown --recompute 'all': use none or layer" 2 \
  "$SDP_BIN" train --data "$WORK/text.txt" --recompute all --out "$WORK/never"

if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  same vit-ddp-dropout 2 "${VIT[@]}" --dropout 0.1
  same vit-backward-neuron-dropout 4 "${VIT[@]}" --sdp-mask backward --sdp-unit neuron \
    --dropout 0.1
  same vit-forward-block 4 "${VIT[@]}" --sdp-mask forward --sdp-unit block
  same resnet-ddp 2 "${RESNET[@]}"
  same resnet-forward-neuron 4 "${RESNET[@]}" --sdp-mask forward --sdp-unit neuron
  same resnet-backward-block 4 "${RESNET[@]}" --sdp-mask backward --sdp-unit block --sdp-owners 2
  same resnet-emulated-backward-neuron 4 "${RESNET[@]}" --sdp-mask backward --sdp-unit neuron \
    --device emulated
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
finish
