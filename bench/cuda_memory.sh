#!/usr/bin/env bash
# Peak GPU memory of one SDP worker against a data-parallel worker, for a LLaMA-style model of
# about 1B parameters: N = 8 workers, C = 0.5 (k = 4), forward and backward masking with block
# units. Each worker runs alone on the GPU (`sdp-cuda train --device cuda --sim-world 8
# --sim-rank r`), taking the rank that `sdp plan` says holds the most; the DDP row is the whole
# model (--sdp-mask none). For each it prints, by category, what `sdp plan` predicts and what the
# device's tally measured, and the device's own peak (cudaMemGetInfo, which also counts the CUDA
# context and cuBLAS).
#
#   bash bench/cuda_memory.sh [BUILD_DIR]     (default build; needs BUILD_DIR/sdp-cuda and a GPU)
#
# Environment: DATA (a text file; default ../shared/data/tinyshakespeare.txt, else generated),
# STEPS (default 3), BATCH (default 4), SEQ (default 1024), EXTRA (more sdp train options).
set -euo pipefail
BUILD=${1:-build}
SDP_CUDA=$BUILD/sdp-cuda
[ -x "$SDP_CUDA" ] || { echo "cuda_memory: $SDP_CUDA not found: build with nvcc on PATH (see docs/cuda.md)" >&2; exit 1; }
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "cuda_memory: no CUDA device (nvidia-smi lists none): nothing measured"; exit 0
fi
WORK=$(mktemp -d /tmp/sdp-cuda-memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
DATA=${DATA:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$DATA" ]; then
  DATA=$WORK/text.txt
  for i in $(seq 1 30000); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$DATA"
fi
# About 1B parameters: 16 layers of width 2048 (16 heads of 128), SwiGLU 5632, vocabulary 32000
# with an untied head (953M).
MODEL=(--model llama --layers 16 --width 2048 --heads 16 --d-ff 5632 --vocab 32000
       --seq-len "${SEQ:-1024}" --batch "${BATCH:-4}")
RUN=(--data "$DATA" --steps "${STEPS:-3}" --warmup 1 --log-every 1 --val-every 0 --val-batches 1
     ${EXTRA:-})

# largest_rank ARGS...: the rank whose planned total is the largest.
largest_rank() {
  "$SDP_CUDA" plan --device cuda "${MODEL[@]}" --world 8 --json "$@" >"$WORK/plan.json"
  python3 - "$WORK/plan.json" <<'PY'
import json, sys
keys = ["params", "grads", "optimizer", "activations", "scratch", "buffers"]
w = json.load(open(sys.argv[1]))["workers"]
print(max(w, key=lambda r: sum(r[k] for k in keys))["rank"])
PY
}

printf '%-22s %-12s %10s %10s %10s %10s %10s %12s\n' mode "" params grads optimizer activations scratch "device peak"
for mode in none forward backward; do
  SDP=(--sdp-mask "$mode")
  [ "$mode" != none ] && SDP+=(--sdp-unit block --sdp-coverage 0.5)
  r=$(largest_rank "${SDP[@]}")
  out=$WORK/$mode
  "$SDP_CUDA" train --device cuda "${MODEL[@]}" "${RUN[@]}" "${SDP[@]}" --sim-world 8 \
    --sim-rank "$r" --out "$out" >"$WORK/$mode.log" 2>&1 \
    || { echo "cuda_memory: $mode run failed:"; tail -5 "$WORK/$mode.log"; exit 1; }
  python3 - "$WORK/plan.json" "$out/memory.json" "$r" "$mode" <<'PY'
import json, sys
plan, meas = (json.load(open(p)) for p in sys.argv[1:3])
r, mode = int(sys.argv[3]), sys.argv[4]
p, m = plan["workers"][r], meas["workers"][0]
keys = ["params", "grads", "optimizer", "activations", "scratch"]
gib = lambda b: "%.2f GiB" % (b / 2**30)
name = "DDP (whole model)" if mode == "none" else "%s block, rank %d" % (mode, r)
print("%-22s %-12s %s" % (name, "planned", " ".join("%10s" % gib(p[k]) for k in keys)))
print("%-22s %-12s %s %12s" % ("", "measured", " ".join("%10s" % gib(m[k]) for k in keys),
                               gib(m["device_peak_in_use"])))
bad = [k for k in keys if p[k] != m[k]]
if bad: print("%-22s mismatch in %s" % ("", ", ".join(bad)))
PY
  grep -E "tokens/s|summary" "$WORK/$mode.log" | tail -2 | sed 's/^/    /'
done
