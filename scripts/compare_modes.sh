#!/usr/bin/env bash
# Trains the byte-level GPT on tinyshakespeare with N = 4 workers and C = 0.5 for the same number
# of steps in every mode (DDP, forward/backward x block/neuron), then prints one table:
# validation loss, tokens/s per worker, the largest worker's memory, and bytes sent per step.
# Usage: bash scripts/compare_modes.sh [steps]   (run after scripts/build.sh)
#   SDP_MODES="ddp forward-block ..." runs only those (the table still shows every finished run).
# Neuron units use 6 chunks per group: 6 heads do not split into the default N = 4 chunks.
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${SDP_TEXT:-../shared/data/tinyshakespeare.txt}
STEPS=${1:-60}
OUT=${SDP_OUT:-runs/compare}
[ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
MODEL=(--data "$TEXT" --model gpt --layers 6 --heads 6 --width 384 --seq-len 256 --batch 8
       --steps "$STEPS" --lr 1e-3 --log-every 10 --val-every "$STEPS" --val-batches 20 --seed 7)
MODES=${SDP_MODES:-ddp forward-block forward-neuron backward-block backward-neuron}
run() {
  local name=$1; shift
  case " $MODES " in *" $name "*) ;; *) return 0 ;; esac
  rm -rf "${OUT:?}/$name"
  echo "== $name"
  mpirun -np 4 --oversubscribe build/sdp train "${MODEL[@]}" --out "$OUT/$name" "$@" \
    | grep -E "^step .*/$STEPS \||summary|largest|communication|^  (worker|[0-3]|DDP) "
}
run ddp --sdp-mask none
run forward-block --sdp-mask forward --sdp-unit block --sdp-coverage 0.5
run forward-neuron --sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5 --sdp-chunks 6
run backward-block --sdp-mask backward --sdp-unit block --sdp-coverage 0.5
run backward-neuron --sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5 --sdp-chunks 6
build/sdp report "$OUT"/ddp "$OUT"/forward-block "$OUT"/forward-neuron "$OUT"/backward-block \
  "$OUT"/backward-neuron
