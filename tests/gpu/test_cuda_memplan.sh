# GPU memory is accounted like the CPU's: `sdp-cuda train --device cuda --sim-world N --sim-rank r`
# holds on the device, in each category (params, grads, optimizer, activations, scratch), exactly
# the bytes `sdp plan --device cuda --world N` predicts for rank r, for every rank, in both masking
# regimes and for gpt, llama, vit and resnet, in fp32 and (GPT, fused attention) bf16. The ResNet's scratch may exceed the plan by what
# cuDNN asks for its convolutions at run time, never fall short of it. The device's own peak is
# printed beside. Exits 77 (skipped) without a device.
source "$(dirname "$0")/../lib.sh"
: "${SDP_CUDA_BIN:?ctest sets it to the sdp-cuda program}"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skip: no CUDA device (nvidia-smi lists none)"; exit 77
fi
make_text "$WORK/text.txt" 40000
MODEL=(--layers 4 --heads 4 --width 32 --seq-len 16 --batch 2)
DATA=(--data "$WORK/text.txt")
RUN=(--steps 2 --val-every 0 --val-batches 1 --threads 1 --device cuda)

check_memory() {
  local n=$1; shift
  local name="N=$n $*"
  "$SDP_CUDA_BIN" plan --device cuda "${MODEL[@]}" --vocab 256 --world "$n" --json "$@" \
    >"$WORK/plan.json" 2>&1 \
    || { fail "$name: plan failed"; cat "$WORK/plan.json"; return; }
  for ((r = 0; r < n; r++)); do
    timeout 120 "$SDP_CUDA_BIN" train "${DATA[@]}" "${MODEL[@]}" "${RUN[@]}" --out "$WORK/sim$r" --overwrite \
      --sim-world "$n" --sim-rank "$r" "$@" >"$WORK/log" 2>&1 \
      || { fail "$name rank $r: simulated training on the device failed"; cat "$WORK/log"; return; }
    python3 - "$WORK/plan.json" "$WORK/sim$r/memory.json" "$r" "${MODEL[*]}" <<'PY' \
      || { fail "$name rank $r: device bytes differ from the plan"; return; }
import json, sys
plan, measured = (json.load(open(p)) for p in sys.argv[1:3])
r, resnet = int(sys.argv[3]), "resnet" in sys.argv[4].split()
m, p = measured["workers"][0], plan["workers"][r]
bad = [(k, p[k], m[k]) for k in ["params", "grads", "optimizer", "activations"] if p[k] != m[k]]
if m["scratch"] < p["scratch"] or (m["scratch"] != p["scratch"] and not resnet):
    bad.append(("scratch", p["scratch"], m["scratch"]))
for b in bad: print("rank %d %s: planned %d, measured %d" % ((r,) + b))
print("rank %d: scratch planned %d, measured %d bytes; device peak %d bytes" %
      (r, p["scratch"], m["scratch"], m["device_peak_in_use"]))
sys.exit(1 if bad else 0)
PY
  done
  pass "$name: every simulated rank holds the planned bytes on the device"
}
check_memory 4 --sdp-mask forward --sdp-unit block
check_memory 4 --sdp-mask forward --sdp-unit neuron
check_memory 4 --sdp-mask backward --sdp-unit block --sdp-owners 2
check_memory 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 2 --model llama
# bf16 at head size 16: the fused attention, whose scratch is the row sums alone (no score matrices)
MODEL=(--layers 4 --heads 2 --width 32 --seq-len 16 --batch 2)
check_memory 4 --sdp-mask forward --sdp-unit block --precision bf16
check_memory 4 --sdp-mask backward --sdp-unit neuron --sdp-chunks 2 --sdp-owners 2 --precision bf16
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST/train-images-idx3-ubyte" ]; then
  DATA=(--data "$FMNIST")
  MODEL=(--model vit --layers 4 --heads 4 --width 16 --d-ff 32 --patch 7 --batch 4)
  check_memory 4 --sdp-mask forward --sdp-unit block
  MODEL=(--model resnet --depth 8 --channels 4 --batch 4 --optimizer sgd --bn-recal-batches 2)
  check_memory 4 --sdp-mask forward --sdp-unit neuron
  # Depth 14 for block units: depth 8 has one droppable block, too few for 4 workers.
  check_memory 4 --sdp-mask backward --sdp-unit block --sdp-owners 2 --depth 14
else
  echo "skip: Fashion-MNIST not found in $FMNIST (set SDP_FASHION_MNIST to a copy of it)"
fi
finish
