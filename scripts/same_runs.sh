#!/usr/bin/env bash
# Shows that a change left training untouched: runs a fixed set of short trainings (gpt, llama,
# vit, resnet; DDP, forward and backward masking with block and neuron units; accumulation, SGD,
# the emulated device) with each of two sdp binaries on 4 ranks, and compares their
# model.safetensors, optim.safetensors and metrics.jsonl byte for byte (metrics with the
# wall-clock fields removed: tokens_per_s, ms_*, elapsed_s).
# Usage: bash scripts/same_runs.sh OLD_SDP NEW_SDP [WORKDIR]
#   e.g. git worktree add /tmp/old <commit> && (cd /tmp/old && cmake -S . -B build && cmake --build build -j)
#        bash scripts/same_runs.sh /tmp/old/build/sdp build/sdp
# Prints one line per run ("same" or "DIFFERENT: file") and exits 1 if any run differs or fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: same_runs.sh OLD_SDP NEW_SDP [WORKDIR]} NEW=${2:?usage: same_runs.sh OLD_SDP NEW_SDP [WORKDIR]}
WORK=${3:-$(mktemp -d /tmp/sdp-same.XXXXXX)}
TEXT=${SDP_TEXT:-../shared/data/tinyshakespeare.txt}
IMAGES=${SDP_IMAGES:-/usr/share/datasets/fashion-mnist}
for f in "$OLD" "$NEW"; do [ -x "$f" ] || { echo "same_runs: no sdp binary at $f" >&2; exit 1; }; done
[ -f "$TEXT" ] || { echo "same_runs: no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
[ -d "$IMAGES" ] || { echo "same_runs: no Fashion-MNIST at $IMAGES: apt-get install dataset-fashion-mnist" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p "$WORK"
head -c 200000 "$TEXT" >"$WORK/text.txt"

COMMON=(--threads 1 --steps 4 --warmup 1 --log-every 1 --val-every 2 --val-batches 2 --seed 5)
GPT=(--model gpt --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --d-ff 64 --seq-len 16 --batch 2)
LLAMA=(--model llama --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --d-ff 64 --seq-len 16 --batch 2)
VIT=(--model vit --data "$IMAGES" --layers 2 --heads 4 --width 32 --d-ff 64 --patch 7 --batch 4)
# Depth 14: block units on depth 8 (one droppable block) would leave workers without one.
RESNET=(--model resnet --data "$IMAGES" --depth 14 --channels 8 --batch 4 --bn-recal-batches 2)
MODES=("none:block" "forward:block" "forward:neuron" "backward:block" "backward:neuron")

# strip FILE: metrics.jsonl without the fields that measure time.
strip() { sed -E 's/"(tokens_per_s|images_per_s|ms_[a-z_]+|elapsed_s)":[^,}]*,?//g; s/,}/}/g' "$1"; }

# one NAME ARGS...: the run NAME with both binaries; compares what they wrote.
failed=0
one() {
  local name=$1; shift
  local bin tag
  for tag in old new; do
    bin=$OLD; [ $tag = old ] || bin=$NEW
    rm -rf "$WORK/$tag/$name"; mkdir -p "$WORK/$tag"
    if ! timeout 300 mpirun -np 4 --oversubscribe "$bin" train "${COMMON[@]}" "$@" \
        --out "$WORK/$tag/$name" </dev/null >"$WORK/$tag/$name.log" 2>&1; then
      echo "$name: FAILED with $tag ($WORK/$tag/$name.log: $(tail -1 "$WORK/$tag/$name.log"))"
      failed=1; return
    fi
  done
  local f diff=""
  for f in model.safetensors optim.safetensors; do
    cmp -s "$WORK/old/$name/$f" "$WORK/new/$name/$f" || diff="$diff $f"
  done
  cmp -s <(strip "$WORK/old/$name/metrics.jsonl") <(strip "$WORK/new/$name/metrics.jsonl") ||
    diff="$diff metrics.jsonl"
  if [ -z "$diff" ]; then echo "$name: same"; else echo "$name: DIFFERENT:$diff"; failed=1; fi
}

for model in gpt llama vit resnet; do
  case $model in gpt) M=("${GPT[@]}") ;; llama) M=("${LLAMA[@]}") ;; vit) M=("${VIT[@]}") ;; resnet) M=("${RESNET[@]}") ;; esac
  for mode in "${MODES[@]}"; do
    mask=${mode%:*} unit=${mode#*:}
    one "$model-$mask-$unit" "${M[@]}" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-coverage 0.5
  done
done
one gpt-accum-sgd "${GPT[@]}" --sdp-mask forward --sdp-unit neuron --grad-accum 2 --optimizer sgd --nesterov
one llama-accum-emulated "${LLAMA[@]}" --sdp-mask backward --sdp-unit block --grad-accum 2 --device emulated
one vit-emulated-shared "${VIT[@]}" --sdp-mask forward --sdp-unit neuron --device emulated-shared
one resnet-emulated "${RESNET[@]}" --sdp-mask backward --sdp-unit neuron --device emulated
[ $failed = 0 ] && echo "same_runs: every run is byte-identical ($WORK)" || echo "same_runs: runs differ ($WORK)"
exit $failed
