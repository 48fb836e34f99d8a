# sdp report on real tiny runs: the per-run table; --group, where two runs that differ only in
# --seed form one group whose figures are the mean and sample std of their own final figures; a
# run with more steps and a DDP run form groups of their own; a copy of a run (resumed or not) is
# not another seed; a run whose invocations trained different plans stands alone as mixed;
# --plots writes SVG charts whose data are the group means, each under its own title, with the
# dataset's memory as a category of its own; bad input gets one line naming the problem.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 60000

R=(--data "$WORK/text.txt" --layers 2 --heads 2 --width 32 --seq-len 16 --batch 2 --warmup 1
   --lr 1e-2 --log-every 2 --val-every 5 --val-batches 2 --threads 1)

# train NAME ARGS...: a 2-rank run into $WORK/NAME (30 s at most).
train() {
  local name=$1; shift
  timeout 30 "${MPI[@]}" -n 2 "$SDP_BIN" train "${R[@]}" "$@" --out "$WORK/$name" \
    >"$WORK/$name.log" 2>&1 || { fail "training $name"; tail -3 "$WORK/$name.log"; }
}
train fwd1 --steps 10 --sdp-mask forward --sdp-unit block --seed 1
train fwd2 --steps 10 --sdp-mask forward --sdp-unit block --seed 2
train fwd_long --steps 20 --sdp-mask forward --sdp-unit block --seed 1
train ddp --steps 10 --seed 1
RUNS=("$WORK/fwd1" "$WORK/ddp" "$WORK/fwd2" "$WORK/fwd_long")

# The last value of a field in a run's metrics.jsonl.
last() { grep "\"$2\"" "$1/metrics.jsonl" | tail -1 | sed -E "s/.*\"$2\":([-0-9.e+]+).*/\1/"; }
# A column (1 = label) of the grouped table's row whose label is exactly $1.
group_cell() {
  sed -n '/^| group |/,$p' "$WORK/grouped.md" |
    awk -F' [|] ' -v label="$1" -v col="$2" '{ sub(/^[|] /, "") } $1 == label { print $col }'
}
# The grouped table's rows, header and rule left out.
group_rows() { sed -n '/^| group |/,$p' "$WORK/grouped.md" | awk 'NR > 2' | grep '^|'; }
# A column (1 = run) of the per-run table in file $1 whose run cell starts with $2.
run_cell() {
  awk -F' [|] ' -v run="$2" -v col="$3" '{ sub(/^[|] /, "") }
    index($1, run) == 1 && (length($1) == length(run) || substr($1, length(run) + 1, 1) == " ") {
      print $col }' "$1"
}
# is_mean_std CELL A B: CELL reads "mean ± sample std" of A and B (to the 4 decimals shown).
is_mean_std() {
  awk -v a="$2" -v b="$3" -v cell="$1" 'BEGIN {
    split(cell, p, " ± "); mean = (a + b) / 2; sd = sqrt(((a - mean)^2 + (b - mean)^2) / 1)
    printf "runs %s and %s: mean %.6f sd %.6f; table %s\n", a, b, mean, sd, cell
    exit !(a != b && p[2] != "" && (p[1] - mean)^2 < 5.1e-5^2 && (p[2] - sd)^2 < 5.1e-5^2) }'
}
# is_mean_curve DAT RUN1 RUN2: the training curve in DAT is the mean of the two runs' logged
# training losses at each of their 5 logged steps.
is_mean_curve() {
  paste <(grep '"loss"' "$2/metrics.jsonl" | sed -E 's/.*"loss":([-0-9.e+]+).*/\1/') \
        <(grep '"loss"' "$3/metrics.jsonl" | sed -E 's/.*"loss":([-0-9.e+]+).*/\1/') \
        <(grep -v '^#' "$1" | awk '{ print $3 }') |
    awk '{ n++; if (($1 + $2) / 2 - $3 > 1e-6 || $3 - ($1 + $2) / 2 > 1e-6) bad++ }
         END { exit !(n == 5 && !bad) }'
}

# ---- the per-run table ------------------------------------------------------------------------
if "$SDP_BIN" report "${RUNS[@]}" >"$WORK/table.md" 2>"$WORK/err"; then
  rows=$(grep -cE '^\| (fwd1|fwd2|fwd_long|ddp) \|' "$WORK/table.md")
  if [ "$rows" -eq 4 ] && ! grep -q '^| group |' "$WORK/table.md"; then
    pass "report prints one row per run and no grouped table without --group"
  else fail "report: $rows run rows"; cat "$WORK/table.md"; fi
else fail "report failed"; cat "$WORK/err"; fi

# ---- every worker counts, rank 0 included ------------------------------------------------------
# Rank 0 of a forward-masking run assembles the full model to evaluate and checkpoint: memory.json
# must show those bytes in its own field and in the total, and the report's largest worker must be
# taken over every rank. A copy of fwd1 whose rank 0 is made the largest checks the report.
if python3 - "$WORK/fwd1/memory.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["workers"]
cats = ["params", "grads", "optimizer", "activations", "buffers", "scratch", "data"]
for x in w:
    assert x["total"] == sum(x[c] for c in cats) + x["eval_ckpt"], x
# The other ranks hold only their packed share of each checkpoint window (sdp_sync_gather_range).
assert w[0]["eval_ckpt"] > 0 and all(x["eval_ckpt"] <= w[0]["eval_ckpt"] for x in w[1:]), w
PY
then pass "memory.json: eval_ckpt is largest on rank 0 and counts in every worker's total"
else fail "memory.json lacks eval_ckpt or leaves it out of the total"; fi
cp -r "$WORK/fwd1" "$WORK/rank0big"
python3 - "$WORK/rank0big/memory.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["workers"][0]["peak_rss"] = 999 * 2**20
m["workers"][0]["eval_ckpt"] = 500 * 2**20
json.dump(m, open(sys.argv[1], "w"))
PY
if "$SDP_BIN" report "$WORK/rank0big" >"$WORK/rank0big.md" 2>&1 &&
   python3 - "$WORK/rank0big.md" <<'PY'
import sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1]) if l.startswith("|")]
row = dict(zip(rows[0], rows[2]))
print("total MiB", row["total MiB"], "peak RSS MiB", row["peak RSS MiB"])
sys.exit(0 if row["peak RSS MiB"] == "999.0" and float(row["total MiB"]) > 500 else 1)
PY
then pass "report: the largest worker's total and peak RSS include rank 0"
else fail "report leaves rank 0 out of the largest worker"; cat "$WORK/rank0big.md"; fi

# ---- --group ----------------------------------------------------------------------------------
if "$SDP_BIN" report --group "${RUNS[@]}" >"$WORK/grouped.md" 2>"$WORK/err"; then
  sed -n '/^| group |/,$p' "$WORK/grouped.md"
  ngroups=$(sed -n '/^| group |/,$p' "$WORK/grouped.md" | awk 'NR > 2' | grep -c '^|')
  seeds=$(group_cell "forward/block C=0.5, 10 steps" 2)
  if [ "$ngroups" -eq 3 ] && [ "$seeds" = 2 ] && [ "$(group_cell "DDP, 10 steps" 2)" = 1 ] &&
     [ "$(group_cell "forward/block C=0.5, 20 steps" 2)" = 1 ] && [ ! -s "$WORK/err" ]; then
    pass "--group: the two seeds form one group; 20 steps and DDP form groups of their own"
  else fail "--group: $ngroups groups, forward 10-step group has '$seeds' seeds"; fi
  # "mean ± std" of the val loss against the two runs' own final val losses.
  v1=$(last "$WORK/fwd1" val_loss) v2=$(last "$WORK/fwd2" val_loss)
  cell=$(group_cell "forward/block C=0.5, 10 steps" 6)
  if is_mean_std "$cell" "$v1" "$v2"; then pass "--group: val loss is the mean ± sample std of the seeds' final val losses"
  else fail "--group: val loss cell '$cell' is not mean ± std of $v1 and $v2"; fi
  one=$(group_cell "DDP, 10 steps" 6) ddp_val=$(last "$WORK/ddp" val_loss)
  awk -v c="$one" -v v="$ddp_val" 'BEGIN { exit !(c !~ /±/ && (c - v)^2 < 5.1e-5^2) }' &&
    pass "--group: a one-seed group shows its run's val loss alone ($one)" ||
    fail "--group: one-seed cell '$one' for val loss $ddp_val"
else fail "report --group failed"; cat "$WORK/err"; fi

# ---- --plots ----------------------------------------------------------------------------------
if ! command -v gnuplot >/dev/null; then
  echo "skip: gnuplot is not installed, so --plots is not checked (install gnuplot-nox)"
elif "$SDP_BIN" report --group --plots "$WORK/plots" "${RUNS[@]}" >"$WORK/plots.log" 2>&1; then
  for chart in loss_vs_steps loss_vs_flops memory; do
    svg="$WORK/plots/$chart.svg" bytes=$(stat -c %s "$WORK/plots/$chart.svg" 2>/dev/null || echo 0)
    if head -c 64 "$svg" | grep -qE '^(<\?xml|<svg)' && [ "$bytes" -gt 5000 ] &&
       [ "$bytes" -lt 100000 ] && grep -qF "forward/block C=0.5, 20 steps" "$svg" &&
       grep -qF "wrote $svg" "$WORK/plots.log"; then
      pass "--plots wrote $chart.svg ($bytes bytes, legend names the groups)"
    else fail "--plots: $chart.svg missing, not SVG, or $bytes bytes"; fi
  done
  [ ! -e "$WORK/plots/accuracy.svg" ] && pass "--plots: no accuracy.svg for text runs" ||
    fail "--plots drew accuracy.svg for runs without val_accuracy"
  # Group 0 (fwd1 and fwd2) is drawn at the mean of its two runs at every logged step.
  if is_mean_curve "$WORK/plots/curve_0_train.dat" "$WORK/fwd1" "$WORK/fwd2"; then
    pass "--plots: the group's training curve is the mean of its seeds at each logged step"
  else fail "--plots: curve_0_train.dat is not the mean of fwd1 and fwd2"; fi
  # Every chart says what it shows: no two share a title.
  nscripts=$(ls "$WORK/plots"/*.gp | wc -l)
  ntitles=$(grep -h '^set title ' "$WORK/plots"/*.gp | sort -u | wc -l)
  if [ "$nscripts" -ge 3 ] && [ "$ntitles" -eq "$nscripts" ] &&
     grep -q "^set title .*step" "$WORK/plots/loss_vs_steps.gp" &&
     grep -q "^set title .*FLOP" "$WORK/plots/loss_vs_flops.gp"; then
    pass "--plots: each of the $nscripts charts has a title of its own"
  else fail "--plots: $nscripts charts share $ntitles titles"; grep -h '^set title' "$WORK/plots"/*.gp; fi
  # The dataset's bytes are a bar of their own, of the size memory.json gives the largest worker of
  # group 1 (fwd1 and fwd2), and the per-run table shows them too.
  if python3 - "$WORK/plots/memory.dat" "$WORK/plots/memory.gp" "$WORK/table.md" \
       "$WORK/fwd1/memory.json" "$WORK/fwd2/memory.json" <<'PY'
import json, sys
dat, gp, table = (open(p).read().splitlines() for p in sys.argv[1:4])
header = dat[0].lstrip("# ").split()
row = dat[1].split()
assert row[0] == "1", row
assert "data" in header and "title 'data'" in "\n".join(gp), header
workers = [w for p in sys.argv[4:] for w in json.load(open(p))["workers"]]
largest = max(workers, key=lambda w: w["total"])
want = largest["data"] / 2**20
got = float(row[header.index("data")])
print("data MiB: memory.dat", got, "memory.json", want)
assert want > 0 and abs(got - want) <= 1e-4 * want, (got, want)
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in table if l.startswith("|")]
cells = {r[0]: dict(zip(rows[0], r)) for r in rows[2:]}
fwd1 = max(json.load(open(sys.argv[4]))["workers"], key=lambda w: w["total"])
assert cells["fwd1"]["data MiB"] == "%.1f" % (fwd1["data"] / 2**20), cells["fwd1"]
PY
  then pass "--plots: the memory chart and the table show the dataset's bytes as a category"
  else
    fail "--plots: the memory chart has no data category, or not memory.json's"
    head -3 "$WORK/plots/memory.dat"
  fi
else fail "report --plots failed"; cat "$WORK/plots.log"; fi

# ---- an image run: validation accuracy in the table and in accuracy.svg -------------------------
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
else
  small_images "$WORK/fmnist"
  R=(--model resnet --depth 8 --channels 4 --batch 4 --data "$WORK/fmnist"
     --steps 4 --warmup 1 --log-every 2 --val-every 2 --val-batches 2 --threads 1)
  train img --seed 1
  acc=$(last "$WORK/img" val_accuracy)
  want=$(awk -v a="$acc" 'BEGIN { printf "%.2f%%", 100 * a }')
  if [ -n "$acc" ] && "$SDP_BIN" report "$WORK/img" | grep -qF "| $want |"; then
    pass "an image run's table row shows its final val accuracy ($want)"
  else fail "the table lacks the image run's val accuracy $want"; fi
  if command -v gnuplot >/dev/null &&
     "$SDP_BIN" report --plots "$WORK/img_plots" "$WORK/img" "$WORK/fwd1" >/dev/null 2>&1; then
    head -c 64 "$WORK/img_plots/accuracy.svg" 2>/dev/null | grep -qE '^(<\?xml|<svg)' &&
      pass "--plots draws accuracy.svg when a run logged val_accuracy" ||
      fail "--plots drew no accuracy.svg for an image run"
  fi
fi

# ---- k and C come from config.json's "resolved" record -----------------------------------------
# fwd1 trained k = 1 of N = 2. A copy whose record says k = 2 (C = 1) must be reported so: report
# reads the record rather than deriving k from --sdp-coverage again. A copy without the record (a
# run written before it existed) is derived from its options as before.
cp -r "$WORK/fwd1" "$WORK/recorded" && cp -r "$WORK/fwd1" "$WORK/legacy"
python3 - "$WORK/recorded/config.json" "$WORK/legacy/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["resolved"]["owners"] == 1 and c["resolved"]["world"] == 2, c["resolved"]
c["resolved"]["owners"], c["resolved"]["coverage"] = 2, 1.0
for i in c["invocations"]:
    i["owners"], i["coverage"] = 2, 1.0
json.dump(c, open(sys.argv[1], "w"))
c = json.load(open(sys.argv[2])); del c["resolved"]; del c["invocations"]
json.dump(c, open(sys.argv[2], "w"))
PY
"$SDP_BIN" report "$WORK/recorded" "$WORK/legacy" >"$WORK/recorded.md" 2>&1
"$SDP_BIN" report --group "$WORK/recorded" "$WORK/legacy" >"$WORK/grouped.md" 2>&1
if grep -qE '^\| recorded \| forward \| block \| 2 \| 2 \| 10 \|' "$WORK/recorded.md" &&
   grep -qE '^\| legacy \| forward \| block \| 2 \| 1 \| 10 \|' "$WORK/recorded.md"; then
  pass "report: k is the recorded one (2), or derived for a run without the record (1)"
else fail "report ignores config.json's resolved owners"; cat "$WORK/recorded.md"; fi
if [ "$(group_cell "forward/block C=1, 10 steps" 2)" = 1 ] &&
   [ "$(group_cell "forward/block C=0.5, 10 steps" 2)" = 1 ]; then
  pass "report --group: the label's C is the recorded one"
else fail "report --group labels ignore the recorded coverage"; cat "$WORK/grouped.md"; fi

# ---- one seed counts once; the steps trained decide the group ---------------------------------
# copy is fwd1 copied: the same seed again, which may add neither a seed nor its losses to the
# group. resumed is another copy of fwd1 trained on to 20 steps: it trained as many steps as
# fwd_long, with its seed, but on fwd1's 10-step schedule (the learning rate then held at
# --lr-min), so it is no seed of fwd_long's group either: it stands alone, labelled by its schedule.
cp -r "$WORK/fwd1" "$WORK/copy" && cp -r "$WORK/fwd1" "$WORK/resumed"
timeout 30 "${MPI[@]}" -n 2 "$SDP_BIN" train --resume "$WORK/resumed" --steps 20 \
  >"$WORK/resumed.log" 2>&1 || { fail "resuming a copy of fwd1"; tail -3 "$WORK/resumed.log"; }
SEEDS=("$WORK/fwd1" "$WORK/fwd2" "$WORK/copy" "$WORK/resumed" "$WORK/fwd_long")
if "$SDP_BIN" report --group "${SEEDS[@]}" >"$WORK/grouped.md" 2>"$WORK/warn"; then
  group_rows
  cat "$WORK/warn"
  ten=$(group_cell "forward/block C=0.5, 10 steps" 2)
  twenty=$(group_cell "forward/block C=0.5, 20 steps, schedule-steps=20" 2)
  kept=$(group_cell "forward/block C=0.5, 20 steps, schedule-steps=10" 2)
  if [ "$(group_rows | wc -l)" -eq 3 ] && [ "$ten" = 2 ] && [ "$twenty" = 1 ] && [ "$kept" = 1 ]; then
    pass "--group: a copy adds no seed, and a resumed copy on another schedule stands alone ($ten, $twenty, $kept)"
  else fail "--group: copies counted as seeds (10 steps: '$ten' seeds, 20 steps: '$twenty', resumed: '$kept')"; fi
  is_mean_std "$(group_cell "forward/block C=0.5, 10 steps" 6)" \
    "$(last "$WORK/fwd1" val_loss)" "$(last "$WORK/fwd2" val_loss)" &&
    pass "--group: the copies' losses are not averaged into the group" ||
    fail "--group: the 10-step group's val loss is not that of fwd1 and fwd2 alone"
  if [ "$(grep -c . "$WORK/warn")" -eq 1 ] &&
     grep -F "$WORK/copy" "$WORK/warn" | grep -qF "$WORK/fwd1"; then
    pass "--group: one warning for the dropped duplicate seed, naming both runs"
  else fail "--group: expected one warning naming copy and fwd1"; fi
  # The same copy resumed with --reschedule trained steps 1-10 on one schedule and 11-20 on
  # another: a mixed run, reported alone.
  cp -r "$WORK/fwd1" "$WORK/resched"
  timeout 30 "${MPI[@]}" -n 2 "$SDP_BIN" train --resume "$WORK/resched" --steps 20 --reschedule \
    >"$WORK/resched.log" 2>&1 || fail "resuming a copy of fwd1 with --reschedule"
  "$SDP_BIN" report --group "$WORK/fwd_long" "$WORK/resched" >/dev/null 2>"$WORK/warn2"
  grep -F "$WORK/resched" "$WORK/warn2" | grep -q "schedule-steps" &&
    pass "--group: a rescheduled run is mixed ($(head -c 120 "$WORK/warn2"))" ||
    { fail "--group: a rescheduled run was not flagged as mixed"; cat "$WORK/warn2"; }
  [ "$(run_cell "$WORK/grouped.md" resumed 6)" = 20 ] &&
    pass "report: the resumed copy's row counts the 20 steps it trained" ||
    fail "report: the resumed copy's row shows '$(run_cell "$WORK/grouped.md" resumed 6)' steps"
else fail "report --group of copied runs failed"; cat "$WORK/warn"; fi
if command -v gnuplot >/dev/null &&
   "$SDP_BIN" report --group --plots "$WORK/seed_plots" "${SEEDS[@]}" >/dev/null 2>&1; then
  # One curve per group of the table, over the steps its label counts, and the 10-step curve is
  # that of fwd1 and fwd2 alone.
  ok=1 i=0
  while IFS= read -r label; do
    steps=$(sed -E 's/.*, ([0-9]+) steps(, .*)?$/\1/' <<<"$label")
    end=$(grep -v '^#' "$WORK/seed_plots/curve_${i}_train.dat" | tail -1 | awk '{ print $1 }')
    [ "$end" = "$steps" ] || { ok=0; echo "group '$label': curve ends at step $end"; }
    i=$((i + 1))
  done < <(group_rows | awk -F' [|] ' '{ sub(/^[|] /, ""); print $1 }')
  [ "$(ls "$WORK/seed_plots"/curve_*_train.dat | wc -l)" -eq "$i" ] || ok=0
  is_mean_curve "$WORK/seed_plots/curve_0_train.dat" "$WORK/fwd1" "$WORK/fwd2" || ok=0
  [ $ok -eq 1 ] && pass "--plots: one curve per group, over the steps the table counts" ||
    fail "--plots: the charts disagree with the grouped table"
fi

# ---- runs whose invocations trained different plans ---------------------------------------------
# config.json's "invocations" records each `sdp train` on the run (from_step: where it started).
# Hand-written records in copies of fwd1, each with a seed of its own: maskflip trained with
# backward masking, then forward (its top level, the latest invocation, says forward); shrunk went
# from 4 workers to 2; stepsonly changed --steps alone, which is no other plan.
python3 - "$WORK" <<'PY'
import json, shutil, sys
work = sys.argv[1]
def fixture(name, seed, invocations):
    shutil.copytree(f"{work}/fwd1", f"{work}/{name}")
    path = f"{work}/{name}/config.json"
    c = json.load(open(path))
    base = {"steps": 10, "world": 2, "owners": 1, "coverage": 0.5,
            "chunks": c["resolved"]["chunks"], "branch_scale": c["resolved"]["branch_scale"],
            "sdp-mask": "forward", "sdp-unit": "block", "sdp-assign": "cyclic", "changed": {}}
    c["invocations"] = [dict(base, **i) for i in invocations]
    c["seed"] = seed
    json.dump(c, open(path, "w"), indent=1)
fixture("maskflip", 3, [{"from_step": 0, "sdp-mask": "backward"},
                        {"from_step": 4, "changed": {"sdp-mask": "forward"}}])
fixture("shrunk", 4, [{"from_step": 0, "world": 4, "owners": 2}, {"from_step": 6}])
fixture("stepsonly", 5, [{"from_step": 0, "steps": 4}, {"from_step": 4, "changed": {"steps": 10}}])
PY
MIXED=("$WORK/fwd1" "$WORK/fwd2" "$WORK/maskflip" "$WORK/shrunk" "$WORK/stepsonly")
if "$SDP_BIN" report --group "${MIXED[@]}" >"$WORK/grouped.md" 2>"$WORK/warn"; then
  group_rows
  cat "$WORK/warn"
  seeds=$(group_cell "forward/block C=0.5, 10 steps" 2)
  mixed_rows=$(group_rows | grep -c 'mixed')
  mixed_seeds=$(group_rows | grep 'mixed' | awk -F' [|] ' '{ print $2 }' | sort -u | tr '\n' ' ')
  if [ "$seeds" = 3 ] && [ "$mixed_rows" -eq 2 ] && [ "$mixed_seeds" = "1 " ]; then
    pass "--group: mixed runs stand alone, labelled mixed; a change of --steps alone is grouped"
  else fail "--group: forward group has '$seeds' seeds, $mixed_rows mixed rows ($mixed_seeds seeds)"; fi
  if [ "$(grep -c . "$WORK/warn")" -eq 2 ] &&
     grep -F "$WORK/maskflip" "$WORK/warn" | grep 'sdp-mask' | grep 'backward' | grep -q 'forward' &&
     grep -F "$WORK/shrunk" "$WORK/warn" | grep -q 'world'; then
    pass "--group: one warning per mixed run, naming it and what changed"
  else fail "--group: expected one warning each for maskflip (sdp-mask) and shrunk (world size)"; fi
  [ "$(group_rows | grep 'shrunk' | awk -F' [|] ' '{ print $3 }')" = "4→2" ] &&
    pass "--group: the mixed group's N column shows 4→2" ||
    fail "--group: shrunk's N column: $(group_rows | grep shrunk)"
else fail "report --group of mixed runs failed"; cat "$WORK/warn"; fi
if "$SDP_BIN" report "${MIXED[@]}" >"$WORK/mixed.md" 2>"$WORK/warn"; then
  mode=$(run_cell "$WORK/mixed.md" maskflip 2)
  n=$(run_cell "$WORK/mixed.md" shrunk 4) k=$(run_cell "$WORK/mixed.md" shrunk 5)
  if [ "$mode" = "backward→forward" ] && [ "$n" = "4→2" ] && [ "$k" = "2→1" ] &&
     [ "$(run_cell "$WORK/mixed.md" stepsonly 2)" = forward ] && [ ! -s "$WORK/warn" ]; then
    pass "report: a mixed run's row shows each changed column as its values in order"
  else fail "report: maskflip mode '$mode', shrunk N '$n' k '$k'"; cat "$WORK/mixed.md"; fi
else fail "report of mixed runs failed"; cat "$WORK/warn"; fi

# ---- bad input --------------------------------------------------------------------------------
mkdir -p "$WORK/empty" "$WORK/half" && cp "$WORK/fwd1/config.json" "$WORK/half/"
expect_error "missing run directory" "$WORK/nope" "$SDP_BIN" report "$WORK/fwd1" "$WORK/nope"
expect_error "directory without config.json" "$WORK/empty' has no config.json" "$SDP_BIN" report "$WORK/empty"
expect_error "directory without metrics.jsonl" "$WORK/half' has no metrics.jsonl" \
  "$SDP_BIN" report "$WORK/half"
expect_error "unknown flag" "unknown option '--bogus'" \
  "$SDP_BIN" report --bogus "$WORK/fwd1"
expect_error "no run directory" "one or more run directories" "$SDP_BIN" report --group
expect_error "gnuplot missing" "gnuplot not found: install gnuplot-nox" \
  env PATH=/nonexistent "$SDP_BIN" report --plots "$WORK/p2" "$WORK/fwd1"
# Damaged metrics lines (found by fuzz/fuzz_run_dir.c): a step that is missing or past any count
# was once converted to an integer regardless, showing a garbage step count; such lines are skipped.
cp -r "$WORK/fwd1" "$WORK/damaged"
printf '%s\n' '{"loss":1.5}' '{"step":1e300,"loss":1.5}' '{"step":-2,"loss":1.5}' \
  >>"$WORK/damaged/metrics.jsonl"
if "$SDP_BIN" report "$WORK/damaged" | grep -qE '^\| damaged \| [^|]+ \| [^|]+ \| [^|]+ \| [^|]+ \| 10 \|'; then
  pass "report skips metrics lines whose step is missing or out of range"
else fail "report of damaged metrics lines"; "$SDP_BIN" report "$WORK/damaged"; fi
# A damaged "invocations" record: one line naming the file, the key and the remedy; no crash.
for bad in '5' '[]' '[{"from_step": "zero"}]' '[{"from_step": 0, "steps": 10, "world": "two"}]'; do
  rm -rf "$WORK/badinv" && cp -r "$WORK/fwd1" "$WORK/badinv"
  python3 - "$WORK/badinv/config.json" "$bad" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["invocations"] = json.loads(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
  before=$FAILED
  expect_error "damaged \"invocations\": $bad" "$WORK/badinv/config.json" "$SDP_BIN" report "$WORK/badinv"
  [ "$FAILED" -ne "$before" ] ||
    grep -F '"invocations"' "$WORK/stderr" | grep -qF "restore the file or start a new run" ||
    fail "damaged \"invocations\": $bad: the message lacks the key or the remedy"
done
# A damaged line inside metrics.jsonl is left out with a warning naming the file and the line; a
# last line cut short (a run killed while writing it) is left out silently; the figures stay.
cp -a "$WORK/fwd1" "$WORK/garbled" && cp -a "$WORK/fwd1" "$WORK/cut"
sed -i '2i this is not json' "$WORK/garbled/metrics.jsonl"
printf '{"step":11,"lo' >>"$WORK/cut/metrics.jsonl"
want=$("$SDP_BIN" report "$WORK/fwd1" 2>/dev/null | grep '^| fwd1 |' | cut -d'|' -f3-)
"$SDP_BIN" report "$WORK/garbled" >"$WORK/garbled.md" 2>"$WORK/garbled.err"
"$SDP_BIN" report "$WORK/cut" >"$WORK/cut.md" 2>"$WORK/cut.err"
if grep -qx "sdp: warning: $WORK/garbled/metrics.jsonl: 1 line that is not a metrics record (the first: line 2) left out of the figures" "$WORK/garbled.err" &&
   [ "$(grep '^| garbled |' "$WORK/garbled.md" | cut -d'|' -f3-)" = "$want" ] &&
   [ ! -s "$WORK/cut.err" ] && [ "$(grep '^| cut |' "$WORK/cut.md" | cut -d'|' -f3-)" = "$want" ]; then
  pass "a damaged metrics line is left out with one warning, a cut last line silently"
else fail "damaged metrics lines:"; cat "$WORK/garbled.err" "$WORK/cut.err"; fi
# examples/s/worker weighs each line's rate by its window's time (steps x ms_per_step): a line of
# 1 step at 1 example/s beside one of 100 steps at 1000 is about 990, where the mean of the two
# rates (what it once printed) is 500.
cp -a "$WORK/fwd1" "$WORK/rates"
python3 - "$WORK/rates/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
val = [l for l in lines if "val_loss" in l]
base = [l for l in lines if "loss" in l][-1]
a = dict(base, step=100, tokens_per_s=1000, ms_per_step=10)
b = dict(base, step=101, tokens_per_s=1, ms_per_step=10)
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in [a, b] + val))
PY
rate=$("$SDP_BIN" report "$WORK/rates" 2>/dev/null | grep '^| rates |' | cut -d'|' -f12 | tr -d ' ')
[ "$rate" = 990 ] && pass "report: examples/s/worker is the time-weighted rate ($rate)" ||
  fail "report: examples/s/worker is '$rate', expected 990 (time-weighted)"
# A '|' in a run's name is escaped, so its row keeps the table's 16 columns.
cp -a "$WORK/fwd1" "$WORK/a|b"
cells=$("$SDP_BIN" report "$WORK/a|b" 2>/dev/null | tail -1 | sed 's/\\|//g' | tr -cd '|' | wc -c)
[ "$cells" = 17 ] && pass "report: a '|' in a run's name is escaped" ||
  fail "report: a '|' in a run's name gives $cells bars, expected 17"
# Two runs of one name in different directories: each row names its directory, or the two could
# not be told apart.
mkdir -p "$WORK/A" "$WORK/B" && cp -a "$WORK/fwd1" "$WORK/A/run" && cp -a "$WORK/ddp" "$WORK/B/run"
"$SDP_BIN" report "$WORK/A/run" "$WORK/B/run" >"$WORK/same.md" 2>/dev/null
grep -q "^| $WORK/A/run |" "$WORK/same.md" && grep -q "^| $WORK/B/run |" "$WORK/same.md" &&
  pass "report: runs that share a name show their directories" ||
  { fail "report: runs that share a name"; cat "$WORK/same.md"; }
"$SDP_BIN" report --help | grep -q -- "--plots DIR" && "$SDP_BIN" report --help | grep -q -- "--group" &&
  pass "report --help documents --group and --plots" || fail "report --help lacks --group or --plots"
finish
