#!/usr/bin/env bash
# The pay-off study: quality per byte of device memory, DDP against SDP and the dense
# alternatives, on workloads calibrated against public references (docs/results.md).
#
# Usage: bash scripts/study.sh WORKLOAD...        (after scripts/build.sh)
#   calibrate   sdp's DDP on nanoGPT's shakespeare-char CPU recipe, on 1 and on 4 workers at the
#               same global batch (3 seeds each), a ResNet-20 on Fashion-MNIST for 5 epochs, and
#               the ViT below for 10 epochs
#   gpt         the reference recipe at N = 4: DDP and the four SDP modes at C = 0.5, each at the
#               best of five learning rates (0.5x to 8x the recipe's, GPT_LRS, picked on
#               seed 1), then 3 seeds at equal steps and at matched FLOPs per worker
#   gpt-fit     the dense alternatives, sized with sdp plan --fit on the same planner that
#               tests/test_sdp_memplan.sh holds to the measured bytes: for forward and backward
#               masking with neuron units, DDP on a model shrunk (by width) until its largest
#               worker fits the SDP mode's, and the SDP mode on a model grown until its largest
#               worker fits DDP's ("a bigger model in the same memory"); each at the best of
#               GPT_LRS, 3 seeds; and the dense model shrunk to forward masking's
#               memory again at forward masking's matched FLOPs
#   gpt-c25     rows in the gpt table at C = 0.25 (k = 1): both neuron modes, forward masking at
#               matched FLOPs too, and the dense model shrunk to forward masking's memory at equal
#               steps and at matched FLOPs
#   gpt-overfit the regime where the full model overfits: the recipe on the first 10% of the text
#               (100 KB to train on, 15 epochs in 2000 steps), DDP with and without dropout 0.2,
#               the shrunk dense model with and without dropout, and forward masking with and
#               without dropout
#   gpt-overfit3 the same on the first 3% (30 KB to train on, 51 epochs), where it overfits more
#   gpt-large   the GPT at 6 layers, 6 heads, width 192 (3.3x the parameters): DDP, the dense model
#               shrunk to forward masking's memory (equal steps and matched FLOPs), forward masking
#               with neuron units (equal steps and matched FLOPs), forward masking grown to DDP's
#               memory, and backward masking with neuron units
#   resnet      the ResNet-20 on Fashion-MNIST (5 epochs; learning rates 0.05 to 0.4): DDP; backward masking with neuron units
#               (the least memory at C = 0.5 on the planner, and the best accuracy after one epoch);
#               the dense model shrunk to its memory (equal steps and matched FLOPs); forward
#               masking with block units (equal steps and matched FLOPs); the dense model shrunk
#               to forward masking's memory (equal steps and matched FLOPs); forward masking grown
#               by channels to DDP's memory
#               Its runs are 5-9 minutes each: SEEDS=1 first gives every configuration's
#               learning-rate grid, and a second pass adds seeds 2 and 3.
#   vit         a ViT (4 layers, width 64, 7 x 7 patches) on Fashion-MNIST (10 epochs; learning
#               rates 1e-3 to 3.2e-2): DDP; forward masking with neuron units (equal steps and
#               matched FLOPs); the dense model shrunk to its memory (equal steps and matched
#               FLOPs); backward masking with neuron units; forward masking grown to DDP's memory
#   gpt-levers  the reference GPT's DDP and forward/neuron C = 0.5 rows (best learning rate, seed
#               1) again with --recompute layer and --zero 1, then 2: the losses and the memory of the levers
#               measured, beside what study_report.py derives from sdp plan
#   gpt-floor   the recipe keeps nanoGPT's cosine floor, --lr-min 1e-4, at every rate, so a rate
#               also sets how far the schedule decays; this trains the gpt workload's DDP, its
#               two SDP modes with neuron units and the dense model of forward masking's memory,
#               each at its best rate there, with the floor at a tenth of the rate (3 seeds)
#   gpt-overfit3-floor  gpt-overfit3's DDP, dense model of forward masking's memory and forward
#               masking, without dropout, each on its own grid (1.25e-4 to 1e-3, grown) with the
#               floor at a tenth of every rate
#
# Each finished run adds one row to docs/study/<workload>.tsv: its configuration, seed, steps,
# FLOPs per worker, the largest worker's accounted bytes and peak RSS over all ranks, its final
# metrics and its wall-clock time. A run whose row is there is skipped, so a sweep resumes from
# the rows alone, on a fresh clone too; a run cut off mid-way resumes from its last checkpoint.
# Run directories (runs/study/, never committed) are only the means, and only those of the same
# sdp binary are resumed or recorded.
#   STUDY_COMMIT=1   commit each row as it lands (git commit of that TSV alone)
#   SEEDS="1 2 3"    the seeds of every configuration
#   SDP_BIN=PATH     the sdp binary (default build/sdp)
#   STUDY_DRY=1      run nothing: list the runs not yet recorded (as far as the rows decide them)
#   GRID_GROW=N      at most N rates added to a learning-rate grid whose best is its edge (3)
#   STUDY_DIR=DIR    where the rows are (docs/study; tests/test_study_grid.sh uses its own)
# Run it in the background: mkdir -p runs && nohup bash scripts/study.sh calibrate > runs/study.log 2>&1 &
# One sweep runs at a time in a checkout (runs/study/.sweep.lock): a second stops at once.
set -euo pipefail
# bash reads a script as it runs: a sweep of hours runs from a copy, so that editing this file
# meanwhile cannot change what it does mid-way.
if [ -z "${STUDY_ROOT:-}" ]; then
  STUDY_ROOT=$(cd "$(dirname "$0")/.." && pwd)
  copy=$(mktemp /tmp/sdp-study.XXXXXX.sh)
  cp "$0" "$copy"
  STUDY_ROOT=$STUDY_ROOT exec bash "$copy" "$@"
fi
trap 'rm -f "$0"' EXIT
cd "$STUDY_ROOT"
SDP=${SDP_BIN:-build/sdp} # a copy keeps a long sweep on one binary while the tree is rebuilt
# A run directory is finished or resumed only by the binary that began it (its sum in DIR.sdp):
# one left by another binary, whose figures (memory above all) may no longer be true, starts again.
[ -x "$SDP" ] || { echo "$SDP is missing: run bash scripts/build.sh first" >&2; exit 1; }
SDP_SUM=$(sha256sum "$SDP" | cut -c1-16)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
TEXT=$(realpath -m "${SDP_TEXT:-../shared/data/tinyshakespeare.txt}")
SEEDS=${SEEDS:-1 2 3}
OUT=runs/study
# One sweep at a time in a checkout: a second would share run directories with the first (and
# start them again under it when it finds another binary's), and time its runs on the same cores.
if [ "${STUDY_DRY:-0}" != 1 ]; then
  mkdir -p "$OUT"
  exec 9>>"$OUT/.sweep.lock"
  if ! flock -n 9; then
    echo "study.sh: another sweep is running in this checkout ($(cat "$OUT/.sweep.pid" 2>/dev/null ||
      echo "pid unknown")): wait for it to end, or stop it first" >&2
    exit 1
  fi
  echo "pid $$, started $(date -u +%FT%TZ): $*" >"$OUT/.sweep.pid"
fi
COLUMNS_TSV="workload	config	seed	N	mask	unit	C	layers	width	lr	steps	tflop_per_worker	state_bytes	total_bytes	peak_rss_bytes	val_loss	val_acc	wall_s	val_loss_min"

# nanoGPT's shakespeare-char CPU recipe (karpathy/nanoGPT, README "baby GPT" on a CPU): 4 layers,
# 4 heads, width 128, context 64, batch 12, 2000 iterations, lr 1e-3 cosine to 1e-4 after 100
# warmup steps, beta2 0.99, weight decay 0.1, clip 1.0, no dropout. Its README reports a
# validation loss of 1.88. Validation takes 200 batches of 12, as its eval_iters does.
# Its learning rates here: 0.5x to 8x the recipe's. 2x was the best of 0.5x-2x for nearly every
# configuration, then 4x the best of 0.5x-4x, so the grid grew until the best lay inside it.
GPT_LRS=(5e-4 1e-3 2e-3 4e-3 8e-3)
GPT_REF=(--model gpt --data "$TEXT" --layers 4 --heads 4 --width 128 --seq-len 64 --steps 2000
         --warmup 100 --lr 1e-3 --lr-min 1e-4 --beta2 0.99 --weight-decay 0.1 --clip 1.0
         --val-frac 0.1 --val-every 500 --log-every 100 --ckpt-every 500)
# ResNet-20 (CIFAR-style) on Fashion-MNIST: 5 epochs of 4 x 32 images, SGD with Nesterov
# momentum, random crops; one evaluation of the whole test split per epoch.
RESNET_REF=(--model resnet --depth 20 --channels 16 --dataset fashion-mnist --batch 32
            --steps 2345 --optimizer sgd --lr 0.1 --lr-min 0.001 --momentum 0.9 --nesterov
            --weight-decay 5e-4 --val-every 469 --log-every 50 --ckpt-every 469)
# A ViT on Fashion-MNIST: 4 layers, 4 heads, width 64, 7 x 7 patches (16 tokens and a class
# token), 10 epochs of 4 x 32 images, AdamW at the defaults (beta2 0.95, weight decay 0.1, 100
# warmup steps, cosine to 1e-4), no random crops (a model this small underfits, and
# augmentation fights overfitting).
# One evaluation of the whole test split per epoch.
VIT_REF=(--model vit --layers 4 --heads 4 --width 64 --patch 7 --dataset fashion-mnist --batch 32
         --steps 4690 --lr 3e-3 --crop-pad 0 --val-every 469 --log-every 100 --ckpt-every 469)

STUDY_DIR=${STUDY_DIR:-docs/study}
tsv_of() { echo "$STUDY_DIR/$1.tsv"; }

has_row() { # workload config seed: a whole row (every column) of config at seed
  local f; f=$(tsv_of "$1")
  [ -f "$f" ] && awk -F'\t' -v c="$2" -v s="$3" 'NR == 1 { n = NF } NR > 1 && NF == n && $2 == c && $3 == s { found = 1 }
    END { exit !found }' "$f"
}

# One row from a finished run directory: config.json, metrics.jsonl and memory.json.
add_row() { # workload config seed dir wall_s
  local f; f=$(tsv_of "$1")
  mkdir -p "$STUDY_DIR"
  [ -f "$f" ] || echo "$COLUMNS_TSV" >"$f"
  python3 - "$f" "$@" <<'EOF'
import json, os, sys
f, w, name, seed, d, wall = sys.argv[1:7]
cfg = json.load(open(f"{d}/config.json"))
res = cfg.get("resolved", {})
mem = json.load(open(f"{d}/memory.json"))["workers"]
lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.strip()]
# A resumed run's invocation saw only its own part: metrics.jsonl's elapsed_s counts the whole
# run, every invocation of it (sdp train carries it across a resume).
wall = max([int(wall)] + [round(l["elapsed_s"]) for l in lines if "elapsed_s" in l])
train = [l for l in lines if "loss" in l]
val = [l for l in lines if "val_loss" in l]
state = max(w_["params"] + w_["grads"] + w_["optimizer"] for w_ in mem)
total = max(w_["total"] for w_ in mem)
rss = max(w_["peak_rss"] for w_ in mem)
mask = cfg["sdp-mask"]
unit = "-" if mask == "none" else cfg["sdp-unit"]
acc = val[-1].get("val_accuracy") if val else None
row = [w, name, seed, res.get("world", 1), mask, unit, f"{res.get('coverage', 1):.4g}",
       cfg["layers"] if cfg["model"] != "resnet" else cfg["depth"],
       cfg["width"] if cfg["model"] != "resnet" else cfg["channels"], f"{cfg['lr']:.4g}",
       train[-1]["step"], f"{train[-1]['flops'] / 1e12:.6g}", int(state), int(total), int(rss),
       f"{val[-1]['val_loss']:.6f}" if val else "nan", f"{acc:.6f}" if acc is not None else "-",
       wall, f"{min(l['val_loss'] for l in val):.6f}" if val else "nan"]
# The file with the row replaces the old one whole: a disk that fills mid-write leaves the old
# file, never a row cut short that a later row would be glued onto.
text = open(f).read() + "\t".join(str(x) for x in row) + "\n"
with open(f + ".tmp", "w") as out:
    out.write(text)
    out.flush()
    os.fsync(out.fileno())
os.replace(f + ".tmp", f)
EOF
  if [ "${STUDY_COMMIT:-0}" = 1 ]; then
    git add "$f" && git commit -q -m "study: $1 $2 seed $3 finished" -- "$f" || true
  fi
}

DONE=0 FAILED=0
# run WORKLOAD CONFIG SEED NP FLAGS...: trains (or resumes) one configuration and records it.
run() {
  local w=$1 name=$2 seed=$3 np=$4; shift 4
  local dir="$OUT/$w/$name-s$seed"
  DONE=$((DONE + 1))
  if has_row "$w" "$name" "$seed"; then echo "[$DONE] $w $name seed $seed: recorded before"; return; fi
  if [ "${STUDY_DRY:-0}" = 1 ]; then echo "[$DONE] $w $name seed $seed: to run"; return; fi
  mkdir -p "$OUT/$w"
  local launch=(mpirun -np "$np" --oversubscribe)
  [ "$np" -eq 1 ] && launch=()
  local args=("$@" --seed "$seed" --out "$dir")
  if [ -d "$dir" ] && [ "$(cat "$dir.sdp" 2>/dev/null)" != "$SDP_SUM" ]; then
    echo "[$DONE] $w $name seed $seed: its directory was begun by another sdp binary: starting again"
    rm -rf "$dir" "$dir.log"
  fi
  if python3 scripts/run_finished.py "$dir"; then
    args=() # finished, but its row was not written: record it (one stopped early resumes below)
  elif [ -f "$dir/model.safetensors" ]; then
    args=(--resume "$dir") && echo "[$DONE] $w $name seed $seed: resuming from its checkpoint"
  else
    rm -rf "$dir"
    echo "$SDP_SUM" >"$dir.sdp"
  fi
  local t0=$SECONDS rc=0
  if [ ${#args[@]} -gt 0 ]; then
    # The run in the background, without the sweep's lock (fd 9): a signal to the sweep stops
    # the run (it saves its checkpoint) and then the sweep, and the lock ends with the sweep.
    "${launch[@]}" "$SDP" train "${args[@]}" >>"$dir.log" 2>&1 9>&- &
    local child=$!
    STOPPING=0
    trap 'STOPPING=1; kill -TERM "$child" 2>/dev/null' TERM INT
    while :; do
      rc=0; wait "$child" || rc=$? # (set -e would end the sweep on the run's status)
      kill -0 "$child" 2>/dev/null || break # a trapped signal ended the wait, not the run
    done
    trap - TERM INT
    if [ "$STOPPING" = 1 ]; then
      echo "[$DONE] $w $name seed $seed: stopped by a signal; the next sweep resumes it from its checkpoint"
      exit 130
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    echo "[$DONE] $w $name seed $seed: FAILED (log: $dir.log)"
    grep -m3 '^sdp: \(error\|warning\)' "$dir.log" || tail -3 "$dir.log"
    FAILED=$((FAILED + 1))
    return
  fi
  add_row "$w" "$name" "$seed" "$dir" $((SECONDS - t0))
  echo "[$DONE] $w $name seed $seed: $((SECONDS - t0)) s, $(grep -E '^summary' "$dir.log" | tail -1 | sed 's/^summary: //')"
}

# The value of column col in the row of config at seed.
cell() { # workload config seed col
  local f; f=$(tsv_of "$1")
  [ -f "$f" ] || return 0
  awk -F'\t' -v c="$2" -v s="$3" -v k="$4" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $2 == c && $3 == s { print $col[k]; exit }' "$f"
}

# The rates of PREFIX-lr<LR> recorded on seed 1 with a finite validation loss, one a line, each
# followed by its loss.
recorded_lrs() { # workload prefix
  local f; f=$(tsv_of "$1")
  [ -f "$f" ] || return 0
  awk -F'\t' -v p="$2-lr" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["seed"] == 1 && index($col["config"], p) == 1 {
      r = substr($col["config"], length(p) + 1)
      if (r ~ /^[0-9.]+(e-?[0-9]+)?$/ && $col["val_loss"] ~ /^[0-9.]+$/) print r, $col["val_loss"]
    }' "$f"
}

# The learning rate of PREFIX-lr<LR> with the lowest seed-1 validation loss over every rate
# recorded, as scripts/study_report.py picks it ("" when none is).
best_lr() { # workload prefix
  recorded_lrs "$1" "$2" | awk '$2 + 0 < loss || best == "" { best = $1; loss = $2 + 0 } END { print best }'
}

# RATE times FACTOR, written as the grids write rates: 8e-3 doubles to 1.6e-2, 0.4 to 0.8.
lr_scaled() { # rate factor
  awk -v r="$1" -v f="$2" 'BEGIN {
    v = r * f
    if (r !~ /e/) { printf "%g\n", v; exit }
    e = int(log(v) / log(10) + 100) - 100; m = v / 10 ^ e
    if (m >= 9.9999) { m /= 10; e++ }
    printf "%ge%d\n", m, e }'
}

# "up" when RATE is the largest of RATES, "down" when the smallest, else nothing.
grid_edge() { # rate rates...
  local r=$1; shift
  awk -v r="$r" 'BEGIN { up = down = 1
    for (i = 1; i < ARGC; i++) { if (ARGV[i] + 0 > r + 0) up = 0; if (ARGV[i] + 0 < r + 0) down = 0 }
    if (up) print "up"; else if (down) print "down"; exit }' "$@"
}

SDP_MODES=(forward-block forward-neuron backward-block backward-neuron)
mode_flags() { # mode coverage
  case $1 in
    ddp) echo "--sdp-mask none" ;;
    *) echo "--sdp-mask ${1%-*} --sdp-unit ${1#*-} --sdp-coverage $2" ;;
  esac
}

gpt() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt mode ddp_lr
  LRS=("${GPT_LRS[@]}")
  BASE=("${GPT_REF[@]}" --batch 3 --val-batches 200)
  tuned $w ddp
  ddp_lr=$LR
  for mode in "${SDP_MODES[@]}"; do
    # shellcheck disable=SC2046
    tuned $w "$mode-c0.5" $(mode_flags "$mode" 0.5)
    # Matched FLOPs: as many steps as give this worker DDP's FLOPs of 2000 steps. Backward masking
    # computes DDP's FLOPs per step: its matched run is the equal-steps run, which matched skips.
    # shellcheck disable=SC2046
    [ -z "$LR" ] || [ -z "$ddp_lr" ] || matched $w "$mode-c0.5-lr$LR" "ddp-lr$ddp_lr" 2000 $(mode_flags "$mode" 0.5)
  done
}

# The largest worker's total bytes as sdp plan predicts them (the dataset aside, which every
# configuration holds alike), and the width that --fit gives a mode within a budget.
plan_total() {
  "$SDP" plan "$@" --json | python3 -c 'import json, sys; print(max(w["total"] for w in json.load(sys.stdin)["workers"]))'
}
fit_width() { # budget mask unit plan-flags...
  local budget=$1 mask=$2 unit=$3; shift 3
  "$SDP" plan "$@" --fit "$budget" --json | python3 -c '
import json, sys
mask, unit = sys.argv[1], sys.argv[2]
for m in json.load(sys.stdin)["modes"]:
    if m["mask"] == mask and (mask == "none" or m["unit"] == unit) and m.get("fits"):
        print(m["fit"].get("width", m["fit"].get("channels")))  # channels: the ResNet' "$mask" "$unit"
}

# The two SDP modes the GPT rows put forward: backward masking with neuron units (the lowest loss
# at equal steps) and forward masking with neuron units (the lowest at matched FLOPs, and the
# least memory of the two).
FIT_MODES=(backward-neuron forward-neuron)

gpt_fit() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt ddp_lr
  LRS=("${GPT_LRS[@]}")
  BASE=("${GPT_REF[@]}" --batch 3 --val-batches 200)
  local plan=(--model gpt --layers 4 --heads 4 --width 128 --seq-len 64 --batch 3 --world 4
              --val-batches 200)
  local ddp_bytes; ddp_bytes=$(plan_total "${plan[@]}" --sdp-mask none)
  ddp_lr=$(best_lr $w ddp)
  for mode in "${FIT_MODES[@]}"; do
    local mask=${mode%-*} unit=${mode#*-}
    local sdp_bytes small big small_lr
    sdp_bytes=$(plan_total "${plan[@]}" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-coverage 0.5)
    small=$(fit_width "$sdp_bytes" none - "${plan[@]}" --sdp-coverage 0.5)
    big=$(fit_width "$ddp_bytes" "$mask" "$unit" "${plan[@]}" --sdp-coverage 0.5)
    echo "== gpt-fit: $mode plans $sdp_bytes bytes, DDP $ddp_bytes: DDP shrunk to width $small" \
         "fits the first, $mode grown to width $big the second"
    tuned $w "ddp-w$small" --width "$small"
    small_lr=$LR
    tuned $w "$mode-c0.5-w$big" --width "$big" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-coverage 0.5
    # Forward masking's matched-FLOPs rows spend DDP's FLOPs of 2000 steps: the shrunk dense model
    # gets the same compute, so that the two differ in memory use alone.
    [ "$mask" = forward ] || continue
    [ -z "$small_lr" ] || [ -z "$ddp_lr" ] || matched $w "ddp-w$small-lr$small_lr" "ddp-lr$ddp_lr" 2000 --width "$small"
  done
}

# tuned WORKLOAD PREFIX FLAGS...: PREFIX-lr<LR> at each learning rate of LRS on seed 1, then at the
# best of them on every seed; LR is left at the best ("" when none finished). BASE holds the
# workload's recipe, which FLAGS override. A best rate at the grid's edge says only that the best
# lies beyond it, so the grid grows there, a doubling (or halving) at a time, up to GRID_GROW rates,
# until the best lies inside; a rate whose run fails counts as tried.
GRID_GROW=${GRID_GROW:-3}
LR=""
# The rate's flags: --lr, and with FLOOR_RATIO set, the cosine's floor at that fraction of it.
FLOOR_RATIO=""
lr_flags() {
  echo "--lr $1"
  if [ -n "$FLOOR_RATIO" ]; then echo "--lr-min $(lr_scaled "$1" "$FLOOR_RATIO")"; fi
}
tuned() {
  local w=$1 prefix=$2 lr seed edge grown=0; shift 2
  local tried=("${LRS[@]}") next=("${LRS[@]}")
  # Rates an earlier sweep added count as tried, and against the limit.
  for lr in $(recorded_lrs "$w" "$prefix" | cut -d' ' -f1); do
    [[ " ${tried[*]} " == *" $lr "* ]] || { tried+=("$lr") && grown=$((grown + 1)); }
  done
  while :; do
    # shellcheck disable=SC2046
    for lr in "${next[@]}"; do run "$w" "$prefix-lr$lr" 1 4 "${BASE[@]}" $(lr_flags "$lr") "$@"; done
    LR=$(best_lr "$w" "$prefix")
    if [ -z "$LR" ]; then echo "$w $prefix: no learning rate finished"; return 0; fi
    edge=$(grid_edge "$LR" "${tried[@]}")
    if [ -z "$edge" ] || [ "$grown" -ge "$GRID_GROW" ]; then break; fi
    if [ "$edge" = up ]; then lr=$(lr_scaled "$LR" 2); else lr=$(lr_scaled "$LR" 0.5); fi
    echo "$w $prefix: the best rate, $LR, is the grid's edge: trying $lr"
    tried+=("$lr") next=("$lr") grown=$((grown + 1))
  done
  # shellcheck disable=SC2046
  for seed in $SEEDS; do run "$w" "$prefix-lr$LR" "$seed" 4 "${BASE[@]}" $(lr_flags "$LR") "$@"; done
}

# matched WORKLOAD CONFIG REFERENCE STEPS FLAGS...: CONFIG-matched on every seed, trained for as
# many steps as give its worker the FLOPs that REFERENCE's worker spends in STEPS (both from their
# seed-1 rows). CONFIG ends in -lr<LR>; FLAGS are its own.
matched() {
  local w=$1 config=$2 ref=$3 steps0=$4 steps seed; shift 4
  local d m; d=$(cell "$w" "$ref" 1 tflop_per_worker); m=$(cell "$w" "$config" 1 tflop_per_worker)
  if [ -z "$d" ] || [ -z "$m" ]; then echo "$w $config: no FLOPs to match yet"; return 0; fi
  steps=$(awk -v d="$d" -v m="$m" -v s="$steps0" 'BEGIN { printf "%d", s * d / m + 0.5 }')
  [ "$steps" -ne "$steps0" ] || return 0
  for seed in $SEEDS; do
    run "$w" "$config-matched" "$seed" 4 "${BASE[@]}" --lr "${config##*-lr}" "$@" --steps "$steps" \
      --val-every $((steps / 4))
  done
}

gpt_c25() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt mode ddp_lr
  LRS=("${GPT_LRS[@]}")
  BASE=("${GPT_REF[@]}" --batch 3 --val-batches 200)
  local plan=(--model gpt --layers 4 --heads 4 --width 128 --seq-len 64 --batch 3 --world 4
              --val-batches 200 --sdp-coverage 0.25)
  ddp_lr=$(best_lr $w ddp)
  for mode in backward-neuron forward-neuron; do
    # shellcheck disable=SC2046
    tuned $w "$mode-c0.25" $(mode_flags "$mode" 0.25)
    # shellcheck disable=SC2046
    [ -z "$LR" ] || matched $w "$mode-c0.25-lr$LR" "ddp-lr$ddp_lr" 2000 $(mode_flags "$mode" 0.25)
  done
  local small
  small=$(fit_width "$(plan_total "${plan[@]}" --sdp-mask forward --sdp-unit neuron)" none - "${plan[@]}")
  echo "== gpt-c25: DDP shrunk to width $small fits forward masking's worker at C = 0.25"
  tuned $w "ddp-w$small" --width "$small"
  [ -z "$LR" ] || matched $w "ddp-w$small-lr$LR" "ddp-lr$ddp_lr" 2000 --width "$small"
}

# The first PERCENT% of the text, of which the last 10% is held out: at 10%, 100 KB to train on,
# which the recipe's 2000 steps of 4 x 3 x 64 bytes pass over 15 times; at 3%, 30 KB, 51 times.
small_text() { # percent
  local f=$OUT/data/tinyshakespeare-head$1.txt
  if [ ! -f "$f" ]; then
    mkdir -p "$OUT/data"
    head -c $(($(stat -c %s "$TEXT") * $1 / 100)) "$TEXT" >"$f.tmp" && mv "$f.tmp" "$f"
  fi
  echo "$f"
}

gpt_overfit() { # workload percent
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=$1 data
  data=$(small_text "$2")
  LRS=(5e-4 1e-3 2e-3)
  BASE=("${GPT_REF[@]}" --data "$(realpath "$data")" --batch 3 --val-batches 200 --val-every 250)
  local plan=(--model gpt --layers 4 --heads 4 --width 128 --seq-len 64 --batch 3 --world 4
              --val-batches 200 --sdp-coverage 0.5)
  local small
  small=$(fit_width "$(plan_total "${plan[@]}" --sdp-mask forward --sdp-unit neuron)" none - "${plan[@]}")
  tuned $w ddp
  tuned $w ddp-drop0.2 --dropout 0.2
  tuned $w "ddp-w$small" --width "$small"
  # shellcheck disable=SC2046
  tuned $w forward-neuron-c0.5 $(mode_flags forward-neuron 0.5)
  # shellcheck disable=SC2046
  tuned $w forward-neuron-c0.5-drop0.2 $(mode_flags forward-neuron 0.5) --dropout 0.2
  # The dense model in forward masking's memory gets dropout too, so that forward masking with
  # dropout meets the same alternative.
  tuned $w "ddp-w$small-drop0.2" --width "$small" --dropout 0.2
}

# The rows of a transformer whose forward-masking worker is smaller than DDP's, with LRS and BASE
# set: DDP; forward masking with neuron units at C = 0.5 (equal steps, and matched FLOPs: STEPS
# of DDP's); the dense model shrunk by width to its memory (equal steps and matched FLOPs); forward
# masking grown by width to DDP's memory; and backward masking with neuron units. PLAN holds the
# sdp plan flags of the reference model at N = 4 and C = 0.5.
fit_rows() { # workload steps plan-flags...
  local w=$1 steps=$2 ddp_lr small big; shift 2
  local plan=("$@")
  # shellcheck disable=SC2046
  local fwd=($(mode_flags forward-neuron 0.5)) bwd=($(mode_flags backward-neuron 0.5))
  small=$(fit_width "$(plan_total "${plan[@]}" "${fwd[@]}")" none - "${plan[@]}")
  big=$(fit_width "$(plan_total "${plan[@]}" --sdp-mask none)" forward neuron "${plan[@]}")
  echo "== $w: DDP shrunk to width $small fits forward masking's worker; forward masking" \
       "grown to width $big fits DDP's"
  tuned "$w" ddp
  ddp_lr=$LR
  tuned "$w" forward-neuron-c0.5 "${fwd[@]}"
  [ -z "$LR" ] || [ -z "$ddp_lr" ] ||
    matched "$w" "forward-neuron-c0.5-lr$LR" "ddp-lr$ddp_lr" "$steps" "${fwd[@]}"
  tuned "$w" "ddp-w$small" --width "$small"
  [ -z "$LR" ] || [ -z "$ddp_lr" ] ||
    matched "$w" "ddp-w$small-lr$LR" "ddp-lr$ddp_lr" "$steps" --width "$small"
  tuned "$w" "forward-neuron-c0.5-w$big" --width "$big" "${fwd[@]}"
  tuned "$w" backward-neuron-c0.5 "${bwd[@]}"
}

gpt_large() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  LRS=("${GPT_LRS[@]}")
  BASE=("${GPT_REF[@]}" --layers 6 --heads 6 --width 192 --batch 3 --val-batches 200)
  fit_rows gpt-large 2000 --model gpt --layers 6 --heads 6 --width 192 --seq-len 64 --batch 3 \
    --world 4 --val-batches 200 --sdp-coverage 0.5
}

resnet() {
  local w=resnet ddp_lr small fsmall big
  LRS=(0.05 0.1 0.2 0.4)
  BASE=("${RESNET_REF[@]}")
  local plan=(--model resnet --depth 20 --channels 16 --batch 32 --optimizer sgd --world 4
              --dataset fashion-mnist --sdp-coverage 0.5)
  # shellcheck disable=SC2046
  local bwd=($(mode_flags backward-neuron 0.5)) fwd=($(mode_flags forward-block 0.5))
  small=$(fit_width "$(plan_total "${plan[@]}" "${bwd[@]}")" none - "${plan[@]}")
  fsmall=$(fit_width "$(plan_total "${plan[@]}" "${fwd[@]}")" none - "${plan[@]}")
  big=$(fit_width "$(plan_total "${plan[@]}" --sdp-mask none)" forward block "${plan[@]}")
  echo "== resnet: DDP shrunk to $small channels fits backward masking's worker, to $fsmall" \
       "forward masking's; forward masking grown to $big channels fits DDP's"
  tuned $w ddp
  ddp_lr=$LR
  tuned $w backward-neuron-c0.5 "${bwd[@]}"
  tuned $w "ddp-w$small" --channels "$small"
  [ -z "$LR" ] || [ -z "$ddp_lr" ] || matched $w "ddp-w$small-lr$LR" "ddp-lr$ddp_lr" 2345 --channels "$small"
  tuned $w forward-block-c0.5 "${fwd[@]}"
  [ -z "$LR" ] || [ -z "$ddp_lr" ] || matched $w "forward-block-c0.5-lr$LR" "ddp-lr$ddp_lr" 2345 "${fwd[@]}"
  # Forward masking's evaluation borrows the training activations (docs/design.md), so its worker
  # is smaller than DDP's: the dense model in its memory, and forward masking grown into DDP's.
  tuned $w "ddp-w$fsmall" --channels "$fsmall"
  [ -z "$LR" ] || [ -z "$ddp_lr" ] || matched $w "ddp-w$fsmall-lr$LR" "ddp-lr$ddp_lr" 2345 --channels "$fsmall"
  tuned $w "forward-block-c0.5-w$big" --channels "$big" "${fwd[@]}"
}

# The ViT: no batch norm, so forward masking's worker is a compact transformer with nothing to
# re-estimate, and it plans 37% less than DDP's (sdp plan).
vit() {
  # 1e-3 to 8e-3 first; the dense model shrunk to forward masking's memory did best at the top,
  # 8e-3, so the grid grew to 1.6e-2, where it did best again, so to 3.2e-2.
  LRS=(1e-3 2e-3 4e-3 8e-3 1.6e-2 3.2e-2)
  BASE=("${VIT_REF[@]}")
  fit_rows vit 4690 --model vit --layers 4 --heads 4 --width 64 --patch 7 --batch 32 --world 4 \
    --dataset fashion-mnist --sdp-coverage 0.5
}

# The levers measured, not only planned: the reference GPT's DDP and forward/neuron C = 0.5 at
# their best learning rates, seed 1, with --zero 1 (then 2) and --recompute layer. The same training as the
# rows of docs/study/gpt.tsv they repeat, in the memory sdp plan predicts (study_report.py sets
# the two side by side).
gpt_levers() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt-levers mode zero
  local base=("${GPT_REF[@]}" --batch 3 --val-batches 200)
  for mode in ddp forward-neuron; do
    local prefix=$mode; [ "$mode" = ddp ] || prefix=$mode-c0.5
    local lr; lr=$(best_lr gpt "$prefix")
    [ -n "$lr" ] || { echo "$w: run 'scripts/study.sh gpt' first (no $prefix rows)"; continue; }
    for zero in 1 2; do
      # shellcheck disable=SC2046
      run $w "$prefix-lr$lr-zero$zero-recompute" 1 4 "${base[@]}" --lr "$lr" \
        $(mode_flags "$mode" 0.5) --zero "$zero" --recompute layer
    done
  done
}

# The schedule's floor at a tenth of the rate: the gpt workload's rows that the verdict compares,
# each at the best rate its own grid found, so that a change of order is the floor's doing.
gpt_floor() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt-floor prefix lr floor seed
  BASE=("${GPT_REF[@]}" --batch 3 --val-batches 200)
  local -A flags=([ddp]="--sdp-mask none" [ddp-w80]="--width 80"
                  [forward-neuron-c0.5]="$(mode_flags forward-neuron 0.5)"
                  [backward-neuron-c0.5]="$(mode_flags backward-neuron 0.5)")
  for prefix in ddp ddp-w80 forward-neuron-c0.5 backward-neuron-c0.5; do
    lr=$(best_lr gpt "$prefix")
    if [ -z "$lr" ]; then echo "$w $prefix: no rate in the gpt workload yet"; continue; fi
    FLOOR_RATIO=0.1
    floor=$(lr_scaled "$lr" "$FLOOR_RATIO")
    for seed in $SEEDS; do
      # shellcheck disable=SC2046,SC2086
      run "$w" "$prefix-lr$lr-floor$floor" "$seed" 4 "${BASE[@]}" $(lr_flags "$lr") ${flags[$prefix]}
    done
    FLOOR_RATIO=""
  done
}

# The 3% text's configurations without dropout, whose best rates are the lowest, where the
# recipe's fixed floor leaves the cosine almost flat: DDP, the dense model of forward masking's
# memory and forward masking, each on its own grid, with the floor at a tenth of every rate.
gpt_overfit3_floor() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  local w=gpt-overfit3-floor data
  data=$(small_text 3)
  LRS=(1.25e-4 2.5e-4 5e-4 1e-3)
  BASE=("${GPT_REF[@]}" --data "$(realpath "$data")" --batch 3 --val-batches 200 --val-every 250)
  local plan=(--model gpt --layers 4 --heads 4 --width 128 --seq-len 64 --batch 3 --world 4
              --val-batches 200 --sdp-coverage 0.5)
  local small
  small=$(fit_width "$(plan_total "${plan[@]}" --sdp-mask forward --sdp-unit neuron)" none - "${plan[@]}")
  FLOOR_RATIO=0.1
  tuned $w ddp-floor0.1
  tuned $w "ddp-w$small-floor0.1" --width "$small"
  # shellcheck disable=SC2046
  tuned $w forward-neuron-c0.5-floor0.1 $(mode_flags forward-neuron 0.5)
  FLOOR_RATIO=""
}

calibrate() {
  [ -f "$TEXT" ] || { echo "no text at $TEXT: set SDP_TEXT (see README, 'Data')" >&2; exit 1; }
  for seed in $SEEDS; do
    run calibrate gpt-ddp-n1 "$seed" 1 "${GPT_REF[@]}" --batch 12 --val-batches 200
    run calibrate gpt-ddp-n4 "$seed" 4 "${GPT_REF[@]}" --batch 3 --val-batches 200
  done
  run calibrate resnet20-ddp-n4 1 4 "${RESNET_REF[@]}"
  run calibrate vit-ddp-n4 1 4 "${VIT_REF[@]}"
}

[ $# -gt 0 ] || { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 1; }
for w in "$@"; do
  t0=$SECONDS
  case $w in
    calibrate) calibrate ;;
    gpt) gpt ;;
    gpt-fit) gpt_fit ;;
    gpt-c25) gpt_c25 ;;
    gpt-overfit) gpt_overfit gpt-overfit 10 ;;
    gpt-overfit3) gpt_overfit gpt-overfit3 3 ;;
    gpt-large) gpt_large ;;
    resnet) resnet ;;
    vit) vit ;;
    gpt-levers) gpt_levers ;;
    gpt-floor) gpt_floor ;;
    gpt-overfit3-floor) gpt_overfit3_floor ;;
    *) echo "unknown workload '$w': use calibrate, gpt, gpt-fit, gpt-c25, gpt-overfit, gpt-overfit3, gpt-large, resnet, vit, gpt-levers, gpt-floor or gpt-overfit3-floor" >&2
       exit 1 ;;
  esac
  echo "== $w: $((SECONDS - t0)) s"
done
if [ "$FAILED" -gt 0 ]; then
  echo "study.sh: $FAILED run(s) FAILED (their lines above name the logs); the next sweep tries them again" >&2
  exit 1
fi
