# The SDP invariants of docs/architecture.md on real MPI ranks.
#  I1 and I3: mpi_invariants (identical replicas; synced gradients against the all-reduce oracle)
#             on 2, 3, 4 and 8 ranks, and on 3 and 4 ranks with device-memory synchronisation.
#  I2: k = N under forward and backward masking is bitwise data parallelism (N = 2, 3, 4); and
#      4 workers with batch 2 train the same model as 1 worker with batch 8, to float tolerance.
#  I5: the plan.json of a 4-rank run gives every unit exactly k owners and balanced shares.
# (I4 is tests/test_sdp_forward_equiv.c, a single process.)
source "$(dirname "$0")/lib.sh"
: "${SDP_mpi_invariants:?ctest sets it}" "${SDP_mpi_st_diff:?ctest sets it}"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
make_text "$WORK/text.txt" 60000

# train_on N DIR ARGS...: a training run on N ranks into DIR; fails the test with its log if it fails.
train_on() {
  local n=$1 dir=$2; shift 2
  if ! timeout 60 "${MPI[@]}" -n "$n" "$SDP_BIN" train --threads 1 "$@" --out "$dir" \
      >"$dir.log" 2>&1; then
    fail "run $dir on $n ranks failed"; tail -5 "$dir.log"; return 1
  fi
}

# ---- I1 and I3 -----------------------------------------------------------------------------------
for n in 2 3 4 8; do
  if timeout 120 "${MPI[@]}" -n "$n" "$SDP_mpi_invariants" >"$WORK/inv$n.log" 2>&1; then
    pass "$(tail -1 "$WORK/inv$n.log")"
  else
    fail "mpi_invariants on $n ranks"; grep -v '^ok' "$WORK/inv$n.log" | head -20
  fi
done

# The same checks with the sync told that the buffers are a device's (sdp_sync_use_backend), with
# and without device communicators: the code paths of `sdp-cuda train --device cuda` on several
# ranks, over a stand-in device made of host memory.
for n in 3 4; do
  for memory in staged devcomm; do
    if timeout 120 "${MPI[@]}" -n "$n" "$SDP_mpi_invariants" all "$memory" >"$WORK/inv$n$memory.log" 2>&1; then
      pass "$(tail -1 "$WORK/inv$n$memory.log")"
    else
      fail "mpi_invariants on $n ranks, $memory memory"; grep -v '^ok' "$WORK/inv$n$memory.log" | head -20
    fi
  done
done

# ---- I2a: k = N is data parallelism, bit for bit -------------------------------------------------
# Twelve heads and 48 MLP neurons: one neuron chunk per worker divides both for N = 2, 3, 4.
M=(--data "$WORK/text.txt" --layers 2 --heads 12 --width 24 --d-ff 48 --seq-len 16 --batch 2
   --steps 6 --warmup 1 --lr 1e-2 --log-every 3 --val-batches 2 --seed 3)
# N = 4 runs all four modes; N = 2 and 3 two each, together covering every mode once more.
modes_for() {
  case $1 in
    2) echo "forward:block backward:neuron" ;;
    3) echo "forward:neuron backward:block" ;;
    *) echo "forward:block forward:neuron backward:block backward:neuron" ;;
  esac
}
for n in 2 3 4; do
  train_on "$n" "$WORK/ddp$n" "${M[@]}" --sdp-mask none || continue
  for mode in $(modes_for "$n"); do
    mask=${mode%:*} unit=${mode#*:}
    extra=()
    [ "$mask" = forward ] && [ "$n" -eq 4 ] && extra=(--branch-scale inverse) # 1/C = 1 at k = N
    dir="$WORK/k${n}_${mask}_$unit"
    train_on "$n" "$dir" "${M[@]}" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-owners "$n" \
      "${extra[@]}" || continue
    if cmp -s "$WORK/ddp$n/model.safetensors" "$dir/model.safetensors" &&
       cmp -s "$WORK/ddp$n/optim.safetensors" "$dir/optim.safetensors"; then
      pass "N=$n: $mask masking with $unit units and k=N is bitwise data parallelism (model and optimizer)"
    else
      fail "N=$n: $mask masking, $unit units, k=N differs from --sdp-mask none"
    fi
  done
done
# Negative control: with k < N the model is not data parallelism's (its plan is checked below).
train_on 4 "$WORK/k3" "${M[@]}" --sdp-mask backward --sdp-unit block --sdp-owners 3 \
  --check-replicas 1 \
  && ! cmp -s "$WORK/ddp4/model.safetensors" "$WORK/k3/model.safetensors" \
  && pass "control: backward masking with k=3 of 4 gives another model" \
  || fail "control: k=3 of 4 gave data parallelism's model"

# ---- I2b: N workers with batch B equal one worker with batch N*B ---------------------------------
# The loader gives rank r of N the sequences [(s*N + r)*B, +B) at step s, so 4 workers with
# batch 2 and 1 worker with batch 8 see the same 8 sequences per step. Only the order of float
# sums differs. Clipping is off, so a wrong gradient scale cannot hide behind it. Tolerances
# (absolute, on every parameter after 8 steps at lr 1e-2, where a step moves a parameter by up
# to ~1e-2):
#   SGD   1e-6: measured 7e-9.
#   AdamW 1e-4: measured 1.4e-6. AdamW divides by sqrt(v) + eps, so a gradient that is zero up to
#         rounding (such as gpt's attention key bias: softmax ignores it) moves by up to lr per
#         step in a direction set by the rounding; eps 1e-6 (not 1e-8, where 3e-5 was measured)
#         keeps those elements from deciding the comparison.
# Control: 1 worker with batch 2 (a quarter of the data) differs by ~9e-2.
E=(--data "$WORK/text.txt" --layers 2 --heads 2 --width 32 --seq-len 16 --steps 8 --warmup 0
   --lr 1e-2 --log-every 4 --val-batches 2 --seed 4 --clip 0)
for opt in "sgd 1e-6" "adamw 1e-4"; do
  set -- $opt
  train_on 4 "$WORK/dp4_$1" "${E[@]}" --optimizer "$1" --eps 1e-6 --batch 2 || continue
  train_on 1 "$WORK/dp1_$1" "${E[@]}" --optimizer "$1" --eps 1e-6 --batch 8 || continue
  if out=$("$SDP_mpi_st_diff" "$WORK/dp4_$1/model.safetensors" "$WORK/dp1_$1/model.safetensors" "$2" 0); then
    pass "$1: 4 workers x batch 2 = 1 worker x batch 8 within $2 ($out)"
  else
    fail "$1: 4 workers x batch 2 differ from 1 worker x batch 8 beyond $2: $out"
  fi
done
# Gradient accumulation: 2 micro-batches of 4 read the same 8 sequences as one batch of 8 and
# must give the same model (SGD, tolerance as above). So must 4 workers x 1 x 2 micro-batches:
# rank r reads sequences 8s + r and 8s + 4 + r, together batch 8's.
train_on 1 "$WORK/accum1" "${E[@]}" --optimizer sgd --eps 1e-6 --batch 4 --grad-accum 2 &&
if out=$("$SDP_mpi_st_diff" "$WORK/accum1/model.safetensors" "$WORK/dp1_sgd/model.safetensors" 1e-6 0); then
  pass "sgd: 1 worker x batch 4 x 2 micro-batches = 1 worker x batch 8 within 1e-6 ($out)"
else
  fail "sgd: gradient accumulation differs from the larger batch: $out"
fi
train_on 4 "$WORK/accum4" "${E[@]}" --optimizer sgd --eps 1e-6 --batch 1 --grad-accum 2 &&
if out=$("$SDP_mpi_st_diff" "$WORK/accum4/model.safetensors" "$WORK/dp1_sgd/model.safetensors" 1e-6 0); then
  pass "sgd: 4 workers x batch 1 x 2 micro-batches = 1 worker x batch 8 within 1e-6 ($out)"
else
  fail "sgd: 4 workers with gradient accumulation differ from 1 worker x batch 8: $out"
fi
train_on 1 "$WORK/quarter" "${E[@]}" --optimizer adamw --eps 1e-6 --batch 2 &&
if out=$("$SDP_mpi_st_diff" "$WORK/quarter/model.safetensors" "$WORK/dp1_adamw/model.safetensors" 1e-4 0); then
  fail "control: a quarter of the data gave the same model within 1e-4 ($out)"
else
  pass "control: a quarter of the data gives another model ($out)"
fi

# ---- I5: coverage in plan.json -------------------------------------------------------------------
# check_plan DIR UNIT ASSIGN K LAYERS: every unit of a 4-worker plan has exactly K distinct owners,
# shares are balanced to within one unit (per block and group for neuron units, and over the
# model), and the cyclic assignment is the window (u + j) mod N.
check_plan() {
  local out
  if out=$(python3 - "$@" 4 2>&1 <<'PY'
import json, sys
path, unit, assign = sys.argv[1:4]
k, layers, N = map(int, sys.argv[4:7])
p = json.load(open(f"{path}/plan.json"))
assert p["world"] == N and p["owners"] == k, f"world {p['world']} owners {p['owners']}"
units = p["units"]
want = layers if unit == "block" else layers * 2 * N  # two groups, one chunk per worker
assert len(units) == want, f"{len(units)} units, expected {want}"
for i, u in enumerate(units):
    o = u["owners"]
    assert len(o) == k and o == sorted(set(o)) and all(0 <= w < N for w in o), f"unit {i}: {o}"
def spread(us):
    c = [0] * N
    for u in us:
        for w in u["owners"]:
            c[w] += 1
    return max(c) - min(c)
seqs, kinds = {}, {}
for u in units:
    seqs.setdefault((u["block"], u["group"]), []).append(u)
    kinds.setdefault(u["group"], []).append(u)
groups = [units] if unit == "block" else list(seqs.values()) + list(kinds.values())
for us in groups:
    assert spread(us) <= 1, f"unbalanced shares among {[u['owners'] for u in us]}"
# The cyclic window, where a sequence (the blocks, or one group's chunks) is a multiple of N long
# (shorter leftovers take back-to-back windows instead, see src/sdp/plan.c): unit i is owned by
# workers (i + j) mod N, j < k.
if assign == "cyclic":
    for us in [units] if unit == "block" else seqs.values():
        for i, u in enumerate(us if len(us) % N == 0 else []):
            assert u["owners"] == sorted((i + j) % N for j in range(k)), f"{u} is not the window"
print(f"{len(units)} units, each with {k} owners, balanced")
PY
  ); then
    pass "plan.json ($2 $3 k=$4 of 4): $out; owners' checksums agreed every step"
  else
    fail "plan.json ($2 $3 k=$4 of 4): $out"
  fi
}
check_plan "$WORK/k3" block cyclic 3 2
# Four layers; under neuron units each layer's two groups (heads, MLP) have one chunk per worker.
# --check-replicas 1 also makes the run compare the owners' checksums every step.
C=(--data "$WORK/text.txt" --layers 4 --heads 4 --width 16 --seq-len 16 --batch 2 --steps 2
   --warmup 0 --val-batches 1 --check-replicas 1)
for spec in "forward block random 3" "backward neuron cyclic 2" "forward neuron random 1"; do
  set -- $spec
  dir="$WORK/plan_$1_$2_$3_$4"
  train_on 4 "$dir" "${C[@]}" --sdp-mask "$1" --sdp-unit "$2" --sdp-assign "$3" --sdp-owners "$4" \
    && check_plan "$dir" "$2" "$3" "$4" 4
done
finish
