#!/usr/bin/env bash
# The main job: installs what sdp needs, builds it, and trains a ResNet-20 on Fashion-MNIST with 4
# MPI workers twice, with data parallelism and with SDP (forward masking, block units, C = 0.5),
# then prints a table of test accuracy, per-worker memory and bytes communicated.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh # installs dataset-fashion-mnist too
bash scripts/build.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
STEPS=${SDP_STEPS:-300}
OUT=runs/main
rm -rf "$OUT"
COMMON=(--model resnet --depth 20 --dataset fashion-mnist --batch 32 --steps "$STEPS"
        --optimizer sgd --lr 0.1 --lr-min 0.001 --momentum 0.9 --nesterov --weight-decay 5e-4
        --warmup 20 --flip --log-every 25 --val-every 0 --seed 1)
echo "== data parallelism: ResNet-20, Fashion-MNIST, 4 workers"
mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" --sdp-mask none --out "$OUT/ddp"
echo
echo "== SDP: forward masking, block units, C = 0.5, 4 workers"
mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" --sdp-mask forward --sdp-unit block \
  --sdp-coverage 0.5 --out "$OUT/sdp-forward-block"
echo
echo "== summary (largest worker over all ranks, rank 0 included; every worker's figures are in each run's memory.json)"
build/sdp report "$OUT/ddp" "$OUT/sdp-forward-block"
