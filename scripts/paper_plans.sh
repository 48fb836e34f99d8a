#!/usr/bin/env bash
# Paper-scale memory and communication tables from `sdp plan` (no training, no allocation):
# every SDP mode next to data parallelism for ResNet-18 on CIFAR-10, a 134M and a 1B LLaMA-style
# model, and the 1B model as N grows. Prints Markdown; docs/scale.md holds its output.
# Usage: bash scripts/paper_plans.sh   (after scripts/build.sh; takes a few seconds; $SDP_BIN
# names another binary)
#
# Each row is one `sdp plan --json` call. Every byte figure is the largest over the N workers,
# taken per column as `sdp plan` does (workers differ: the one with the most state need not be
# the one with the largest total), so the columns need not add up to the total. The total is
# params + grads + optimizer + activations + scratch + buffers. "Sent/step (max)" is the most any
# worker sends, as `sdp report` shows it; "(mean)" is the average over workers. Changes are
# relative to the DDP row of the same table (same model, batch, dtype and N).
set -euo pipefail
cd "$(dirname "$0")/.."
SDP=${SDP_BIN:-build/sdp}
[ -x "$SDP" ] || { echo "paper_plans: $SDP is missing: run scripts/build.sh first" >&2; exit 1; }

# Reads `sdp plan --json` and reduces it to named figures (bytes) on one line: P (parameters),
# W* (largest over workers), MIN (smallest worker's total), XMEAN (mean sent), D* (DDP), for
# T total, S params+grads+optimizer, A activations, O scratch+buffers, X sent per step.
# shellcheck disable=SC2016 # an awk program: its $ are awk's
SUMMARY='
function field(line, key,   s) {
    if (!match(line, "\"" key "\": [0-9.e+]+")) return 0
    s = substr(line, RSTART, RLENGTH)
    sub(/^[^:]*: /, "", s)
    return s + 0
}
function figures(line, f) {
    f["S"] = field(line, "params") + field(line, "grads") + field(line, "optimizer")
    f["A"] = field(line, "activations")
    f["O"] = field(line, "scratch") + field(line, "buffers")
    f["T"] = f["S"] + f["A"] + f["O"]
    f["X"] = field(line, "sent_per_step")
}
/"parameters"/ { P = field($0, "parameters") }
/"rank"/ {
    figures($0, f)
    if ($0 ~ /"ddp"/) { for (c in f) D[c] = f[c]; next }
    for (c in f) if (!n || f[c] > W[c]) W[c] = f[c]
    if (!n || f["T"] < MIN) MIN = f["T"]
    sent += f["X"]
    n++
}
END {
    printf "P=%.0f MIN=%.0f XMEAN=%.0f", P, MIN, n ? sent / n : 0
    printf " WS=%.0f WA=%.0f WO=%.0f WT=%.0f WX=%.0f", W["S"], W["A"], W["O"], W["T"], W["X"]
    printf " DS=%.0f DA=%.0f DO=%.0f DT=%.0f DX=%.0f\n", D["S"], D["A"], D["O"], D["T"], D["X"]
}'

# Formats figures from SUMMARY as one Markdown row; `cells` lists the columns wanted.
# shellcheck disable=SC2016 # an awk program: its $ are awk's
ROW='
function bytes(b) {
    if (b >= 2^30) return sprintf("%.2f GiB", b / 2^30)
    if (b >= 2^20) return sprintf("%.1f MiB", b / 2^20)
    if (b >= 2^10) return sprintf("%.1f KiB", b / 2^10)
    return sprintf("%d B", b)
}
function change(x, ref) { return ddp ? "" : sprintf("%+.1f%%", 100 * (x / ref - 1)) }
{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] + 0 }
    if (ddp) {
        v["WS"] = v["DS"]; v["WA"] = v["DA"]; v["WO"] = v["DO"]; v["WT"] = v["DT"]
        v["WX"] = v["DX"]; v["MIN"] = v["DT"]; v["XMEAN"] = v["DX"]
    }
    line = "| " label
    n = split(cells, c, " ")
    for (i = 1; i <= n; i++) {
        if (c[i] == "state") line = line " | " bytes(v["WS"]) " | " change(v["WS"], v["DS"])
        if (c[i] == "acts") line = line " | " bytes(v["WA"])
        if (c[i] == "other") line = line " | " bytes(v["WO"])
        if (c[i] == "total") line = line " | " bytes(v["WT"]) " | " change(v["WT"], v["DT"])
        if (c[i] == "min") line = line " | " bytes(v["MIN"])
        if (c[i] == "sent") line = line " | " bytes(v["WX"]) " | " change(v["WX"], v["DX"])
        if (c[i] == "mean") line = line " | " bytes(v["XMEAN"])
    }
    print line " |"
}'

summary() { "$SDP" plan --json --threads 1 "$@" | awk "$SUMMARY"; }

# row LABEL CELLS [ddp] -- PLAN_ARGS...: one table row from one plan.
row() {
  local label=$1 cells=$2 ddp=0
  shift 2
  if [ "$1" = ddp ]; then ddp=1; shift; fi
  [ "$1" = -- ] && shift
  summary "$@" | awk -v label="$label" -v cells="$cells" -v ddp="$ddp" "$ROW"
}

parameters() { summary "$@" | sed 's/^P=\([0-9]*\) .*/\1/' | awk '{printf "%.2fM", $1 / 1e6}'; }

MODES_CELLS="state acts other total sent mean"
MODES_HEAD="| mode | k (C) | params+grads+opt | change | activations | scratch+buffers | total | change | sent/step (max) | change | sent/step (mean) |
|---|---|---|---|---|---|---|---|---|---|---|"

# modes_table TITLE N COVERAGES NEURON_CHUNKS -- MODEL_ARGS...: DDP, then forward/backward x
# block/neuron at each coverage, for one model, batch, dtype and N.
modes_table() {
  local title=$1 N=$2 coverages=$3 chunks=$4
  shift 4
  [ "$1" = -- ] && shift
  local model=("$@" --world "$N")
  echo
  echo "### $title ($(parameters "${model[@]}") parameters, N = $N)"
  echo
  echo "$MODES_HEAD"
  row "DDP | $N (1)" "$MODES_CELLS" ddp -- "${model[@]}"
  local C k mask unit extra
  for C in $coverages; do
    k=$(awk -v c="$C" -v n="$N" 'BEGIN { printf "%d", c * n + 0.5 }')
    for mask in forward backward; do
      for unit in block neuron; do
        extra=()
        [ "$unit" = neuron ] && [ "$chunks" != 0 ] && extra=(--sdp-chunks "$chunks")
        row "$mask-$unit | $k ($C)" "$MODES_CELLS" -- "${model[@]}" --sdp-mask "$mask" \
          --sdp-unit "$unit" --sdp-owners "$k" "${extra[@]}"
      done
    done
  done
}

RESNET18=(--model resnet --depth 18 --dataset cifar10 --batch 64 --optimizer sgd)
LLAMA134M=(--model llama --layers 12 --width 768 --heads 12 --d-ff 2048 --vocab 32000
           --seq-len 1024 --batch 8 --optimizer adamw)
LLAMA1B=(--model llama --layers 18 --width 2048 --heads 16 --d-ff 5472 --vocab 32000
         --seq-len 2048 --batch 4 --optimizer adamw)

echo "## (a) ResNet-18 (CIFAR-10, 32x32), batch 64 per worker, SGD with momentum, fp32"
for N in 8 4; do
  modes_table "ResNet-18" "$N" "0.5 0.25" 0 -- "${RESNET18[@]}"
done

echo
echo "## (b) LLaMA-style 134M (12 layers, width 768, 12 heads, d_ff 2048, vocab 32000), batch 8 x 1024, AdamW"
echo
echo "Neuron units: 4 chunks per group (12 heads and 2048 MLP neurons both split into 4)."
for dtype in fp32 bf16; do
  modes_table "134M, $dtype" 8 "0.5 0.25" 4 -- "${LLAMA134M[@]}" --dtype "$dtype"
done

echo
echo "## (c) LLaMA-style 1B (18 layers, width 2048, 16 heads, d_ff 5472, vocab 32000), batch 4 x 2048, AdamW"
for dtype in fp32 bf16; do
  modes_table "1B, $dtype" 8 "0.5 0.25" 0 -- "${LLAMA1B[@]}" --dtype "$dtype"
done

echo
echo "## (d) The 1B model as N grows: block units, bf16, batch 4 x 2048 per worker, AdamW"
echo
echo "| N | mode | k (C) | total (largest) | change | total (smallest) | params+grads+opt | change | scratch+buffers | sent/step (max) | change | sent/step (mean) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for N in 8 64 256 1024; do
  model=("${LLAMA1B[@]}" --dtype bf16 --world "$N")
  row "$N | DDP | $N (1)" "total min state other sent mean" ddp -- "${model[@]}"
  # k = N/2, 4 and 2 where the 18 blocks' 18k owner slots reach every worker (sdp plan refuses a
  # plan under which a worker owns no block), else the smallest k that does, ceil(N/18).
  ks=$(printf '%s\n' $((N / 2)) 4 2 | awk -v n="$N" '
    $1 * 18 < n { short = 1; next }
    !seen[$1]++ { print }
    END { k = int((n + 17) / 18); if (short && !seen[k]) print k }')
  for mask in forward backward; do
    for k in $ks; do
      C=$(awk -v k="$k" -v n="$N" 'BEGIN { printf "%.4g", k / n }')
      row "$N | $mask-block | $k ($C)" "total min state other sent mean" -- "${model[@]}" \
        --sdp-mask "$mask" --sdp-unit block --sdp-owners "$k"
    done
  done
done

echo
echo "## (e) ZeRO stages 1 and 2 beside SDP and with it: the 1B model, fp32, batch 4 x 2048, N = 8, AdamW"
echo
echo "\`--zero 1\` shards the optimizer state over the workers that hold each parameter: all N under"
echo "DDP, each unit's k owners under SDP. \`--zero 2\` shards the gradients too: a worker keeps its"
echo "shards' gradients, the stem's and head's, and two slots of its largest layer. Changes are"
echo "against plain DDP."
echo
echo "$MODES_HEAD"
model=("${LLAMA1B[@]}" --dtype fp32 --world 8)
row "DDP | 8 (1)" "$MODES_CELLS" ddp -- "${model[@]}"
row "DDP + ZeRO-1 | 8 (1)" "$MODES_CELLS" -- "${model[@]}" --zero 1
row "DDP + ZeRO-2 | 8 (1)" "$MODES_CELLS" -- "${model[@]}" --zero 2
for mask in forward backward; do
  for unit in block neuron; do
    for zero in 0 1 2; do
      label="$mask-$unit"
      [ "$zero" != 0 ] && label="$label + ZeRO-$zero"
      row "$label | 4 (0.5)" "$MODES_CELLS" -- "${model[@]}" --sdp-mask "$mask" --sdp-unit "$unit" \
        --sdp-owners 4 --zero "$zero"
    done
  done
done
# And with activation recomputation, the lever for what dominates here.
row "DDP + ZeRO-1 + recompute | 8 (1)" "$MODES_CELLS" -- "${model[@]}" --zero 1 --recompute layer
row "DDP + ZeRO-2 + recompute | 8 (1)" "$MODES_CELLS" -- "${model[@]}" --zero 2 --recompute layer
row "forward-block + ZeRO-1 + recompute | 4 (0.5)" "$MODES_CELLS" -- "${model[@]}" \
  --sdp-mask forward --sdp-unit block --sdp-owners 4 --zero 1 --recompute layer
row "forward-block + ZeRO-2 + recompute | 4 (0.5)" "$MODES_CELLS" -- "${model[@]}" \
  --sdp-mask forward --sdp-unit block --sdp-owners 4 --zero 2 --recompute layer

# The largest worker's total against DDP's, at N = 8: the figures "Against the paper" sets
# beside the paper's range (docs/scale.md), one row per model and dtype, one column per mode.
# total_change MODEL_ARGS...: one cell, the change in the largest worker's total against DDP.
total_change() {
  summary "$@" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] + 0 }
    printf "%+.1f%%", 100 * (v["WT"] / v["DT"] - 1) }'
}
echo
echo "## (f) The largest worker's total against DDP's, N = 8"
echo
echo "| setting | C | forward-block | forward-neuron | backward-block | backward-neuron |"
echo "|---|---|---|---|---|---|"
for setting in "ResNet-18, fp32" "134M, fp32" "134M, bf16" "1B, fp32" "1B, bf16"; do
  case $setting in
    ResNet*) model=("${RESNET18[@]}") chunks=0 ;;
    134M*) model=("${LLAMA134M[@]}" --dtype "${setting#*, }") chunks=4 ;;
    1B*) model=("${LLAMA1B[@]}" --dtype "${setting#*, }") chunks=0 ;;
  esac
  for C in 0.5 0.25; do
    k=$(awk -v c="$C" 'BEGIN { printf "%d", c * 8 + 0.5 }')
    line="| $setting | $C"
    for mask in forward backward; do
      for unit in block neuron; do
        extra=()
        [ "$unit" = neuron ] && [ "$chunks" != 0 ] && extra=(--sdp-chunks "$chunks")
        line="$line | $(total_change "${model[@]}" --world 8 --sdp-mask "$mask" --sdp-unit "$unit" \
          --sdp-owners "$k" "${extra[@]}")"
      done
    done
    echo "$line |"
  done
done
