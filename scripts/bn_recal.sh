#!/usr/bin/env bash
# Batch norm under forward masking (docs/results.md): a ResNet-20 trained for a few steps on
# Fashion-MNIST by 4 workers, forward masking with block units at C = 0.5, evaluated on the whole
# test split three ways:
#   - with the running statistics averaged over each unit's owners (--bn-recal-batches 0);
#   - with the assembled model's statistics re-estimated on 50 training batches (the default);
#   - with k = N (every worker owns every block, so the subnetworks are the whole model).
# Prints sdp report's table of the three runs.
#   SDP_STEPS  steps of each run (default 20)
#   SDP_OUT    where the runs go (default runs/bn_recal)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
STEPS=${SDP_STEPS:-20}
OUT=${SDP_OUT:-runs/bn_recal}
COMMON=(--model resnet --depth 20 --channels 16 --batch 32 --optimizer sgd --lr 0.1
        --momentum 0.9 --nesterov --weight-decay 5e-4 --steps "$STEPS" --val-every "$STEPS"
        --log-every "$STEPS" --seed 1 --sdp-mask forward --sdp-unit block)
run() { # name flags...
  local name=$1; shift
  echo "== $name" >&2
  mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" "$@" --out "$OUT/$name" \
    --overwrite >"$OUT/$name.log" 2>&1 || { tail -3 "$OUT/$name.log" >&2; exit 1; }
}
mkdir -p "$OUT"
run owners-stats --sdp-coverage 0.5 --bn-recal-batches 0
run recal-50 --sdp-coverage 0.5 --bn-recal-batches 50
run k-equals-n --sdp-owners 4 --bn-recal-batches 50
build/sdp report "$OUT/owners-stats" "$OUT/recal-50" "$OUT/k-equals-n"
