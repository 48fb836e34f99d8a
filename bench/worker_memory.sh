#!/usr/bin/env bash
# The largest worker's peak RSS over every rank, rank 0 included, for data parallelism and for SDP,
# on the two workloads of the per-device memory target:
#   - a byte-level GPT (6 layers, width 384, 6 heads, T = 256, B = 8) on tinyshakespeare, 4 steps;
#   - a ResNet-20 on Fashion-MNIST (batch 32), 4 steps.
# Each with 4 workers: DDP, forward masking (block units, C = 0.5) and backward masking (block
# units, C = 0.5). Peak RSS is the kernel's figure for each process (getrusage, in memory.json),
# so it counts everything a process holds, libraries and evaluation copies included. It prints
# one line per run and the ratio of the largest SDP worker to DDP's largest (target: 0.65 or less
# under forward masking).
#
#   bash bench/worker_memory.sh [BUILD_DIR]      (default build)
#
# Environment: DATA (text; default ../shared/data/tinyshakespeare.txt), STEPS (default 4).
set -euo pipefail
BUILD=${1:-build}
SDP=$BUILD/sdp
[ -x "$SDP" ] || { echo "worker_memory: $SDP not found: run bash scripts/build.sh" >&2; exit 1; }
DATA=${DATA:-../shared/data/tinyshakespeare.txt}
[ -f "$DATA" ] || { echo "worker_memory: no text at $DATA: set DATA to tinyshakespeare.txt" >&2; exit 1; }
STEPS=${STEPS:-4}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
WORK=$(mktemp -d /tmp/sdp-worker-memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

GPT=(--data "$DATA" --layers 6 --width 384 --heads 6 --seq-len 256 --batch 8 --val-batches 8)
RESNET=(--model resnet --depth 20 --dataset fashion-mnist --batch 32 --optimizer sgd --lr 0.1
        --momentum 0.9)
MODES=("ddp:--sdp-mask none"
       "forward-block:--sdp-mask forward --sdp-unit block --sdp-coverage 0.5"
       "backward-block:--sdp-mask backward --sdp-unit block --sdp-coverage 0.5")

# Prints "rank0 rank1 ... | largest" in MiB from a run's memory.json.
rss_of() {
    python3 - "$1/memory.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["workers"]
mib = [x["peak_rss"] / 2**20 for x in w]
print(" ".join("%.1f" % m for m in mib), "|", "%.1f" % max(mib))
PY
}

for workload in gpt resnet; do
    [ $workload = gpt ] && args=("${GPT[@]}") || args=("${RESNET[@]}")
    ddp_max=""
    echo "== $workload, 4 workers, $STEPS steps: peak RSS MiB of ranks 0-3 | largest"
    for entry in "${MODES[@]}"; do
        name=${entry%%:*}
        read -r -a mode <<<"${entry#*:}"
        out="$WORK/$workload-$name"
        mpirun -np 4 --oversubscribe "$SDP" train "${args[@]}" "${mode[@]}" --steps "$STEPS" \
            --val-every 0 --log-every "$STEPS" --out "$out" >"$out.log" 2>&1 ||
            { echo "worker_memory: $workload $name failed:"; tail -5 "$out.log"; exit 1; }
        read -r line < <(rss_of "$out")
        largest=${line##*| }
        [ -z "$ddp_max" ] && ddp_max=$largest
        ratio=$(awk -v a="$largest" -v b="$ddp_max" 'BEGIN { printf "%.3f", a / b }')
        printf '  %-15s %s   (largest / DDP largest = %s)\n' "$name" "$line" "$ratio"
    done
done
