# sdp train on several MPI ranks: an SDP run stopped and resumed with the same N and k is
# bitwise the uninterrupted run (forward and backward masking); a run resumes on another number
# of workers (so another k at the same coverage) and keeps learning; ranks started with
# different options, and impossible SDP requests, end every rank quickly with one message for the
# job.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 60000

# Training runs are tiny (a few KiB of parameters) but real: byte-level text, AdamW, clipping.
R=(--data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 16 --batch 4 --warmup 2
   --lr 1e-2 --log-every 5 --val-every 0 --val-batches 2 --seed 8)

# on N ARGS...: sdp on N ranks (60 s at most); the log goes to $WORK/last.log.
on() {
  local n=$1; shift
  timeout 60 "${MPI[@]}" -n "$n" "$SDP_BIN" "$@" --threads 1 >"$WORK/last.log" 2>&1 \
    || { echo "  (sdp on $n ranks failed:)"; tail -3 "$WORK/last.log"; return 1; }
}

# The metrics without the fields that measure time.
losses() { sed -E 's/"(tokens_per_s|ms_per_step|elapsed_s|ms_forward|ms_backward|ms_sync|ms_update)":[^,}]*,?//g' "$1"; }
# The loss of each progress line, one per line.
loss_column() { grep '"loss"' "$1" | sed -E 's/.*"loss":([0-9.e+-]+).*/\1/'; }

# ---- resume with the same N and k: bit for bit ----------------------------------------------------
for mode in "forward neuron random" "backward block cyclic"; do
  set -- $mode
  S=("${R[@]}" --steps 20 --sdp-mask "$1" --sdp-unit "$2" --sdp-assign "$3")
  on 4 train "${S[@]}" --out "$WORK/whole_$1" || { fail "$1: uninterrupted run"; continue; }
  on 4 train "${S[@]}" --out "$WORK/split_$1" --stop-after 10 || { fail "$1: first half"; continue; }
  grep -q '"step":20' "$WORK/split_$1/metrics.jsonl" && fail "$1: --stop-after 10 did not stop"
  on 4 train --resume "$WORK/split_$1" || { fail "$1: resume"; continue; }
  if diff <(losses "$WORK/whole_$1/metrics.jsonl") <(losses "$WORK/split_$1/metrics.jsonl") >"$WORK/diff"; then
    pass "$1 masking ($2 units, $3): the resumed run's metrics equal the uninterrupted run's bit for bit"
  else
    fail "$1 masking: resumed metrics differ"; head -4 "$WORK/diff"
  fi
  cmp -s "$WORK/whole_$1/model.safetensors" "$WORK/split_$1/model.safetensors" &&
    cmp -s "$WORK/whole_$1/optim.safetensors" "$WORK/split_$1/optim.safetensors" &&
    pass "$1 masking: final model and optimizer files are byte-identical" ||
    fail "$1 masking: final checkpoints differ"
done

# ---- resume on another number of workers (and so another k at coverage 0.5) ------------------------
# Learning goes on: the mean loss after the resume is below the mean of the last two progress
# lines before it, and far below the first line's (a fresh model would start near log(256)).
for mode in "forward neuron 4 2" "backward block 2 4"; do
  set -- $mode
  dir="$WORK/move_$1"
  on "$3" train "${R[@]}" --steps 30 --sdp-mask "$1" --sdp-unit "$2" --out "$dir" --stop-after 15 \
    || { fail "$1: first part on $3 ranks"; continue; }
  on "$4" train --resume "$dir" || { fail "$1: resume on $4 ranks"; continue; }
  if ! grep -q "resumed at step 15" "$WORK/last.log"; then fail "$1: no 'resumed at step 15'"; continue; fi
  # The data goes on where the old workers stopped: their saved step, in steps of the new N,
  # rounded up (or the next epoch's start, when the rest of the epoch is less than one step).
  if grep -o "data: $3 workers stopped at step [0-9]* of epoch [0-9]*, so $4 go on at step [0-9]* of epoch [0-9]*" \
       "$WORK/last.log" | tr -dc '0-9 ' | awk -v a="$3" -v b="$4" '
       NF == 6 { s = $2; e = $3; s2 = $5; e2 = $6; want = int((s * a + b - 1) / b)
                 ok = (e2 == e && s2 == want) || (e2 == e + 1 && s2 == 0); exit !ok }
       END { if (NR != 1) exit 1 }'; then
    pass "$1: from $3 to $4 ranks the data goes on where it stopped ($(grep -o 'data: .*' "$WORK/last.log"))"
  else
    fail "$1: the resume on $4 ranks does not say, or miscounts, where the data goes on"
    grep "resumed" "$WORK/last.log"
  fi
  k_before=$((${3} / 2)) k_after=$((${4} / 2))
  grep -q "k = $k_after of N = $4" "$WORK/last.log" || fail "$1: the resumed run is not k=$k_after of $4"
  if loss_column "$dir/metrics.jsonl" | awk -v a="$3" -v b="$4" -v kb="$k_before" -v ka="$k_after" '
      { l[NR] = $1 } END {
        if (NR != 6) exit 1
        before = (l[2] + l[3]) / 2; after = (l[4] + l[5] + l[6]) / 3
        printf "losses %s ... %s on %d ranks (k=%d), then %s %s %s on %d ranks (k=%d)", l[1], l[3], a, kb, l[4], l[5], l[6], b, ka
        exit !(after < before && after < l[1] - 0.5) }' >"$WORK/trend"; then
    pass "$1 masking resumes from $3 to $4 ranks and keeps learning: $(cat "$WORK/trend")"
  else
    fail "$1 masking from $3 to $4 ranks: $(cat "$WORK/trend")"; cat "$dir/metrics.jsonl"
  fi
done

# ---- errors under mpiexec ----------------------------------------------------------------------------
# Impossible SDP requests end the job quickly with one line, printed once by rank 0, and no run
# directory (expect_job_error in lib.sh).
E=(train "${R[@]}" --steps 4 --threads 1 --out "$WORK/never")
expect_job_error "k > N" "--sdp-owners 5 is impossible with 4 workers" \
  4 "$SDP_BIN" "${E[@]}" --sdp-mask backward --sdp-owners 5
expect_job_error "coverage not a multiple of 1/N" "use --sdp-coverage 0.25 or 0.5" \
  4 "$SDP_BIN" "${E[@]}" --sdp-mask forward --sdp-coverage 0.3
expect_job_error "more neuron chunks than heads" "more than the width" \
  2 "$SDP_BIN" "${E[@]}" --sdp-mask forward --sdp-unit neuron --sdp-chunks 8
expect_job_error "chunks not dividing the heads" "dividing 4" \
  2 "$SDP_BIN" "${E[@]}" --sdp-mask backward --sdp-unit neuron --sdp-chunks 3
expect_job_error "default chunks (one per worker) more than the heads" "the default of 4 chunks" \
  4 "$SDP_BIN" "${E[@]}" --heads 2 --sdp-mask forward --sdp-unit neuron --sdp-owners 1

# Ranks launched with different options (an MPMD command line): every rank stops, and the
# message, printed once, names the rank that differs.
t0=$SECONDS
timeout 30 "${MPI[@]}" -n 1 "$SDP_BIN" "${E[@]}" --sdp-mask forward \
  : -n 1 "$SDP_BIN" "${E[@]}" --sdp-mask backward >"$WORK/stdout" 2>"$WORK/stderr"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && [ "$(grep -c '^sdp: error' "$WORK/stderr")" = 1 ] &&
   grep -q "^sdp: error: rank 1 was started with options that differ from rank 0's" "$WORK/stderr" &&
   ! grep -qE 'ORTE_ERROR_LOG|MPI_ABORT' "$WORK/stderr" && [ ! -e "$WORK/never" ]; then
  pass "differing options end both ranks in $((SECONDS - t0)) s, naming rank 1 once"
else
  fail "differing options: exit status $rc"; cat "$WORK/stderr"
fi
# --branch-scale auto (the default): inverse for forward masking with neuron units on models
# without batch norm; none for block units, for the ResNet, and under --branch-scale none.
P=(plan --world 4 --sdp-mask forward --layers 2 --heads 4 --width 32)
for spec in "inverse:--model gpt" "inverse:--model vit --patch 7" "none:--model gpt --sdp-unit block" \
            "none:--model resnet --depth 14" "none:--model gpt --branch-scale none"; do
  want=${spec%%:*} args=${spec#*:}
  # shellcheck disable=SC2086
  got=$("$SDP_BIN" "${P[@]}" $args | head -1 | grep -o "branch scale [a-z]*")
  [ "$got" = "branch scale $want" ] && pass "branch scale auto: $args gives $want" ||
    fail "branch scale auto: $args gives '$got', expected $want"
done
# The step-time model (docs/network.md): off without --link-gbps, so the table and the JSON are
# as before; with a link, a step-time block with a row per worker and, in the JSON, each worker's
# step and a summary whose step is the slowest worker's.
P=(plan --world 4 --layers 2 --heads 4 --width 32 --sdp-mask backward --sdp-unit block)
L=(--link-gbps 1 --ranks-per-host 2 --gflops 10 --mem-gbs 10)
if "$SDP_BIN" "${P[@]}" | grep -q "step time" || "$SDP_BIN" "${P[@]}" --json | grep -q steptime; then
  fail "sdp plan without --link-gbps prints a step time"
else
  pass "sdp plan without --link-gbps prints no step time"
fi
if [ "$("$SDP_BIN" "${P[@]}" "${L[@]}" | grep -cE '^  [0-3] .* (ms|s)$')" = 4 ]; then
  pass "sdp plan --link-gbps lists each worker's step"
else
  fail "sdp plan --link-gbps: no step-time row per worker"
fi
if "$SDP_BIN" "${P[@]}" "${L[@]}" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
steps = [w["step_s"] for w in d["workers"]]
assert all(s > 0 for s in steps) and d["ddp"]["step_s"] > 0, steps
assert abs(d["steptime"]["step_s"] - max(steps)) < 1e-9 * max(steps), d["steptime"]
assert all(w["publish_s"] > 0 for w in d["workers"])  # backward masking publishes
'; then
  pass "sdp plan --link-gbps --json: each worker's step, the slowest in the summary"
else
  fail "sdp plan --link-gbps --json"
fi
# A rate given absurdly low still prints every time inside its column: each row as long as the
# header's.
if "$SDP_BIN" "${P[@]}" --link-gbps 1e-30 --gflops 1e-30 | awk '
  / worker +forward +backward/ { width = length($0) }
  width && /^  ([0-9]|slowest|DDP) / { rows++; if (length($0) != width) bad++ }
  END { exit !(width && rows == 6 && !bad) }'; then
  pass "sdp plan --link-gbps 1e-30: every step time stays in its column"
else
  fail "sdp plan --link-gbps 1e-30: a step time overruns its column"
fi
# --grad-accum A: every worker computes A micro-batches a step (forward and backward A times
# one's); the step grows, by no more than the slowest worker's compute added (the sync waits for
# it), since the sync is paid once.
for zero in 0 2; do
  if "$SDP_BIN" "${P[@]}" "${L[@]}" --zero $zero --json >"$WORK/a1.json" &&
    "$SDP_BIN" "${P[@]}" "${L[@]}" --zero $zero --grad-accum 3 --json >"$WORK/a3.json" &&
    python3 - "$WORK/a1.json" "$WORK/a3.json" $zero <<'PY'
import json, sys
one, three = (json.load(open(p)) for p in sys.argv[1:3])
zero2 = sys.argv[3] == "2"
assert three["steptime"]["micro_batches"] == 3 and one["steptime"]["micro_batches"] == 1
added = 2 * max(a["forward_s"] + a["backward_s"] for a in one["workers"])
for a, b in zip(one["workers"], three["workers"]):
    for k in ("forward_s", "backward_s"):
        assert abs(b[k] - 3 * a[k]) <= 1e-5 * b[k], (k, a[k], b[k])  # printed to 6 digits
    # Under --zero 2 each early micro-batch also pays its reduce-scatters.
    assert b["step_s"] > a["step_s"] and (zero2 or b["step_s"] <= (a["step_s"] + added) * (1 + 1e-5)), (a, b)
PY
  then
    pass "sdp plan --link-gbps --grad-accum 3 --zero $zero: 3 micro-batches of compute a step"
  else
    fail "sdp plan --link-gbps --grad-accum 3 --zero $zero"
  fi
done
# Inputs sdp plan once accepted silently, or ran on for minutes with.
expect_error "sdp plan --optimizer lion" "unknown --optimizer 'lion': use adamw or sgd" \
  "$SDP_BIN" plan --world 4 --optimizer lion
expect_error "sdp plan: rates that make a step infinite" "a step longer than any number" \
  "$SDP_BIN" plan --world 2 --link-gbps 10 --gflops 1e-300 --grad-accum 2147483647
expect_error "sdp plan --depth 200000" "at most 8192" \
  "$SDP_BIN" plan --world 2 --model resnet --depth 200000
expect_error "sdp plan: 1024 forward-masking workers of 65536 layers" \
  "--world 1024 with 65536 blocks under forward masking is more than sdp plan models" \
  "$SDP_BIN" plan --world 1024 --sdp-mask forward --sdp-unit block --layers 65536 --width 6 --heads 1
if "$SDP_BIN" plan --world 2 --model resnet --layers 3 2>&1 >/dev/null |
  grep -q -- "--layers does not apply to --model resnet"; then
  pass "sdp plan warns of an option the model ignores"
else fail "sdp plan: no warning for --layers on a resnet"; fi
got=$("$SDP_BIN" plan --world 4 --sdp-mask forward --sdp-owners 4 | grep "vs DDP")
case "$got" in
  *"-0.0%"*|*"smaller, total -"*) fail "sdp plan: a worker as large as DDP's: '$got'" ;;
  *"params+grads+optimizer the same, total the same"*) pass "sdp plan: k = N is DDP's size, said so" ;;
  *) fail "sdp plan: k = N: '$got'" ;;
esac
# Many threads only size the scratch: no thread pool starts, so a virtual-memory limit that
# OpenBLAS's per-thread buffers would exhaust (it retried forever) is no matter.
if (ulimit -v 8000000 && timeout 20 "$SDP_BIN" plan --world 4 --threads 64 >/dev/null 2>&1); then
  pass "sdp plan --threads 64 under an 8 GB address-space limit"
else fail "sdp plan --threads 64 under an 8 GB address-space limit: status $?"; fi
finish
