#!/usr/bin/env bash
# Step time across two hosts under link-rate limits, for DDP and SDP, and where it goes.
#
# Two hosts made of network namespaces (scripts/netns_hosts.sh), two ranks each, TCP only; the
# link between them capped with tbf at each rate in RATES, the rate achieved measured by a bulk
# transfer across it. For each rate and mode, the byte-level GPT of the memory target (6 layers,
# width 384, T = 256) trains STEPS steps; from its metrics.jsonl (rank 0, steps after the first)
# come the medians of the step and its parts: forward, backward (the gradient sync overlaps it),
# the exposed wait for the sync with the loss and norm reductions, and the update (with
# publishing under backward masking). "hidden" is the backward's growth over the same mode's
# unlimited-link run: communication the backward absorbed, as far as the CPU allows (the ranks
# share this machine's cores, so the sync's copies also slow the compute).
#
#   sudo bash bench/bandwidth.sh [BUILD_DIR]     (default build; needs root for ip netns and tc)
#
# Environment: DATA (default ../shared/data/tinyshakespeare.txt), RATES (default
# "none 10gbit 1gbit 100mbit": the unlimited link first, as the base of "hidden"), STEPS (default 5), BATCH (default 4), MODES_ONLY (a grep pattern
# over the mode names), MODEL (the model's options; default "--layers 6 --width 384 --heads 6
# --seq-len 256"), OUT (a directory for results.tsv and step_time.svg; default a temporary one,
# printed).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SDP=$PWD/$BUILD/sdp
[ -x "$SDP" ] || { echo "bandwidth: $SDP not found: run bash scripts/build.sh" >&2; exit 1; }
DATA=$(realpath "${DATA:-../shared/data/tinyshakespeare.txt}")
[ -f "$DATA" ] || { echo "bandwidth: no text at $DATA: set DATA" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bandwidth: needs root (network namespaces, tc)" >&2; exit 1; }
RATES=${RATES:-"none 10gbit 1gbit 100mbit"}
STEPS=${STEPS:-5}
BATCH=${BATCH:-4}
MODEL=${MODEL:-"--layers 6 --width 384 --heads 6 --seq-len 256"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/netns_hosts.sh
WORK=$(mktemp -d /tmp/sdp-bandwidth.XXXXXX)
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT" "$WORK/runs"
trap 'hosts_down; rm -rf "$WORK/runs"' EXIT
trap 'exit 1' INT TERM
hosts_up "sdpbw$$"

MODES=("ddp:--sdp-mask none"
       "fwd-block-0.5:--sdp-mask forward --sdp-unit block --sdp-coverage 0.5"
       "fwd-block-0.25:--sdp-mask forward --sdp-unit block --sdp-coverage 0.25"
       "fwd-neuron-0.5:--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5"
       "fwd-neuron-0.25:--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.25"
       "bwd-block-0.5:--sdp-mask backward --sdp-unit block --sdp-coverage 0.5"
       "bwd-block-0.25:--sdp-mask backward --sdp-unit block --sdp-coverage 0.25"
       "bwd-neuron-0.5:--sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5"
       "bwd-neuron-0.25:--sdp-mask backward --sdp-unit neuron --sdp-coverage 0.25"
       "ddp-zero1:--sdp-mask none --zero 1"
       "fwd-neuron-0.5-zero1:--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5 --zero 1"
       "ddp-zero2:--sdp-mask none --zero 2"
       "fwd-neuron-0.5-zero2:--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5 --zero 2"
       "ddp-accum3:--sdp-mask none --grad-accum 3"
       "fwd-neuron-0.5-accum3:--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5 --grad-accum 3"
       "ddp-zero2-accum3:--sdp-mask none --zero 2 --grad-accum 3")
# C = 0.25 of N = 4 is k = 1: no owner group spans the hosts unless the plan puts one there.

# Mbit/s of a bulk TCP transfer from the first host to the second (about a second's worth).
measure_rate() {
  local bytes=$1 port=$((20000 + $$ % 10000))
  ip netns exec "$HOSTS_TAG-h1" /usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); c, _ = s.accept()
while c.recv(1 << 20): pass' "$HOSTS_PREFIX.2" "$port" &
  local server=$!
  sleep 0.5
  ip netns exec "$HOSTS_TAG-h0" /usr/bin/python3 -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); n = int(sys.argv[3])
buf = bytes(1 << 20); t0 = time.time(); sent = 0
while sent < n: s.sendall(buf); sent += len(buf)
s.shutdown(socket.SHUT_WR); s.recv(1); dt = time.time() - t0
print("%.0f" % (8 * sent / dt / 1e6))' "$HOSTS_PREFIX.2" "$port" "$bytes"
  wait "$server" 2>/dev/null || true
}

# The medians of a run's parts: step forward backward sync update (ms), from its metrics.jsonl.
parts_of() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows = [r for r in rows if r["step"] > 1] or rows
keys = ["ms_per_step", "ms_forward", "ms_backward", "ms_sync", "ms_update"]
print(" ".join("%.1f" % statistics.median(r[k] for r in rows) for k in keys))
PY
}

sent_of() { # the most bytes any worker sent per step, MiB
  /usr/bin/python3 -c 'import json,sys; print("%.2f" % (max(w["sent_per_step"] for w in json.load(open(sys.argv[1]))["workers"]) / 2**20))' "$1/memory.json"
}

# shellcheck disable=SC2206
T=(train --data "$DATA" $MODEL --batch "$BATCH" --steps "$STEPS" --log-every 1 --val-every 0
   --val-batches 1 --threads 1)
printf 'rate\tachieved_mbit\tmode\tstep_ms\tforward_ms\tbackward_ms\tsync_ms\tupdate_ms\tsent_mib\n' \
  >"$OUT/results.tsv"
echo "bandwidth: 4 ranks on 2 hosts (network namespaces, TCP), byte GPT $MODEL, B=$BATCH,"
echo "  $STEPS steps per run, medians of steps 2-$STEPS (rank 0); results in $OUT"
for rate in $RATES; do
  hosts_limit "$rate"
  if [ "$rate" = none ]; then bytes=2000000000; else
    bits=${rate%mbit}; [ "$bits" = "$rate" ] && bits=$((${rate%gbit} * 1000))
    bytes=$((bits * 1000000 / 8)); fi
  achieved=$(measure_rate "$bytes")
  echo "== link $rate: measured $achieved Mbit/s"
  printf '  %-16s %9s %9s %9s %9s %9s %9s %10s\n' mode step forward backward hidden "exposed" update "sent MiB"
  for m in "${MODES[@]}"; do
    name=${m%%:*} args=${m#*:}
    if [ -n "${MODES_ONLY:-}" ] && ! echo "$name" | grep -qE "$MODES_ONLY"; then continue; fi
    run="$WORK/runs/$rate-$name"
    # shellcheck disable=SC2086
    if ! HOSTS_TIMEOUT=1200 hosts_mpirun "$SDP" "${T[@]}" $args --out "$run" >"$run.log" 2>&1; then
      cp "$run.log" "$OUT/failed-$rate-$name.log"
      echo "  $name: failed (log: $OUT/failed-$rate-$name.log): $(grep -m1 -iE "error|abort" "$run.log")"; continue
    fi
    read -r step fwd bwd sync upd <<<"$(parts_of "$run")"
    sent=$(sent_of "$run")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rate" "$achieved" "$name" "$step" "$fwd" "$bwd" \
      "$sync" "$upd" "$sent" >>"$OUT/results.tsv"
    base=$(awk -F'\t' -v m="$name" '$1 == "none" && $3 == m {print $6}' "$OUT/results.tsv")
    hidden=-
    [ -n "$base" ] && hidden=$(awk -v a="$bwd" -v b="$base" 'BEGIN {printf "%.1f", a - b}')
    printf '  %-16s %9s %9s %9s %9s %9s %9s %10s\n' "$name" "$step" "$fwd" "$bwd" "$hidden" "$sync" "$upd" "$sent"
  done
done

# Step time against the measured rate, one line per mode (log scales), as SVG.
/usr/bin/python3 - "$OUT/results.tsv" "$OUT/step_time.svg" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
modes = sorted({r["mode"] for r in rows}, key=lambda m: (m != "ddp", m))
pts = {m: sorted((float(r["achieved_mbit"]), float(r["step_ms"])) for r in rows if r["mode"] == m)
       for m in modes}
xs = [x for p in pts.values() for x, _ in p]; ys = [y for p in pts.values() for _, y in p]
if not xs: sys.exit(0)
W, H, L, B = 720, 420, 70, 50
lx0, lx1 = math.log10(min(xs)) - 0.1, math.log10(max(xs)) + 0.1
ly0, ly1 = math.log10(min(ys)) - 0.05, math.log10(max(ys)) + 0.05
X = lambda x: L + (math.log10(x) - lx0) / (lx1 - lx0) * (W - L - 170)
Y = lambda y: H - B - (math.log10(y) - ly0) / (ly1 - ly0) * (H - B - 20)
colors = ["#000", "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896"]
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>',
       '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>' % (L, H - B, W - 170, H - B),
       '<line x1="%d" y1="20" x2="%d" y2="%d" stroke="#888"/>' % (L, L, H - B),
       '<text x="%d" y="%d" text-anchor="middle">link rate, Mbit/s (measured; log)</text>' % ((L + W - 170) / 2, H - 12),
       '<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">step time, ms (log)</text>' % (H / 2, H / 2)]
for x in sorted(set(xs)):
    out.append('<text x="%.0f" y="%d" text-anchor="middle">%g</text>' % (X(x), H - B + 16, x))
for e in range(int(math.floor(ly0)), int(math.ceil(ly1)) + 1):
    for m in (1, 2, 5):
        y = m * 10 ** e
        if ly0 <= math.log10(y) <= ly1:
            out.append('<text x="%d" y="%.0f" text-anchor="end">%g</text>' % (L - 4, Y(y) + 4, y))
for i, m in enumerate(modes):
    c = colors[i % len(colors)]
    p = " ".join("%.1f,%.1f" % (X(x), Y(y)) for x, y in pts[m])
    out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (p, c))
    out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - 160, 30 + 16 * i, c, m))
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
echo "bandwidth: wrote $OUT/results.tsv and $OUT/step_time.svg"
