# `sdp train --sim-world N --sim-rank r` runs worker r of an N-worker job alone: it must hold
# exactly the bytes that `sdp plan --world N` predicts for rank r (the figures a real run's rank r
# allocates, see test_sdp_memplan.sh), read rank r's data stream, and refuse bad set-ups.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 40000
MODEL=(--layers 4 --heads 4 --width 32 --seq-len 16 --batch 2)
DATA=(--data "$WORK/text.txt")
RUN=(--steps 2 --val-every 0 --val-batches 1 --threads 1)

# check_memory N ARGS...: every rank r of N simulated alone holds what the plan predicts.
check_memory() {
  local n=$1; shift
  local name="N=$n $*"
  # stderr apart: a warning (--vocab, which an image model ignores) is not part of the JSON
  "$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world "$n" --threads 1 --json "$@" >"$WORK/plan.json" \
    2>"$WORK/plan.err" || { fail "$name: plan failed"; cat "$WORK/plan.err"; return; }
  for ((r = 0; r < n; r++)); do
    timeout 120 "$SDP_BIN" train "${DATA[@]}" "${MODEL[@]}" "${RUN[@]}" --out "$WORK/sim$r" --overwrite \
      --sim-world "$n" --sim-rank "$r" "$@" >"$WORK/log" 2>&1 \
      || { fail "$name rank $r: simulated training failed"; cat "$WORK/log"; return; }
    grep -qF "simulating rank $r of $n (no communication)" "$WORK/log" \
      || { fail "$name rank $r: banner lacks 'simulating rank $r of $n'"; return; }
    [ ! -e "$WORK/sim$r/model.safetensors" ] \
      || { fail "$name rank $r: a simulated run wrote a checkpoint"; return; }
    # The summary's row is the worker of the real job, checkpoint buffers included, which a
    # simulated run never allocates: its eval+ckpt cell is the plan's (to the cell's rounding).
    python3 - "$WORK/plan.json" "$WORK/log" "$r" <<'PY' \
      || { fail "$name rank $r: the summary's eval+ckpt is not the plan's"; return; }
import json, re, sys
plan = json.load(open(sys.argv[1]))
r = int(sys.argv[3])
want = plan["workers"][r]["eval_ckpt"]
row = [l.split() for l in open(sys.argv[2]) if re.match(r"^  %d +[0-9.]+ [KMG]?i?B " % r, l)]
assert row, "no summary row for worker %d" % r
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
cells = [float(v) * units[u] for v, u in zip(row[0][1::2], row[0][2::2]) if u in units]
got, unit = cells[7], units[row[0][2 * 7 + 2]]  # params .. data, then eval+ckpt
ok = abs(got - want) <= 0.051 * unit and (want == 0) == (got == 0)
print("rank %d eval+ckpt: summary %.0f, plan %d" % (r, got, want))
sys.exit(0 if ok else 1)
PY
    python3 - "$WORK/plan.json" "$WORK/sim$r/memory.json" "$r" <<'PY' \
      || { fail "$name rank $r: measured bytes differ from the plan"; return; }
import json, sys
plan, measured = (json.load(open(p)) for p in sys.argv[1:3])
r = int(sys.argv[3])
keys = ["params", "grads", "optimizer", "activations", "scratch", "buffers"]
assert len(measured["workers"]) == 1, "one worker expected in memory.json"
m = measured["workers"][0]
assert m["rank"] == r, "memory.json names rank %d, not %d" % (m["rank"], r)
p = plan["workers"][r]
bad = [(k, p[k], m[k]) for k in keys if p[k] != m[k]]
for b in bad: print("rank %d %s: planned %d, measured %d" % ((r,) + b))
sys.exit(1 if bad else 0)
PY
  done
  pass "$name: every simulated rank holds the planned bytes"
}
check_memory 4 --sdp-mask forward --sdp-unit block
check_memory 4 --sdp-mask forward --sdp-unit neuron
check_memory 4 --sdp-mask backward --sdp-unit block --sdp-owners 2
check_memory 4 --sdp-mask forward --sdp-unit block --model llama
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist"
  MODEL=(--model resnet --depth 8 --channels 4 --batch 4 --optimizer sgd)
  DATA=(--data "$WORK/fmnist" --bn-recal-batches 2)
  check_memory 4 --sdp-mask forward --sdp-unit neuron
  MODEL=(--model vit --layers 4 --heads 4 --width 16 --d-ff 32 --patch 7 --batch 4)
  DATA=(--data "$WORK/fmnist")
  check_memory 4 --sdp-mask forward --sdp-unit block
  check_memory 4 --sdp-mask backward --sdp-unit neuron --sdp-owners 3
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

# The first step's loss is computed before any update, from the same initial parameters on every
# worker, so a real 2-worker data-parallel run's first loss is the mean of its two workers' first
# losses: the simulated ranks' (equal counts). This holds only if each simulated rank reads the
# real rank's data stream. (Later steps differ by design: nothing is averaged in a simulation.)
MODEL=(--layers 4 --heads 4 --width 32 --seq-len 16 --batch 2)
DATA=(--data "$WORK/text.txt")
first_loss() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l][0])' "$1"; }
for mask in none; do
  SDP=(--sdp-mask "$mask" --log-every 1)
  timeout 120 "${MPI[@]}" -n 2 "$SDP_BIN" train "${DATA[@]}" "${MODEL[@]}" "${RUN[@]}" "${SDP[@]}" \
    --out "$WORK/real" --overwrite >"$WORK/log" 2>&1 || { fail "$mask: real 2-rank run failed"; cat "$WORK/log"; continue; }
  ok=1
  for r in 0 1; do
    timeout 120 "$SDP_BIN" train "${DATA[@]}" "${MODEL[@]}" "${RUN[@]}" "${SDP[@]}" --sim-world 2 \
      --sim-rank "$r" --out "$WORK/s$r" --overwrite >"$WORK/log" 2>&1 || { fail "$mask: sim rank $r failed"; cat "$WORK/log"; ok=0; }
  done
  [ $ok = 1 ] || continue
  real=$(first_loss "$WORK/real/metrics.jsonl"); s0=$(first_loss "$WORK/s0/metrics.jsonl")
  s1=$(first_loss "$WORK/s1/metrics.jsonl")
  if python3 -c 'import sys; a,b,c=map(float,sys.argv[1:]); sys.exit(0 if abs(a-(b+c)/2) <= 1e-6*abs(a) and abs(b-c) > 1e-6 else 1)' "$real" "$s0" "$s1"; then
    pass "$mask: real 2-rank first loss $real = mean of simulated ranks' $s0 and $s1"
  else
    fail "$mask: real 2-rank first loss $real, simulated ranks $s0 and $s1 (mean expected, ranks differing)"
  fi
done
grep -q '"sim_val_loss"' "$WORK/s0/metrics.jsonl" && ! grep -q '"val_loss"' "$WORK/s0/metrics.jsonl" \
  && pass "a simulated run's validation is labelled sim_val_loss in metrics.jsonl" \
  || fail "metrics.jsonl of a simulated run lacks sim_val_loss (or has val_loss)"

# Errors.
E=(train "${DATA[@]}" "${MODEL[@]}" "${RUN[@]}" --out "$WORK/err")
expect_error "--sim-rank out of range" "--sim-rank 4 is not a worker of --sim-world 4" \
  "$SDP_BIN" "${E[@]}" --sim-world 4 --sim-rank 4
expect_error "--sim-rank without --sim-world" "needs --sim-world" "$SDP_BIN" "${E[@]}" --sim-rank 1
msgs=$(timeout 30 "${MPI[@]}" -n 2 "$SDP_BIN" "${E[@]}" --sim-world 4 --sim-rank 1 2>&1 >/dev/null \
  | grep '^sdp: error' | sed -E 's/^sdp: error \(rank [0-9]+ of [0-9]+\): //' | sort -u)
if [ "$(printf '%s\n' "$msgs" | grep -c .)" -eq 1 ] && grep -qF "2 MPI ranks were started" <<<"$msgs"; then
  pass "--sim-world under mpirun -n 2: $msgs"
else
  fail "--sim-world under mpirun -n 2: expected one message naming 2 MPI ranks, got: $msgs"
fi
# --device cuda: what it refuses before any device is touched (these hold with or without a GPU).
expect_error "unknown --device" "unknown --device 'tpu'" "$SDP_BIN" "${E[@]}" --device tpu
# `sdp` itself never links CUDA (sdp-cuda does), so there --device cuda names the way out.
expect_error "--device cuda on sdp" "this sdp was built without CUDA: run sdp-cuda" \
  "$SDP_BIN" "${E[@]}" --device cuda
# A simulated run writes no checkpoint: eval says why, rather than suggest --ckpt-every.
expect_error "sdp eval of a --sim-world run" "is a --sim-world run, which measures one worker" \
  "$SDP_BIN" eval --run "$WORK/sim0"
finish
