# sdp plan --fit BYTES: in every mode, the size it reports fits and the next size up does not,
# each checked with its own `sdp plan` call (the largest worker's total, rank 0's evaluation and
# checkpoint bytes included, as tests/test_sdp_memplan.sh holds to the measured bytes); the totals
# grow with the width and the depth, which the search assumes; a limit nothing fits is a line per
# mode, not an error; malformed values fail with one line naming --fit.
source "$(dirname "$0")/lib.sh"

# check_fit WHAT LIMIT ARGS...: runs --fit --json, then plans each mode's fitted and next sizes.
check_fit() {
  local what=$1 limit=$2; shift 2
  "$SDP_BIN" plan --fit "$limit" --json "$@" >"$WORK/fit.json" 2>"$WORK/fit.err" ||
    { fail "$what: sdp plan --fit failed"; cat "$WORK/fit.err"; return; }
  if python3 - "$SDP_BIN" "$WORK/fit.json" "$@" <<'PY'; then pass "$what: every mode's fitted size fits and the next size up does not, by sdp plan"; else fail "$what"; fi
import json, subprocess, sys
sdp, path, args = sys.argv[1], sys.argv[2], sys.argv[3:]
fit = json.load(open(path))
limit, bad, fitted = fit["fit_bytes"], [], 0
def plan(mode, dim, value):
    a = list(args)
    for opt in ("--sdp-mask", "--sdp-unit", "--fit-by"):  # the mode's own, in place of any given
        while opt in a:
            i = a.index(opt); del a[i:i + 2]
    a += ["--sdp-mask", mode["mask"], "--sdp-unit", mode["unit"], "--" + dim, str(value)]
    out = json.loads(subprocess.run([sdp, "plan", "--json"] + a, check=True,
                                    capture_output=True, text=True).stdout)
    if mode["mask"] == "none" and "--zero" not in a:  # the DDP row is plain DDP, zero aside
        return out["ddp"]["total"], 0, out["parameters"]
    totals = [w["total"] for w in out["workers"]]
    return max(totals), totals.index(max(totals)), out["parameters"]
for m in fit["modes"]:
    if not m["fits"]:
        bad.append("%s: nothing fits (%s)" % (m["mode"], m.get("reason", m.get("smallest"))))
        continue
    dim = [k for k in m["fit"] if k not in ("parameters", "largest_bytes", "largest_rank")][0]
    for key, want_fit in (("fit", True), ("next", False)):
        p = m[key]
        if p is None:
            bad.append("%s: no next size" % m["mode"]); continue
        total, rank, params = plan(m, dim, p[dim])
        if (total, rank, params) != (p["largest_bytes"], p["largest_rank"], p["parameters"]):
            bad.append("%s %s %d: --fit says %s, sdp plan %s" % (m["mode"], dim, p[dim],
                       (p["largest_bytes"], p["largest_rank"], p["parameters"]), (total, rank, params)))
        if (total <= limit) != want_fit:
            bad.append("%s %s %d: %d bytes against the limit %d" % (m["mode"], dim, p[dim], total, limit))
    fitted += 1
for b in bad: print("  " + b)
print("  %d modes checked" % fitted)
sys.exit(1 if bad or fitted == 0 else 0)
PY
}

GPT=(--model gpt --layers 4 --heads 4 --seq-len 32 --batch 2 --vocab 256 --threads 1)
check_fit "gpt by width, N=4" 64MiB "${GPT[@]}" --world 4
check_fit "gpt by width, N=4, --zero 1 --recompute layer" 64MiB "${GPT[@]}" --world 4 --zero 1 \
  --recompute layer
# --fit knows the levers: each widens the DDP model that fits, and the header names them.
"$SDP_BIN" plan --fit 20MiB "${GPT[@]}" --world 4 >"$WORK/plain" 2>&1
"$SDP_BIN" plan --fit 20MiB "${GPT[@]}" --world 4 --zero 1 >"$WORK/zero" 2>&1
if [ "$(awk '$1 == "DDP" {print $2}' "$WORK/zero")" -gt "$(awk '$1 == "DDP" {print $2}' "$WORK/plain")" ] &&
   grep -q -- '--zero 1: optimizer state sharded' "$WORK/zero"; then
  pass "--fit --zero 1: a wider DDP model fits, and the header says why"
else fail "--fit --zero 1: $(sed -n 1,3p "$WORK/zero")"; fi
check_fit "gpt by width, N=8, C=0.25, random, --sdp-chunks 4" 96MiB "${GPT[@]}" --world 8 \
  --sdp-coverage 0.25 --sdp-assign random --sdp-chunks 4
check_fit "llama by layers, N=4, --d-ff 96" 40MiB --model llama --heads 4 --width 64 --d-ff 96 \
  --seq-len 16 --batch 2 --vocab 300 --world 4 --threads 1 --fit-by layers
check_fit "llama by width, N=4, SGD, forward only" 50MB --model llama --layers 3 --heads 2 \
  --seq-len 16 --batch 2 --vocab 300 --world 4 --threads 1 --optimizer sgd --sdp-mask forward \
  --sdp-chunks 2
check_fit "resnet by channels, N=4" 24MiB --model resnet --depth 14 --batch 4 --optimizer sgd \
  --world 4 --threads 1
check_fit "resnet by depth, N=4, C=0.75" 3MiB --model resnet --channels 4 --batch 4 --world 4 \
  --threads 1 --fit-by layers --sdp-coverage 0.75
check_fit "vit by width, N=4" 16MiB --model vit --layers 2 --heads 4 --patch 7 --batch 4 \
  --world 4 --threads 1

# The search bisects in the width, where the largest worker's bytes grow with the size in every
# mode (checked here over a run of widths), and looks a quarter of the size past the boundary in
# the layers, where they do not: at N = 64, 127 blocks leave 63 leftover blocks in two owner sets
# (a large backward-masking publish buffer) and 128 none, so 128 layers fit a limit 121 to 127 do
# not. The fitted size must be the largest that fits among every size tried by hand.
python3 - "$SDP_BIN" <<'PY' && pass "the largest worker's bytes grow with the width in every mode" || fail "a total falls as the width grows"
import json, subprocess, sys
sdp = sys.argv[1]
base = ["--model", "gpt", "--heads", "4", "--seq-len", "32", "--batch", "2", "--vocab", "256",
        "--threads", "1", "--world", "4", "--sdp-coverage", "0.5", "--layers", "3"]
modes = [["--sdp-mask", "none"]] + [["--sdp-mask", m, "--sdp-unit", u]
                                    for m in ("forward", "backward") for u in ("block", "neuron")]
def largest(args):
    out = json.loads(subprocess.run([sdp, "plan", "--json"] + args, check=True,
                                    capture_output=True, text=True).stdout)
    return max(w["total"] for w in out["workers"])
bad = 0
for mode in modes:
    sizes = range(4, 132, 4)
    totals = [largest(base + mode + ["--width", str(s)]) for s in sizes]
    drops = [(s, a, b) for s, a, b in zip(sizes[1:], totals, totals[1:]) if b < a]
    for d in drops[:3]: print("  %s width %d: %d after %d" % (" ".join(mode), d[0], d[2], d[1]))
    bad += len(drops)
sys.exit(1 if bad else 0)
PY
L=(--model llama --width 256 --heads 4 --seq-len 64 --batch 2 --world 64 --vocab 2000 --threads 1
   --sdp-mask backward --sdp-unit block)
"$SDP_BIN" plan --fit 1.35e9 --fit-by layers --json "${L[@]}" >"$WORK/layers.json" 2>&1
python3 - "$SDP_BIN" "$WORK/layers.json" "${L[@]}" <<'PY' && pass "by layers, where the bytes fall at 128 blocks on 64 workers: the largest size that fits" || fail "by layers: not the largest size that fits"
import json, subprocess, sys
sdp, fit, args = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3:]
def largest(layers):
    out = json.loads(subprocess.run([sdp, "plan", "--json", "--layers", str(layers)] + args,
                                    check=True, capture_output=True, text=True).stdout)
    return max(w["total"] for w in out["workers"])
mode = [m for m in fit["modes"] if m["mode"] == "backward block"][0]
fits = [n for n in range(96, 161) if largest(n) <= fit["fit_bytes"]]
print("  --fit: %d layers; by hand, the largest of 96 to 160 that fits: %d; 119 to 127 fit: %s"
      % (mode["fit"]["layers"], fits[-1], [n for n in fits if 119 <= n <= 127]))
sys.exit(0 if mode["fit"]["layers"] == fits[-1] == 128 else 1)
PY

# A limit nothing fits: one line per mode, and the command succeeds.
if "$SDP_BIN" plan --fit 100KiB "${GPT[@]}" --world 4 >"$WORK/none.txt" 2>&1 &&
   [ "$(grep -c "none fits: the smallest, width 4" "$WORK/none.txt")" -eq 5 ]; then
  pass "a limit below the smallest model: a line per mode saying so"
else
  fail "a limit below the smallest model"; cat "$WORK/none.txt"
fi
# Neuron units that cannot split the heads: a line for those modes, the others fitted.
if "$SDP_BIN" plan --fit 64MiB "${GPT[@]}" --world 8 >"$WORK/chunks.txt" 2>&1 &&
   [ "$(grep -c "not planned: neuron units: the default of one chunk per worker" "$WORK/chunks.txt")" -eq 2 ]; then
  pass "neuron units that cannot split the heads: a line for those modes"
else
  fail "neuron units that cannot split the heads"; cat "$WORK/chunks.txt"
fi
# SDP that cannot run at this N (one worker; a coverage giving no whole k): DDP is still fitted,
# and each SDP mode gets a line saying why, as sdp plan without --fit would refuse them.
for case in "1|0.5|SDP needs at least 2 workers" "3|0.5|--sdp-coverage 0.5 of 3 workers gives no whole k"; do
  IFS='|' read -r n cov why <<<"$case"
  if "$SDP_BIN" plan --fit 64MiB "${GPT[@]}" --world "$n" --sdp-coverage "$cov" >"$WORK/n.txt" 2>&1 &&
     grep -q "^  DDP  *[0-9]" "$WORK/n.txt" && grep -q "SDP not planned" "$WORK/n.txt" &&
     [ "$(grep -cF "not planned: $why" "$WORK/n.txt")" -eq 4 ]; then
    pass "N = $n, coverage $cov: DDP fitted, each SDP mode not planned ($why)"
  else
    fail "N = $n, coverage $cov"; cat "$WORK/n.txt"
  fi
done
if "$SDP_BIN" plan --fit 64MiB "${GPT[@]}" --world 3 --sdp-owners 2 >"$WORK/n3.txt" 2>&1 &&
   grep -q "SDP with k = 2 owners" "$WORK/n3.txt" && ! grep -q "not planned" "$WORK/n3.txt"; then
  pass "N = 3 with --sdp-owners 2: every mode fitted"
else
  fail "N = 3 with --sdp-owners 2"; cat "$WORK/n3.txt"
fi
# Block units with fewer blocks than needed to give every worker one: more layers, or a line.
"$SDP_BIN" plan --fit 64MiB "${GPT[@]}" --world 8 --layers 1 --sdp-unit block >"$WORK/own.txt" 2>&1
if grep -q "not planned: 4 of the 8 workers would own no unit" "$WORK/own.txt"; then
  pass "block units leaving workers without a unit: a line saying so"
else
  fail "block units leaving workers without a unit"; cat "$WORK/own.txt"
fi

for bad in abc 24XB -5GiB 0 0.1 inf nan 1e400 1e30 9EiB 0x10 24G "" "12 GiB"; do
  expect_error "--fit '$bad'" "--fit '$bad' is not a size in bytes" \
    "$SDP_BIN" plan --fit "$bad" "${GPT[@]}" --world 4
done
expect_error "--fit-by depth" "unknown --fit-by 'depth': use width or layers" \
  "$SDP_BIN" plan --fit 1GiB --fit-by depth "${GPT[@]}" --world 4
expect_error "--fit-by without --fit" "--fit-by layers needs --fit BYTES" \
  "$SDP_BIN" plan --fit-by layers "${GPT[@]}" --world 4
for good in 24GiB 512MiB 1.5e9 80GB 2tib 1000; do
  if "$SDP_BIN" plan --fit "$good" "${GPT[@]}" --world 4 --layers 1 --fit-by width >/dev/null 2>&1; then
    pass "--fit $good is accepted"; else fail "--fit $good"; fi
done
# --fit plans every mode, so the coverage it is given is used: no "ignored under data
# parallelism" warning, which the plain plan of a DDP run prints.
"$SDP_BIN" plan --fit 1GiB "${GPT[@]}" --world 4 --sdp-coverage 0.5 >/dev/null 2>"$WORK/fitwarn"
[ ! -s "$WORK/fitwarn" ] && pass "--fit with --sdp-coverage prints no warning" \
  || { fail "--fit warned: $(cat "$WORK/fitwarn")"; }
finish
