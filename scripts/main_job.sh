#!/usr/bin/env bash
# The main job: installs what sdp needs, builds it, and trains a byte-level GPT on
# tinyshakespeare with 4 MPI workers twice, with data parallelism and with SDP (forward
# masking, block units, C = 0.5), then prints a table comparing the two.
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${SDP_TEXT:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TEXT" ]; then
  echo "main job: no text at '$TEXT'. Get tinyshakespeare (see README, 'Data') and run" >&2
  echo "  SDP_TEXT=/path/to/tinyshakespeare.txt bash scripts/main_job.sh" >&2
  exit 1
fi
bash scripts/setup.sh
bash scripts/build.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
STEPS=${SDP_STEPS:-300}
OUT=runs/main
rm -rf "$OUT"
COMMON=(--data "$TEXT" --model gpt --layers 4 --heads 4 --width 128 --seq-len 128 --batch 8
        --steps "$STEPS" --lr 3e-3 --log-every 25 --val-every 100 --val-batches 16)
echo "== data parallelism, 4 workers"
mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" --sdp-mask none --out "$OUT/ddp"
echo
echo "== SDP: forward masking, block units, C = 0.5, 4 workers"
mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" --sdp-mask forward --sdp-unit block \
  --sdp-coverage 0.5 --out "$OUT/sdp-forward-block"
echo
echo "== summary (largest worker; see each run's memory.json for every worker)"
build/sdp report "$OUT/ddp" "$OUT/sdp-forward-block"
