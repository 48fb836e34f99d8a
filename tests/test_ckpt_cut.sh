# A checkpoint cut off between its two files (docs/checkpoints.md, "Crashes") leaves a run that
# resumes, however many saves in a row are cut: a kill or a full disk after the optimizer file
# is in place and before the model's. SDP_TEST_CKPT_CUT=S ends sdp train right there, at the
# save of step S.
#  1. One cut: model of step 10, optimizer files of steps 20 and 10 (optim.prev).
#  2. The resumed run cut again at the same place keeps optim.prev of step 10, the only optimizer
#     state that matches the model (it used to rename the unmatched step-20 file over it).
#  3. A third invocation resumes and ends bitwise equal to the run that was never cut.
#  4. The temporary copies that killed writers leave are removed when a run claims the directory,
#     and nothing else is.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 100000
COMMON=(--data "$WORK/text.txt" --layers 2 --heads 2 --width 32 --seq-len 16 --batch 2
        --steps 20 --ckpt-every 10 --val-every 0 --threads 1 --seed 4)

# run LOG ARGS...: sdp train on one process; its exit status. resume LOG DIR: the same, resuming.
run() {
  local log=$1; shift
  timeout 120 "$SDP_BIN" train "${COMMON[@]}" "$@" >"$log" 2>&1
}
resume() { timeout 120 "$SDP_BIN" train --resume "$2" >"$1" 2>&1; }

# steps DIR: the sdp.step of its model, optimizer and previous optimizer files ("-": absent).
steps() {
  python3 - "$1" <<'PY'
import json, os, struct, sys
out = []
for name in ("model", "optim", "optim.prev"):
    path = os.path.join(sys.argv[1], name + ".safetensors")
    if not os.path.exists(path):
        out.append("-")
        continue
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        out.append(json.loads(f.read(n))["__metadata__"]["sdp.step"])
print(" ".join(out))
PY
}

# expect_steps WHAT DIR "M O P": the files' steps must be these.
expect_steps() {
  local got; got=$(steps "$2")
  if [ "$got" = "$3" ]; then pass "$1: model, optim, optim.prev at steps $got"
  else fail "$1: model, optim, optim.prev at steps '$got', expected '$3'"; fi
}

run "$WORK/ref.log" --out "$WORK/ref" || { fail "the uncut run"; tail -3 "$WORK/ref.log"; }

SDP_TEST_CKPT_CUT=20 run "$WORK/cut1.log" --out "$WORK/cut"
rc=$?
[ "$rc" -eq 3 ] && grep -q "SDP_TEST_CKPT_CUT" "$WORK/cut1.log" && pass "the first save of step 20 was cut" ||
  { fail "the first cut: exit status $rc"; tail -3 "$WORK/cut1.log"; }
expect_steps "after one cut" "$WORK/cut" "10 20 10"

SDP_TEST_CKPT_CUT=20 resume "$WORK/cut2.log" "$WORK/cut"
rc=$?
[ "$rc" -eq 3 ] && pass "the resumed run's save of step 20 was cut too" ||
  { fail "the second cut: exit status $rc"; tail -3 "$WORK/cut2.log"; }
expect_steps "after two cuts in a row" "$WORK/cut" "10 20 10"

touch "$WORK/cut/model.safetensors.tmp.123456" "$WORK/cut/optim.safetensors.tmp.99" \
  "$WORK/cut/notes.tmp.7" "$WORK/cut/model.safetensors.tmp.x1"
if resume "$WORK/cut3.log" "$WORK/cut"; then
  pass "the run resumes after two cuts"
  for f in model optim; do
    if cmp -s "$WORK/ref/$f.safetensors" "$WORK/cut/$f.safetensors"; then
      pass "$f.safetensors is bitwise the uncut run's"
    else fail "$f.safetensors differs from the uncut run's"; fi
  done
  expect_steps "after the resume" "$WORK/cut" "20 20 -"
else
  fail "resuming after two cuts: $(tail -1 "$WORK/cut3.log")"
fi

left=$(cd "$WORK/cut" && ls -a | grep -F .tmp. | sort | tr '\n' ' ')
if [ "$left" = "model.safetensors.tmp.x1 notes.tmp.7 " ]; then
  pass "stale temporary copies removed, other files kept ($(grep -c "removed '" "$WORK/cut3.log") lines say so)"
else fail "after the resume, temporary-looking files left: '$left'"; fi
finish
