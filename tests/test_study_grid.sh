#!/usr/bin/env bash
# scripts/study.sh's learning-rate grids: a best seed-1 rate at the grid's edge grows the grid
# there (doubling above, halving below) up to GRID_GROW added rates, rates an earlier sweep added
# count, a NaN loss never wins, and the seeds follow the best rate. Nothing is trained: the sweep
# runs with STUDY_DRY=1 over rows written here, and lists the runs it would start.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STUDY="$WORK/study"
mkdir -p "$STUDY"
printf 'text\n' >"$WORK/text.txt"

# rows "LR LOSS"...: docs/study/gpt.tsv holding DDP's seed-1 rows at those rates.
rows() {
  printf 'workload\tconfig\tseed\tN\tmask\tunit\tC\tlayers\twidth\tlr\tsteps\ttflop_per_worker\tstate_bytes\ttotal_bytes\tpeak_rss_bytes\tval_loss\tval_acc\twall_s\tval_loss_min\n' \
    >"$STUDY/gpt.tsv"
  for r in "$@"; do
    printf 'gpt\tddp-lr%s\t1\t4\tnone\t-\t1\t4\t128\t%s\t2000\t1\t1\t1\t1\t%s\t-\t1\t%s\n' \
      "${r% *}" "${r% *}" "${r#* }" "${r#* }" >>"$STUDY/gpt.tsv"
  done
}

# sweep: the DDP runs the sweep would start, one "config seed" a line.
sweep() {
  STUDY_DRY=1 STUDY_DIR="$STUDY" SDP_TEXT="$WORK/text.txt" SDP_BIN="$SDP_BIN" \
    bash "$ROOT/scripts/study.sh" gpt 2>&1 | sed -n 's/^\[[0-9]*\] gpt \(ddp-lr[^ ]*\) seed \([0-9]\): to run$/\1 \2/p'
}

# expect "what" "wanted runs, space-separated config:seed"
expect() {
  local got; got=$(sweep | tr ' ' ':' | tr '\n' ' ' | sed 's/ $//')
  if [ "$got" = "$2" ]; then pass "$1"; else fail "$1: would run '$got', expected '$2'"; fi
}

GRID=("5e-4 1.9" "1e-3 1.85" "2e-3 1.8" "4e-3 1.78")
rows "${GRID[@]}" "8e-3 1.76"
expect "best at the top: the grid doubles it" "ddp-lr1.6e-2:1 ddp-lr8e-3:2 ddp-lr8e-3:3"
rows "${GRID[@]}" "8e-3 1.76" "1.6e-2 1.79"
expect "the added rate did worse: the best is inside, its seeds run" "ddp-lr8e-3:2 ddp-lr8e-3:3"
rows "${GRID[@]}" "8e-3 1.76" "1.6e-2 1.75"
expect "the added rate did better: the grid grows again" "ddp-lr3.2e-2:1 ddp-lr1.6e-2:2 ddp-lr1.6e-2:3"
rows "${GRID[@]}" "8e-3 1.76" "1.6e-2 1.75" "3.2e-2 1.74" "6.4e-2 1.73"
expect "GRID_GROW (3) rates added: no more, even at the edge" "ddp-lr6.4e-2:2 ddp-lr6.4e-2:3"
rows "5e-4 1.7" "1e-3 1.85" "2e-3 1.8" "4e-3 1.78" "8e-3 1.79"
expect "best at the bottom: the grid halves it" "ddp-lr2.5e-4:1 ddp-lr5e-4:2 ddp-lr5e-4:3"
rows "8e-3 nan" "${GRID[@]}" # first, where a NaN would stay the best
expect "a NaN loss is no best, and its rate counts as tried: 4e-3 is inside" \
  "ddp-lr4e-3:2 ddp-lr4e-3:3"

# One sweep at a time: while another holds the checkout's sweep lock, a sweep stops at once with
# one line and starts nothing (a dry sweep only lists, and takes no lock).
mkdir -p "$ROOT/runs/study"
exec 8>>"$ROOT/runs/study/.sweep.lock"
if flock -n 8; then
  out=$(SDP_TEXT="$WORK/text.txt" SDP_BIN="$SDP_BIN" STUDY_DIR="$STUDY" timeout 30 \
    bash "$ROOT/scripts/study.sh" gpt 2>&1); rc=$?
  if [ "$rc" -eq 1 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] &&
     grep -q "^study.sh: another sweep is running in this checkout" <<<"$out"; then
    pass "a second sweep stops at once: $out"
  else
    fail "a second sweep beside a running one: exit $rc, '$out'"
  fi
  flock -u 8
else
  echo "skip: a real sweep holds runs/study/.sweep.lock; the lock case needs it free"
fi
exec 8>&-
# study_report.py reads every TSV through one check: a duplicated (config, seed), a row short
# of cells, or a cell that is no number stops it with one line naming the file and the row
# (it once averaged the duplicate in, or died in a traceback).
rows "2e-3 1.9" "4e-3 1.8"
bad_rows() { # name python-edit-of-lines needle
  cp "$STUDY/gpt.tsv" "$WORK/$1.tsv"
  python3 - "$WORK/$1.tsv" "$2" <<'PY'
import sys
path, edit = sys.argv[1:3]
lines = open(path).read().split("\n")[:-1]
exec(edit)
open(path, "w").write("\n".join(lines) + "\n")
PY
  local out
  out=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import study_report; study_report.read_rows(sys.argv[2])' \
    "$ROOT/scripts" "$WORK/$1.tsv" 2>&1)
  if [ $? -ne 0 ] && [ "$(echo "$out" | grep -c .)" = 1 ] && echo "$out" | grep -qF "$3"; then
    pass "study_report.py: $1 ($out)"
  else fail "study_report.py: $1: '$out'"; fi
}
bad_rows duplicate 'lines.append(lines[1])' "$WORK/duplicate.tsv line 4 repeats ddp-lr2e-3 seed 1 of line 2"
bad_rows short 'lines[2] = "\t".join(lines[2].split("\t")[:10])' "line 3 has 10 cells where the header has 19"
bad_rows not_number 'c = lines[1].split("\t"); c[10] = "1.8gpt"; lines[1] = "\t".join(c)' "line 2: steps is '1.8gpt', not a number"
finish
