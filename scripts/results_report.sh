#!/usr/bin/env bash
# Draws docs/results/<workload>/*.svg and docs/results/<workload>.md (the per-group table, mean ±
# standard deviation over seeds) from the runs of scripts/experiments.sh. Only the SVGs and the
# tables land in docs/; gnuplot's scripts and data stay in a temporary directory.
# Usage: bash scripts/results_report.sh [runs/experiments]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/sdp ] || { echo "build/sdp is missing: run bash scripts/build.sh first" >&2; exit 1; }
RUNS=${1:-runs/experiments}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
found=0
for dir in "$RUNS"/*/; do
  w=$(basename "$dir")
  runs=()
  for r in "$dir"*-s*/; do python3 scripts/run_finished.py "$r" && runs+=("${r%/}"); done
  [ ${#runs[@]} -gt 0 ] || continue
  found=1
  build/sdp report --group --plots "$TMP/$w" "${runs[@]}" | grep -v "^wrote " >"$TMP/$w.txt"
  mkdir -p "docs/results/$w"
  cp "$TMP/$w"/*.svg "docs/results/$w/"
  { echo "# $w: ${#runs[@]} runs of scripts/experiments.sh"
    echo
    echo "Regenerate with \`bash scripts/experiments.sh $w && bash scripts/results_report.sh\`."
    echo
    sed -n '/^| group /,$p' "$TMP/$w.txt"
    echo
    echo "Every run:"
    echo
    sed -n '1,/^$/p' "$TMP/$w.txt"
  } >"docs/results/$w.md"
  echo "wrote docs/results/$w.md and docs/results/$w/*.svg (${#runs[@]} runs)"
done
[ "$found" -eq 1 ] || { echo "no finished runs under $RUNS: run scripts/experiments.sh first" >&2; exit 1; }
