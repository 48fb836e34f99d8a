#!/usr/bin/env bash
# sdp plan --measure-compute: the step-time model prices each worker's compute by timing its
# forward and backward on this machine (as `sdp train --sim-world N --sim-rank r` runs them, on
# random batches), once per distinct subnetwork, instead of FLOPs at one rate. No data file and no
# calibration file are needed; the combinations it cannot honour are one error line each.
source "$(dirname "$0")/lib.sh"
GPT=(plan --world 4 --layers 4 --heads 4 --width 32 --seq-len 16 --batch 2 --threads 1
     --link-gbps 1)
export SDP_CALIBRATION="$WORK/cal/calibration.json" # must stay unwritten

# check_json FILE STEPS: checks of one --json output; prints what it found.
check_json() {
  python3 - "$@" <<'PY'
import json, sys
path, want_steps = sys.argv[1], int(sys.argv[2])
d = json.load(open(path))
st = d["steptime"]
assert st["measure_compute"] == {"steps": want_steps, "threads": 1}, st
assert st["gflops"] == 0, st
for w in d["workers"] + [d["ddp"]]:
    assert w["forward_s"] > 0 and w["backward_s"] > 0, w
    parts = w["forward_s"] + w["backward_s"] + w["exposed_s"] + w["update_s"]
    assert abs(parts - w["step_s"]) <= 1e-5 * w["step_s"], w
print("forward %.2f ms, backward %.2f ms; DDP forward %.2f ms" % (
    1e3 * d["workers"][0]["forward_s"], 1e3 * d["workers"][0]["backward_s"],
    1e3 * d["ddp"]["forward_s"]))
PY
}

# ---- forward masking by neuron: every worker runs the same shapes, timed once ----------------
if timeout 120 "$SDP_BIN" "${GPT[@]}" --sdp-mask forward --sdp-unit neuron --measure-compute 2 \
     --json >"$WORK/fwd.json" 2>"$WORK/fwd.err" &&
   got=$(check_json "$WORK/fwd.json" 2); then
  pass "forward masking timed: $got"
else
  fail "sdp plan --measure-compute under forward masking"; cat "$WORK/fwd.err" "$WORK/fwd.json"
fi
if grep -q "timed 2 distinct workers of 5" "$WORK/fwd.err" &&
   [ "$(grep -c '^sdp plan: timing' "$WORK/fwd.err")" -eq 2 ]; then
  pass "alike workers are timed once: one SDP worker and one data-parallel worker"
else
  fail "forward masking by neuron should time 2 workers"; cat "$WORK/fwd.err"
fi
python3 - "$WORK/fwd.json" <<'PY' && pass "alike workers share one timing" || fail "alike workers differ"
import json, sys
w = json.load(open(sys.argv[1]))["workers"]
assert len({(x["forward_s"], x["backward_s"]) for x in w}) == 1, w
PY
[ -e "$SDP_CALIBRATION" ] && fail "--measure-compute wrote a calibration file" ||
  pass "--measure-compute reads and writes no calibration file"

# ---- backward masking by block: every worker owns other blocks, so each is timed --------------
if timeout 120 "$SDP_BIN" "${GPT[@]}" --sdp-mask backward --sdp-unit block --measure-compute 1 \
     >"$WORK/bwd.txt" 2>"$WORK/bwd.err" &&
   grep -q "timed 5 distinct workers of 5" "$WORK/bwd.err" &&
   grep -q "compute timed on this machine (--measure-compute 1): each worker's forward and backward, alone at 1 thread" "$WORK/bwd.txt" &&
   grep -q "transport free, compute timed," "$WORK/bwd.txt"; then
  pass "backward masking by block times each worker, and the table says the compute was timed"
else
  fail "sdp plan --measure-compute under backward masking"; cat "$WORK/bwd.err" "$WORK/bwd.txt"
fi

# ---- an image model needs no dataset: random images of the dataset's shape ----------------------
if timeout 120 "$SDP_BIN" plan --world 2 --model resnet --depth 8 --channels 4 --batch 4 \
     --threads 1 --sdp-mask forward --sdp-unit neuron --link-gbps 1 --measure-compute 1 \
     --dataset fashion-mnist --json >"$WORK/img.json" 2>"$WORK/img.err" &&
   got=$(check_json "$WORK/img.json" 1); then
  pass "a ResNet worker is timed without its dataset: $got"
else
  fail "sdp plan --measure-compute on a ResNet"; cat "$WORK/img.err"
fi

# ---- where it would do nothing, a warning says so -------------------------------------------------
err=$(timeout 60 "$SDP_BIN" plan --world 4 --layers 2 --heads 4 --width 32 --measure-compute 3 2>&1 >/dev/null)
if [ "$err" = "sdp: warning: --measure-compute ignored: the step-time model is off without --link-gbps; give each host's link rate, e.g. --link-gbps 10" ]; then
  pass "without --link-gbps, one warning names --measure-compute as ignored"
else
  fail "no warning for --measure-compute without --link-gbps: '$err'"
fi
err=$(timeout 60 "$SDP_BIN" "${GPT[@]}" --fit 4MiB --measure-compute 3 2>&1 >/dev/null)
if grep -q "^sdp: warning: --link-gbps, --measure-compute ignored: --fit prints no step times" <<<"$err" &&
   ! grep -q "^sdp plan: timing" <<<"$err"; then
  pass "under --fit the step-time options are named as ignored, and nothing is timed"
else
  fail "--fit with --measure-compute: '$err'"
fi

# ---- what it refuses ----------------------------------------------------------------------------
expect_error "--measure-compute with --gflops" "--measure-compute and --gflops 10 both set the compute" \
  "$SDP_BIN" "${GPT[@]}" --measure-compute 2 --gflops 10
expect_error "--measure-compute for a GPU" "--measure-compute times this machine's CPU" \
  "$SDP_BIN" "${GPT[@]}" --measure-compute 2 --device cuda --gflops 0
expect_job_error "--measure-compute under mpiexec" "run sdp plan without mpiexec" 2 \
  "$SDP_BIN" "${GPT[@]}" --measure-compute 1
finish
