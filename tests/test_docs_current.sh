# The figures the docs paste from scripts are what the scripts print today: a change to sdp plan
# or to the study's rows that moves a figure fails here until the docs are regenerated.
# - docs/results.md and README.md's generated blocks, and docs/study/*.svg, against
#   scripts/study_report.py (--check writes nothing);
# - docs/network.md's step-time tables against bench/steptime_check.py (which reads measurements
#   kept in the script and trains nothing);
# - docs/scale.md's tables (a)-(f) against scripts/paper_plans.sh, its step-time tables against
#   scripts/scale_table.sh, and its --fit example against the command it names: every line
#   those print must stand in docs/scale.md (table (d)'s hand-added "refused" rows aside, which
#   no script prints).
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if command -v gnuplot >/dev/null; then
  if SDP_BIN="$SDP_BIN" python3 "$ROOT/scripts/study_report.py" --check 2>"$WORK/report.err"; then
    pass "docs/results.md, README.md and docs/study/*.svg are what study_report.py gives"
  else fail "study_report.py --check: $(cat "$WORK/report.err")"; fi
else
  echo "skip: gnuplot is missing, so study_report.py cannot draw the plots it checks"
fi

# in_doc DOC WHAT FILE: every non-empty line of FILE stands in DOC.
in_doc() {
  local doc=$1 what=$2 out=$3 missing
  missing=$(grep -vxF -f "$ROOT/$doc" "$out" | grep -v '^$')
  if [ -z "$missing" ]; then pass "$doc holds $what ($(grep -c . "$out") lines)"
  else fail "$doc lacks these lines of $what:"; echo "$missing" | head -5; fi
}
in_scale_md() { in_doc docs/scale.md "$@"; }

# Its tables' rows only: the lines around them say the same in prose.
for date in 2026-11-24 2026-11-26; do
  python3 "$ROOT/bench/steptime_check.py" "$(dirname "$SDP_BIN")" "$date" >"$WORK/st.txt" \
    2>"$WORK/st.err" || fail "steptime_check.py $date: $(tail -1 "$WORK/st.err")"
  grep '^|' "$WORK/st.txt" >"$WORK/st.md"
  in_doc docs/network.md "bench/steptime_check.py $date's table" "$WORK/st.md"
done

SDP_BIN="$SDP_BIN" bash "$ROOT/scripts/paper_plans.sh" >"$WORK/plans.md" 2>"$WORK/plans.err" ||
  fail "paper_plans.sh: $(tail -1 "$WORK/plans.err")"
in_scale_md "scripts/paper_plans.sh's output" "$WORK/plans.md"

bash "$ROOT/scripts/scale_table.sh" "$(dirname "$SDP_BIN")" >"$WORK/steps.md" 2>"$WORK/steps.err" ||
  fail "scale_table.sh: $(tail -1 "$WORK/steps.err")"
in_scale_md "scripts/scale_table.sh's output" "$WORK/steps.md"

# The --fit example, run as docs/scale.md gives it.
fit=$(sed -n '/^build\/sdp plan --fit 24GiB/,/[^\\]$/p' "$ROOT/docs/scale.md" | tr -d '\\\n')
if [ -z "$fit" ]; then fail "docs/scale.md names no 'build/sdp plan --fit 24GiB' command"
else
  read -ra args <<<"${fit#build/sdp }"
  "$SDP_BIN" "${args[@]}" >"$WORK/fit.txt" 2>"$WORK/fit.err" || fail "$fit: $(cat "$WORK/fit.err")"
  in_scale_md "the output of its --fit example" "$WORK/fit.txt"
fi
finish
