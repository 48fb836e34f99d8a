#!/usr/bin/env bash
# The main job: installs what sdp needs, builds it, and trains a ResNet-20 on Fashion-MNIST with 4
# MPI workers twice, with data parallelism and with SDP as docs/results.md recommends it (forward
# masking, neuron units, C = 0.5), then prints the full comparison table and a short one: test
# accuracy and the largest worker's memory (over all ranks) against data parallelism's.
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
echo "== SDP: forward masking, neuron units, C = 0.5, 4 workers"
mpirun -np 4 --oversubscribe build/sdp train "${COMMON[@]}" --sdp-mask forward --sdp-unit neuron \
  --sdp-coverage 0.5 --out "$OUT/sdp-forward-neuron"
echo
echo "== summary (largest worker over all ranks, rank 0 included; every worker's figures are in each run's memory.json)"
build/sdp report "$OUT/ddp" "$OUT/sdp-forward-neuron"
echo
echo "== at a glance"
python3 - "$OUT/ddp" "$OUT/sdp-forward-neuron" <<'PY'
import json, os, sys

def run(d):
    vals = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if '"val_loss"' in l]
    w = json.load(open(os.path.join(d, "memory.json")))["workers"]
    state = max(x["params"] + x["grads"] + x["optimizer"] for x in w)
    return vals[-1]["val_accuracy"], max(x["peak_rss"] for x in w), state

ddp = run(sys.argv[1])
print("| run | test accuracy | largest worker peak RSS | params+grads+optimizer (largest) |")
print("|---|---|---|---|")
for d in sys.argv[1:]:
    acc, rss, state = run(d)
    vs = lambda a, b: "" if d == sys.argv[1] else " (%.2fx DDP)" % (a / b)
    print("| %s | %.2f%% | %.1f MiB%s | %.2f MiB%s |" % (os.path.basename(d), 100 * acc,
          rss / 2**20, vs(rss, ddp[1]), state / 2**20, vs(state, ddp[2])))
PY
