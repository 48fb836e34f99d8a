#!/usr/bin/env bash
# sdp's memory levers against what a PyTorch user would pick, in the same run on the same machine:
# one byte-level GPT (default: 6 layers, width 384, 6 heads, T = 256, batch 4 per worker, N = 4:
# the model of docs/network.md) trained STEPS steps on tinyshakespeare by
#   sdp-ddp               sdp, data parallelism (--sdp-mask none)
#   sdp-ddp-recompute     the same with --recompute layer
#   sdp-ddp-zero          the same with --zero 1 (ZeRO stage 1: optimizer state sharded over N)
#   sdp-ddp-zero2         the same with --zero 2 (ZeRO stage 2: gradients sharded too)
#   sdp-fwd               sdp forward masking, neuron units, C = 0.5
#   sdp-fwd-recompute     the same with --recompute layer
#   torch-ddp             PyTorch DistributedDataParallel + AdamW (bench/torch_peer.py)
#   torch-ddp-checkpoint  the same with torch.utils.checkpoint around each layer
#   torch-ddp-zero        the same with ZeroRedundancyOptimizer around AdamW (ZeRO stage 1)
#   torch-baseline        no model, no training: a PyTorch worker that imported torch, joined the
#                         gloo group and read the text (the fixed part of the rows above)
# REPEATS times, the runs interleaved (round 1 runs them all, then round 2, ...) so that the
# machine's load drifts over all of them alike. It prints one table of medians over the rounds:
#   tokens/s   all workers: N * B * T / the median step time of the steps after the first
#              (sdp: rank 0's ms_per_step in metrics.jsonl; PyTorch: each worker's own median,
#              summed over the workers);
#   peak RSS   the largest worker's peak RSS (getrusage: sdp's memory.json, PyTorch's ru_maxrss),
#              everything the process holds, libraries included;
#   accounted  sdp rows: the largest worker's accounted total in memory.json (params, grads,
#              optimizer state, activations, scratch, data, eval+ckpt);
#   x tok/s, x RSS  the ratio to the sdp-ddp row of the same round, median over the rounds.
#
#   bash bench/memory_levers.sh [BUILD_DIR]      (default build)
#
# Environment: DATA (text; default ../shared/data/tinyshakespeare.txt), WORKERS (4), LAYERS (6),
# WIDTH (384), HEADS (6), SEQ_LEN (256), BATCH (4, per worker), STEPS (6), REPEATS (3),
# COVERAGE (0.5, of the sdp-fwd rows), THREADS (per worker; default 0 = cores / workers, as sdp's
# --threads 0), ONLY (a grep -E pattern over the run names; sdp-ddp always runs, as the base),
# PYTHON (an interpreter with torch; default /usr/bin/python3), RUN_TIMEOUT (seconds one run may
# take before the script gives up; default 1800), OUT (keep each round's figures in
# OUT/results.tsv; default a temporary directory, removed).
#
# What is the same: model shape and parameter count (checked, the script stops if they differ),
# batch, sequence length, number of workers, threads per worker, AdamW with sdp's defaults and
# gradient clipping, fp32 on the CPU, every process started by mpirun (so the same binding).
# What differs: PyTorch all-reduces gradients with gloo over localhost TCP, sdp with MPI (shared
# memory between ranks of one node); PyTorch's attention and GEMMs are its own (MKL-DNN/OpenBLAS,
# whatever this torch build uses) against sdp's kernels; sdp ends every run with a validation
# and a checkpoint, which its peak RSS includes (its eval+ckpt category) and PyTorch's runs do
# not do; each PyTorch process carries the Python interpreter and libtorch (a fixed cost of a few
# hundred MiB, in its peak RSS); the data order differs (both draw random windows of the text).
set -euo pipefail
[ -z "${DATA:-}" ] || DATA=$(realpath -m "$DATA")  # relative to where it was started
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SDP=$PWD/$BUILD/sdp
[ -x "$SDP" ] || { echo "memory_levers: $SDP not found: run bash scripts/build.sh" >&2; exit 1; }
DATA=${DATA:-$(realpath -m ../shared/data/tinyshakespeare.txt)}
[ -f "$DATA" ] || { echo "memory_levers: no text at $DATA: set DATA to tinyshakespeare.txt" >&2; exit 1; }
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    { echo "memory_levers: $PYTHON has no torch with gloo: set PYTHON" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "memory_levers: mpirun not found" >&2; exit 1; }
WORKERS=${WORKERS:-4} LAYERS=${LAYERS:-6} WIDTH=${WIDTH:-384} HEADS=${HEADS:-6}
SEQ_LEN=${SEQ_LEN:-256} BATCH=${BATCH:-4} STEPS=${STEPS:-6} REPEATS=${REPEATS:-3}
COVERAGE=${COVERAGE:-0.5} THREADS=${THREADS:-0} ONLY=${ONLY:-.} RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
[ "$STEPS" -ge 2 ] || { echo "memory_levers: STEPS must be at least 2 (the first is a warm-up)" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
WORK=$(mktemp -d /tmp/sdp-memory-levers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
RESULTS=$OUT/results.tsv
printf 'round\trun\ttokens_per_s\tpeak_rss_mib\taccounted_mib\tparams_held\n' >"$RESULTS"

SHAPE=(--layers "$LAYERS" --width "$WIDTH" --heads "$HEADS" --seq-len "$SEQ_LEN" --batch "$BATCH"
       --steps "$STEPS" --threads "$THREADS")
FWD="--sdp-mask forward --sdp-unit neuron --sdp-coverage $COVERAGE"
RUNS=("sdp-ddp:--sdp-mask none"
      "sdp-ddp-recompute:--sdp-mask none --recompute layer"
      "sdp-ddp-zero:--sdp-mask none --zero 1"
      "sdp-ddp-zero2:--sdp-mask none --zero 2"
      "sdp-fwd:$FWD"
      "sdp-fwd-recompute:$FWD --recompute layer"
      "torch-ddp:"
      "torch-ddp-checkpoint:--checkpoint"
      "torch-ddp-zero:--zero"
      "torch-baseline:--baseline")

# "tokens_per_s peak_rss_mib accounted_mib params_held" of an sdp run directory; params_held is
# the most parameters any worker holds (the whole model under DDP, a subnetwork under masking).
sdp_figures() {
    "$PYTHON" - "$1" "$WORKERS" "$BATCH" "$SEQ_LEN" <<'PY'
import json, statistics, sys
d, n, b, t = sys.argv[1], *map(int, sys.argv[2:])
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"loss"' in l]
rows = [r for r in rows if r["step"] > 1] or rows
ms = statistics.median(r["ms_per_step"] for r in rows)
w = json.load(open(d + "/memory.json"))["workers"]
print("%.1f %.1f %.1f %d" % (n * b * t / (ms / 1000), max(x["peak_rss"] for x in w) / 2**20,
                             max(x["total"] for x in w) / 2**20, max(x["params"] for x in w) // 4))
PY
}

# The value of KEY in a torch_peer "result key=value ..." line.
field() {
    local kv words
    read -r -a words <<<"$2"
    for kv in "${words[@]}"; do [[ $kv == "$1="* ]] && { echo "${kv#*=}"; return; }; done
    echo "?"
}

failed() {
    echo "memory_levers: $1 failed (or ran past RUN_TIMEOUT):" >&2
    { grep -m 3 -iE 'error|Traceback' "$2" || tail -5 "$2"; } >&2
    exit 1
}

ddp_params=""
port=$((20000 + $$ % 20000))
for round in $(seq 1 "$REPEATS"); do
    for entry in "${RUNS[@]}"; do
        name=${entry%%:*}
        [ "$name" = sdp-ddp ] || grep -Eq -- "$ONLY" <<<"$name" || continue
        read -r -a opts <<<"${entry#*:}"
        log="$WORK/$name-$round.log"
        if [[ $name == sdp-* ]]; then
            dir="$WORK/$name-$round"
            timeout "$RUN_TIMEOUT" mpirun -np "$WORKERS" --oversubscribe "$SDP" train --model gpt \
                --data "$DATA" "${SHAPE[@]}" "${opts[@]}" --val-every 0 --val-batches 1 --log-every 1 \
                --out "$dir" >"$log" 2>&1 || failed "$name" "$log"
            read -r tps rss acc params < <(sdp_figures "$dir")
            rm -rf "$dir"
            if [ "$name" = sdp-ddp ]; then ddp_params=$params; fi
        else
            port=$((port + 1))  # a fresh rendezvous port each run: the last one may linger in TIME_WAIT
            MASTER_PORT=$port timeout "$RUN_TIMEOUT" mpirun -np "$WORKERS" --oversubscribe -x MASTER_PORT \
                "$PYTHON" bench/torch_peer.py --data "$DATA" "${SHAPE[@]}" "${opts[@]}" >"$log" 2>&1 ||
                failed "$name" "$log"
            line=$(grep '^result ' "$log") ||
                { echo "memory_levers: $name printed no result line:" >&2; tail -5 "$log" >&2; exit 1; }
            tps=$(field tokens_per_s "$line") rss=$(field peak_rss_mib "$line") params=$(field params "$line")
            acc=-
            if [ "$name" = torch-baseline ]; then
                tps=-
            elif [ "$params" != "$ddp_params" ]; then
                echo "memory_levers: $name has $params parameters, sdp's model $ddp_params:" \
                    "the shapes differ" >&2
                exit 1
            fi
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$tps" "$rss" "$acc" "$params" >>"$RESULTS"
        printf '  round %d/%d  %-21s %10s tok/s  %8s MiB peak RSS\n' "$round" "$REPEATS" "$name" "$tps" "$rss"
    done
done

echo "== gpt, $LAYERS layers, width $WIDTH, $HEADS heads, T $SEQ_LEN, batch $BATCH per worker," \
     "$WORKERS workers, $ddp_params parameters, $STEPS steps; medians of $REPEATS rounds"
"$PYTHON" - "$RESULTS" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
base = {r["round"]: r for r in rows if r["run"] == "sdp-ddp"}


def median_of(mine, key, ratio=False):
    """The median over the rounds of a column, or of its ratio to sdp-ddp's in the same round."""
    if mine[0][key] == "-":
        return "-"
    xs = [float(r[key]) / (float(base[r["round"]][key]) if ratio else 1.0) for r in mine]
    return ("%.3f" if ratio else "%.1f") % statistics.median(xs)


head = ("run", "tokens/s", "peak RSS MiB", "accounted MiB", "x tok/s", "x RSS")
widths = (21, 11, 12, 13, 7, 7)
line = lambda cells: print(" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(cells, widths))))
line(head)
print("-|-".join("-" * w for w in widths))
for run in dict.fromkeys(r["run"] for r in rows):
    mine = [r for r in rows if r["run"] == run]
    line((run, median_of(mine, "tokens_per_s"), median_of(mine, "peak_rss_mib"),
          median_of(mine, "accounted_mib"), median_of(mine, "tokens_per_s", True),
          median_of(mine, "peak_rss_mib", True)))
PY
[ "$OUT" = "$WORK" ] || echo "(each round's figures: $RESULTS)"
