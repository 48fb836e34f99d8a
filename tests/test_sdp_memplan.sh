# `sdp plan` predicts, without allocating, exactly the bytes each worker of `sdp train`
# allocates for params, grads, optimizer state, activations, scratch and buffers, its evaluation
# and checkpoint buffers at their peak, and the bytes it sends per step: compared rank by rank,
# rank 0 included, on real MPI runs of several configurations (each evaluates and checkpoints).
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
MODEL=(--layers 4 --heads 4 --width 32 --seq-len 16 --batch 2)
DATA=(--data "$WORK/text.txt")
check() {
  local n=$1; shift
  local name="N=$n $*"
  timeout 120 "$MPIEXEC" -n "$n" --oversubscribe "$SDP_BIN" train "${DATA[@]}" \
    "${MODEL[@]}" --steps 2 --val-every 0 --threads 1 --out "$WORK/run" --overwrite "$@" >"$WORK/log" 2>&1 \
    || { fail "$name: training failed"; cat "$WORK/log"; return; }
  # stderr apart: a warning (--layers, say, which a resnet ignores) is not part of the JSON
  "$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world "$n" --threads 1 --json "$@" >"$WORK/plan.json" \
    2>"$WORK/plan.err" || { fail "$name: plan failed"; cat "$WORK/plan.err"; return; }
  if python3 - "$WORK/plan.json" "$WORK/run/memory.json" <<'PY'
import json, sys
plan, measured = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["params", "grads", "optimizer", "activations", "scratch", "buffers", "eval_ckpt",
        "sent_per_step"]
bad = [(p["rank"], k, p[k], m[k]) for p, m in zip(plan["workers"], measured["workers"])
       for k in keys if p[k] != m[k]]
assert len(plan["workers"]) == len(measured["workers"])
for b in bad[:6]: print("rank %d %s: planned %d, measured %d" % b)
sys.exit(1 if bad else 0)
PY
  then pass "$name: plan equals measured bytes on every rank"; else fail "$name: plan differs"; fi
}
check 2 --sdp-mask none
check 4 --sdp-mask forward --sdp-unit block
check 4 --sdp-mask forward --sdp-unit neuron
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2
check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3
check 4 --sdp-mask forward --sdp-unit block --sdp-assign random --model llama
check 4 --sdp-mask backward --sdp-unit block --sdp-owners 1 --optimizer sgd
# Dropout's masks (bits, with the activations) on every worker, each its own subnetwork's.
check 2 --sdp-mask none --dropout 0.1
check 4 --sdp-mask forward --sdp-unit block --dropout 0.1
check 4 --sdp-mask forward --sdp-unit neuron --dropout 0.2 --model llama
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2 --dropout 0.1
# ... and exactly them: 1 + 2 per layer of B*T*C bits, here 9 masks of 2*16*32 bits = 128 bytes.
"$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world 2 --json >"$WORK/p0.json" 2>&1 &&
  "$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world 2 --json --dropout 0.1 >"$WORK/p1.json" 2>&1 &&
  python3 - "$WORK/p0.json" "$WORK/p1.json" <<'PY' &&
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
d = [y["activations"] - x["activations"] for x, y in zip(a["workers"], b["workers"])]
print("activation bytes added by dropout per worker: %s (expected 9 x 128)" % d)
sys.exit(0 if d == [9 * 128] * 2 else 1)
PY
  pass "plan --dropout adds its masks' bytes to the activations, exactly" ||
  fail "plan --dropout: the masks' bytes differ from 9 x 128"
# Activation recomputation: each layer's input and one layer's activations (and masks).
check 2 --sdp-mask none --recompute layer --dropout 0.1
check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3 --recompute layer
check 4 --sdp-mask forward --sdp-unit block --recompute layer --model llama --dropout 0.1
# ... and exactly them: each of the 4 layers keeps its input (B*T*C floats) and 3 of them no longer
# keep the rest, 15 B*T*C floats, 4 statistics per row and attention's B*H*T log-sum-exps.
"$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world 2 --json >"$WORK/p0.json" 2>&1 &&
  "$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world 2 --json --recompute layer >"$WORK/p1.json" 2>&1 &&
  python3 - "$WORK/p0.json" "$WORK/p1.json" <<'PY' &&
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
B, T, C, H = 2, 16, 32, 4
expected = 3 * (15 * B * T * C + 4 * B * T + B * H * T) * 4
d = [x["activations"] - y["activations"] for x, y in zip(a["workers"], b["workers"])]
print("activation bytes saved by recomputation per worker: %s (expected %d)" % (d, expected))
sys.exit(0 if d == [expected] * 2 else 1)
PY
  pass "plan --recompute layer keeps one layer's activations beside the inputs, exactly" ||
  fail "plan --recompute layer: the bytes saved differ from 3 layers' activations"
# --zero 1: each owner keeps the optimizer state of its shard of every bucket, gathered for the
# checkpoint shard by shard; the bytes sent are the all-reduce's.
check 2 --sdp-mask none --zero 1
check 4 --sdp-mask none --zero 1
check 4 --sdp-mask forward --sdp-unit neuron --zero 1
check 4 --sdp-mask forward --sdp-unit block --zero 1 --sdp-assign random --model llama
check 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --zero 1
check 3 --sdp-mask backward --sdp-unit neuron --sdp-owners 2 --zero 1 --optimizer sgd
# --zero 2: the gradient buffer holds the shards, the stem and head, and two layers' slots.
check 2 --sdp-mask none --zero 2
check 4 --sdp-mask none --zero 2 --layers 5
check 4 --sdp-mask forward --sdp-unit neuron --zero 2
check 4 --sdp-mask forward --sdp-unit block --zero 2 --sdp-assign random --model llama
check 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --zero 2
check 3 --sdp-mask backward --sdp-unit neuron --sdp-owners 2 --zero 2 --optimizer sgd
# Groups of 3: a third of a piece is not a whole byte count, and the run rounds each piece down.
check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3 --zero 2
check 4 --sdp-mask forward --sdp-unit block --sdp-owners 3 --zero 2 --layers 8
# ... and with several micro-batches, each but the last reduce-scatters its layers' pieces too.
check 4 --sdp-mask forward --sdp-unit neuron --zero 2 --grad-accum 3
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2 --zero 2 --grad-accum 2
# Checkpoints and blocks sent in windows smaller than the model, as for any large model.
export SDP_CKPT_WINDOW=5000
check 4 --sdp-mask forward --sdp-unit block
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2
check 4 --sdp-mask forward --sdp-unit neuron --zero 1
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2 --zero 1
check 4 --sdp-mask forward --sdp-unit neuron --zero 2
check 3 --sdp-mask backward --sdp-unit block --sdp-owners 2 --zero 2
unset SDP_CKPT_WINDOW

# The image models on Fashion-MNIST. The ResNet: batch-norm buffers, 4-D convolution weights
# split by channel.
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist"
  MODEL=(--model resnet --depth 8 --channels 4 --batch 4 --optimizer sgd)
  DATA=(--data "$WORK/fmnist" --bn-recal-batches 2)
  # Depth 14 for block units: depth 8 has one droppable block, too few for 4 workers.
  check 4 --sdp-mask forward --sdp-unit block --depth 14
  check 4 --sdp-mask forward --sdp-unit neuron
  check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3
  check 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --depth 14
  # Recomputation: each block's input and batch statistics, one block's convolution outputs.
  check 2 --sdp-mask none --recompute layer
  check 4 --sdp-mask forward --sdp-unit neuron --recompute layer
  # No re-estimation of the statistics: no calibration pass, and none of its buffers.
  check 4 --sdp-mask forward --sdp-unit neuron --bn-recal-batches 0
  # --zero 1: running statistics have no optimizer state, so no shard covers them.
  check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3 --zero 1
  # --zero 2: the stem's channels belong to units; stages give blocks of three sizes.
  check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3 --zero 2
  check 4 --sdp-mask forward --sdp-unit block --depth 14 --zero 2
  check 2 --sdp-mask none --zero 2 --depth 14
  # The ViT: patch stem and class token shared, layers split into blocks or heads and neurons.
  MODEL=(--model vit --layers 4 --heads 4 --width 16 --d-ff 32 --patch 7 --batch 4)
  DATA=(--data "$WORK/fmnist")
  check 2 --sdp-mask none
  # Depth 14 for block units: depth 8 has one droppable block, too few for 4 workers.
  check 4 --sdp-mask forward --sdp-unit block --depth 14
  check 4 --sdp-mask forward --sdp-unit neuron
  check 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3
  check 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --depth 14
  check 4 --sdp-mask forward --sdp-unit neuron --dropout 0.1
  check 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --recompute layer --dropout 0.1
  check 4 --sdp-mask forward --sdp-unit neuron --zero 2 --recompute layer
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

# --device cuda: a GPT worker's scratch is the CUDA context's fixed workspaces (32 MiB for cuBLAS,
# 16 MiB of our own, a 4-byte flag) and attention's score matrices for the worker's heads H (two
# [H, T, T] and B*H*T row sums of floats; in bf16 at the fused kernels' head sizes, the row sums
# alone), computed here by hand: B=2, T=16. Data parallelism
# keeps all 4 heads; forward masking with neuron units at C = 0.5 keeps 2 per layer. The GPU test
# (tests/gpu/test_cuda_memplan.sh) checks the plan against the device's own tally.
cuda_scratch() { # H [fused]: the bytes expected; fused keeps only the row sums
  local scores=$((2 * $1 * 16 * 16))
  [ "${2:-}" = fused ] && scores=0
  echo $((32 * 1048576 + 16 * 1048576 + 4 + (scores + 2 * $1 * 16) * 4))
}
check_cuda_scratch() { # name, worker bytes, DDP bytes, then plan options
  local name=$1 worker=$2 ddp=$3; shift 3
  "$SDP_BIN" plan --world 4 --device cuda --sdp-mask forward --sdp-unit neuron --json "$@" \
    >"$WORK/cuda.json" 2>&1 || { fail "$name: plan failed"; cat "$WORK/cuda.json"; return; }
  python3 - "$WORK/cuda.json" "$worker" "$ddp" <<'PY' &&
import json, sys
plan, worker, ddp = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
got = [w["scratch"] for w in plan["workers"]]
print("planned scratch: workers %s, DDP %d; expected %d and %d" % (got, plan["ddp"]["scratch"],
                                                                  worker, ddp))
sys.exit(0 if got == [worker] * 4 and plan["ddp"]["scratch"] == ddp else 1)
PY
    pass "$name" || fail "$name: scratch differs from the CUDA backend's sizes"
}
MODEL=(--layers 4 --heads 4 --width 32 --seq-len 16 --batch 2)
check_cuda_scratch "plan --device cuda: scratch is the CUDA workspaces plus attention for the \
worker's heads" "$(cuda_scratch 2)" "$(cuda_scratch 4)" "${MODEL[@]}"
# bf16 runs the fused attention, whose scores stay on chip, at head sizes 16, 32, 64 and 128 only:
# head size 8 keeps the score matrices, head size 16 (2 heads of width 32) drops them.
check_cuda_scratch "plan --device cuda --precision bf16, head size 8: the score matrices stay" \
  "$(cuda_scratch 2)" "$(cuda_scratch 4)" "${MODEL[@]}" --precision bf16
MODEL=(--layers 4 --heads 2 --width 32 --seq-len 16 --batch 2 --sdp-chunks 2)
check_cuda_scratch "plan --device cuda --precision bf16, head size 16: only the row sums" \
  "$(cuda_scratch 1 fused)" "$(cuda_scratch 2 fused)" "${MODEL[@]}" --precision bf16
check_cuda_scratch "plan --device cuda --precision fp32, head size 16: the score matrices" \
  "$(cuda_scratch 1)" "$(cuda_scratch 2)" "${MODEL[@]}"
finish
