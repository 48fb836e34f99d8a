# PyTorch as the outside oracle (tests/torch/, docs/testing.md "PyTorch oracle"): models written
# in PyTorch from the documented architecture, and SDP written from docs/architecture.md and
# docs/design.md, replay real sdp runs in float64 and must give the same losses, gradient norms,
# weights and optimizer state (invariant I3 of docs/architecture.md, checked from outside).
#  - Gradients: one step of each family (gpt, llama, vit, resnet) on one worker with SGD, momentum
#    and --lr 0: the checkpoint keeps the initial weights, and the momentum buffer is the gradient.
#  - SDP: 3 steps on 4 ranks (k = 2) of forward and backward masking with block and neuron units,
#    SGD (Nesterov) and AdamW, clipping, warmup and cosine decay, one run with 2 micro-batches per
#    step and one with a random assignment, against the reference that reads each run's plan.json.
#  - Control: the oracle given a plan that is not the run's must reject the run.
# Skipped (77) without python3's torch and numpy (apt-get install python3-torch python3-numpy).
source "$(dirname "$0")/lib.sh"
PY=
for py in ${SDP_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import torch, numpy' 2>/dev/null; then PY=$py; break; fi
done
if [ -z "$PY" ]; then
  echo "skip: python3 with torch and numpy is not installed (apt-get install python3-torch python3-numpy)"
  exit 77
fi
ORACLE="$(cd "$(dirname "$0")" && pwd)/torch/oracle.py"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)

# run N DIR ARGS...: an sdp training run on N ranks into DIR; fails the test with its log if it fails.
run() {
  local n=$1 dir=$2; shift 2
  if ! timeout 120 "${MPI[@]}" -n "$n" "$SDP_BIN" train --threads 1 --log-every 1 --val-every 0 \
      --val-batches 1 "$@" --out "$dir" >"$dir.log" 2>&1; then
    fail "run $(basename "$dir") on $n ranks failed"; tail -5 "$dir.log"; return 1
  fi
}

make_text "$WORK/text.txt" 20000
TEXT=(--data "$WORK/text.txt" --seq-len 32 --batch 4)
GPT=(--model gpt --layers 4 --heads 4 --width 32 "${TEXT[@]}")
LLAMA=(--model llama --layers 2 --heads 4 --width 32 "${TEXT[@]}")
# Images: Fashion-MNIST's training split, and its first 64 test images, so that each run's final
# evaluation is quick (the reference never reads the test split).
IMAGES=()
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist" all 64
  IMAGES=(--data "$WORK/fmnist" --crop-pad 0 --bn-recal-batches 1)
else
  echo "note: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): vit and resnet skipped"
fi
VIT=(--model vit --layers 2 --heads 4 --width 32 --patch 7 --batch 4 "${IMAGES[@]}")
# Batches of 2 keep every ReLU input of these runs far enough from 0 for float32 (oracle.py).
RESNET=(--model resnet --depth 14 --channels 4 --batch 2 "${IMAGES[@]}")

GRAD=(--steps 1 --warmup 0 --lr 0 --lr-min 0 --optimizer sgd --momentum 0.9 --weight-decay 0 --clip 0)
SGD=(--steps 3 --warmup 1 --lr 0.1 --lr-min 0.01 --optimizer sgd --momentum 0.9 --nesterov
     --weight-decay 5e-4 --clip 1)
ADAMW=(--steps 3 --warmup 1 --lr 1e-2 --lr-min 1e-3 --optimizer adamw --weight-decay 0.1 --clip 1)
K2=(--sdp-owners 2)
checks=()
families=(gpt llama)
[ ${#IMAGES[@]} -gt 0 ] && families+=(vit resnet)
for f in "${families[@]}"; do
  case $f in
    gpt) M=("${GPT[@]}") ;; llama) M=("${LLAMA[@]}") ;;
    vit) M=("${VIT[@]}") ;; resnet) M=("${RESNET[@]}") ;;
  esac
  run 1 "$WORK/${f}_grad" "${M[@]}" "${GRAD[@]}" || continue
  checks+=("$WORK/${f}_grad")
  touch "$WORK/${f}_grad.ok"
done
# sdp_check NAME FAMILY ARGS...: an SDP run on 4 ranks, checked from the family's initial weights.
sdp_check() {
  local name=$1 f=$2; shift 2
  [ -f "$WORK/${f}_grad.ok" ] || return 0 # the family's initial weights
  run 4 "$WORK/$name" "$@" && checks+=("$WORK/$name,init=$WORK/${f}_grad")
}
sdp_check gpt_bwd_block gpt "${GPT[@]}" "${ADAMW[@]}" "${K2[@]}" --sdp-mask backward --sdp-unit block
sdp_check gpt_bwd_neuron gpt "${GPT[@]}" "${SGD[@]}" "${K2[@]}" --sdp-mask backward --sdp-unit neuron
sdp_check gpt_fwd_block gpt "${GPT[@]}" "${ADAMW[@]}" "${K2[@]}" --sdp-mask forward --sdp-unit block \
  --sdp-assign random
sdp_check gpt_fwd_neuron gpt "${GPT[@]}" "${SGD[@]}" "${K2[@]}" --sdp-mask forward --sdp-unit neuron
sdp_check llama_fwd_neuron llama "${LLAMA[@]}" "${ADAMW[@]}" "${K2[@]}" --sdp-mask forward \
  --sdp-unit neuron --grad-accum 2
if [ ${#IMAGES[@]} -gt 0 ]; then
  sdp_check vit_bwd_neuron vit "${VIT[@]}" "${SGD[@]}" "${K2[@]}" --sdp-mask backward --sdp-unit neuron
  sdp_check resnet_fwd_neuron resnet "${RESNET[@]}" "${SGD[@]}" "${K2[@]}" --sdp-mask forward \
    --sdp-unit neuron
  sdp_check resnet_bwd_block resnet "${RESNET[@]}" "${ADAMW[@]}" "${K2[@]}" --sdp-mask backward \
    --sdp-unit block
fi
# Control: the block units' owners moved by one worker (a plan sdp did not train with).
if [ -f "$WORK/gpt_bwd_block/model.safetensors" ]; then
  "$PY" - "$WORK/gpt_bwd_block/plan.json" "$WORK/wrong_plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
for u in plan["units"]:
    u["owners"] = [(r + 1) % plan["world"] for r in u["owners"]]
json.dump(plan, open(sys.argv[2], "w"))
EOF
  checks+=("$WORK/gpt_bwd_block,init=$WORK/gpt_grad,plan=$WORK/wrong_plan.json,control")
fi

if [ ${#checks[@]} -gt 0 ]; then
  "$PY" -B "$ORACLE" "${checks[@]}" >"$WORK/oracle.log" 2>&1 # -B: no __pycache__ in tests/torch
  rc=$?
  while IFS= read -r line; do
    case $line in
      ok:*) pass "${line#ok: }" ;;
      FAIL:*) fail "${line#FAIL: }" ;;
      *) echo "$line" ;;
    esac
  done <"$WORK/oracle.log"
  [ "$rc" -eq 0 ] || [ "$FAILED" -gt 0 ] || fail "the oracle exited with status $rc"
fi
finish
