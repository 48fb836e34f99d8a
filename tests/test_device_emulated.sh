# The trainer's device code paths, run on the CPU: `--device emulated` keeps parameters, gradients
# and optimizer state in "device" memory that the trainer reaches only by upload and download,
# updates them with the backend's adamw_update and sgd_update, takes norms on the device, reduces
# each owner group over device communicators (MPI standing in for NCCL) and publishes through
# device packing buffers; `--device emulated-shared` stages every reduction through host memory,
# as ranks sharing one GPU do. Its arithmetic is the CPU backend's, so every run must equal the
# same run with `--device cpu` bit for bit: the same losses, validation losses, and model and
# optimizer checkpoints. Covered: data parallelism, forward and backward masking with block and
# neuron units, AdamW and SGD, gradient accumulation, dropout, --zero 1 and 2, owner replicas checked every step,
# resuming a device run, a simulated worker's device bytes against `sdp plan`, and the ResNet (batch-norm
# buffers averaged on the device) when Fashion-MNIST is installed. Under backward masking with
# k > 1 the checkpoint and evaluation must hold the owners' averaged running statistics on every
# rank: tests/mpi_bn_average checks that of the averaging itself, from each rank's own values,
# and the ResNet run with k = 2 of 4 compares the cpu's checkpoint with the emulated device's,
# which is gathered from the publishers.
source "$(dirname "$0")/lib.sh"
: "${SDP_mpi_bn_average:?ctest sets it}"
make_text "$WORK/text.txt" 60000
MODEL=(--layers 2 --heads 4 --width 32 --seq-len 16 --batch 2)
GPT=(--data "$WORK/text.txt" "${MODEL[@]}" --steps 12 --warmup 2 --log-every 1 --val-every 6
     --val-batches 2 --threads 1 --seed 5 --ckpt-every 6)

# same_run A B: equal losses and validation losses at every logged step, equal checkpoints.
same_run() {
  local a=$1 b=$2 key
  for key in loss val_loss; do
    cmp -s <(grep -o "\"$key\":[^,]*" "$a/metrics.jsonl") <(grep -o "\"$key\":[^,]*" "$b/metrics.jsonl") \
      || { echo "$key differs:"; paste <(grep -o "\"$key\":[^,]*" "$a/metrics.jsonl") \
                                         <(grep -o "\"$key\":[^,]*" "$b/metrics.jsonl") | head -5
           return 1; }
  done
  grep -q '"val_loss"' "$a/metrics.jsonl" || { echo "no validation was logged"; return 1; }
  for f in model optim; do
    cmp -s "$a/$f.safetensors" "$b/$f.safetensors" || { echo "$f.safetensors differs"; return 1; }
  done
}

# compare NAME RANKS ARGS...: the run on cpu, emulated and emulated-shared devices, all equal.
compare() {
  local name=$1 n=$2; shift 2
  local dev ok=1
  for dev in cpu emulated emulated-shared; do
    timeout 180 "$MPIEXEC" -n "$n" --oversubscribe "$SDP_BIN" train "$@" --device "$dev" \
      --out "$WORK/$name-$dev" >"$WORK/$name-$dev.log" 2>&1 ||
      { fail "$name, --device $dev: training failed"; tail -3 "$WORK/$name-$dev.log"; return; }
  done
  for dev in emulated emulated-shared; do
    if same_run "$WORK/$name-cpu" "$WORK/$name-$dev"; then :; else
      ok=0; fail "$name: --device $dev differs from --device cpu"
    fi
  done
  [ $ok -eq 1 ] && pass "$name: both emulated devices equal the cpu bit for bit ($(grep -c '"loss"' \
    "$WORK/$name-cpu/metrics.jsonl") losses, $(grep -c '"val_loss"' "$WORK/$name-cpu/metrics.jsonl") validations, both checkpoints)"
}

compare "1 rank" 1 "${GPT[@]}" --grad-accum 2
compare "data parallelism, 2 ranks, sgd" 2 "${GPT[@]}" --model llama --optimizer sgd --lr 0.05
# The summary's DDP row is counted in the bytes the worker rows are: the device's, on a device.
for dev in cpu emulated emulated-shared; do
  if ddp_row_is_worker0 "$WORK/data parallelism, 2 ranks, sgd-$dev.log"; then
    pass "--device $dev, data parallelism: the summary's DDP row is worker 0's"
  else fail "--device $dev, data parallelism: the summary's DDP row is not worker 0's"; fi
done
compare "backward block k=2 of 4" 4 "${GPT[@]}" --sdp-mask backward --sdp-unit block \
  --sdp-owners 2 --check-replicas 1
compare "backward neuron k=1 of 3" 3 "${GPT[@]}" --sdp-mask backward --sdp-unit neuron \
  --sdp-owners 1 --check-replicas 1
compare "forward neuron C=0.5 of 4" 4 "${GPT[@]}" --sdp-mask forward --sdp-unit neuron \
  --sdp-coverage 0.5 --check-replicas 1
compare "forward block k=3 of 4, llama" 4 "${GPT[@]}" --model llama --sdp-mask forward \
  --sdp-unit block --sdp-owners 3
# ZeRO on a device: emulated reduces each bucket (stage 1) or layer piece (stage 2) with the
# backend's reduce_scatter_start and all-gathers with allgather_start (its reduce-scatter fills
# the rest of the buffer with NaN, as spent); emulated-shared stages them through host memory.
# The optimizer runs on the device's shards either way.
compare "backward neuron k=2 of 4, --zero 1" 4 "${GPT[@]}" --sdp-mask backward --sdp-unit neuron \
  --sdp-owners 2 --check-replicas 1 --zero 1
compare "data parallelism, 3 ranks, --zero 1, 2 micro-batches" 3 "${GPT[@]}" --zero 1 \
  --grad-accum 2 --check-replicas 1
compare "data parallelism, 4 layers, --zero 2" 4 "${GPT[@]}" --layers 4 --zero 2 --check-replicas 1
compare "forward neuron C=0.5 of 4, 4 layers, --zero 2, 3 micro-batches" 4 "${GPT[@]}" --layers 4 \
  --sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5 --zero 2 --grad-accum 3 --check-replicas 1
# Dropout's masks live in device memory and are drawn there: the same bits as the cpu's.
compare "forward neuron C=0.5 of 4, dropout 0.2" 4 "${GPT[@]}" --sdp-mask forward \
  --sdp-unit neuron --sdp-coverage 0.5 --check-replicas 1 --dropout 0.2

# A device run stopped at its step-6 checkpoint and resumed ends where the uninterrupted cpu
# run of the same 12 steps does.
R="$WORK/resumed"
if timeout 120 "$MPIEXEC" -n 4 --oversubscribe "$SDP_BIN" train "${GPT[@]}" --sdp-mask backward \
     --sdp-unit block --sdp-owners 2 --device emulated --out "$R" --stop-after 6 >"$R.log" 2>&1 &&
   timeout 120 "$MPIEXEC" -n 4 --oversubscribe "$SDP_BIN" train --resume "$R" >>"$R.log" 2>&1; then
  for f in model optim; do
    cmp -s "$R/$f.safetensors" "$WORK/backward block k=2 of 4-cpu/$f.safetensors" ||
      fail "resume on the emulated device: $f.safetensors differs from the uninterrupted run"
  done && pass "resume on the emulated device: bitwise the uninterrupted cpu run"
else
  fail "resume on the emulated device failed"; tail -3 "$R.log"
fi

# A simulated worker on the emulated device holds, in the device's tally, the bytes `sdp plan`
# predicts for its rank.
"$SDP_BIN" plan "${MODEL[@]}" --vocab 256 --world 4 --threads 1 --sdp-mask forward --sdp-unit block --json \
  >"$WORK/plan.json" 2>/dev/null || sed -n 1p "$WORK/plan.json"
timeout 60 "$SDP_BIN" train "${GPT[@]}" --sdp-mask forward --sdp-unit block --sim-world 4 \
  --sim-rank 3 --device emulated --out "$WORK/sim" >"$WORK/sim.log" 2>&1 ||
  { fail "simulated worker on the emulated device failed"; tail -3 "$WORK/sim.log"; }
if python3 - "$WORK/plan.json" "$WORK/sim/memory.json" <<'PY'
import json, sys
plan, measured = (json.load(open(p)) for p in sys.argv[1:3])
p, m = plan["workers"][3], measured["workers"][0]
keys = ["params", "grads", "optimizer", "activations", "scratch"]
bad = [(k, p[k], m[k]) for k in keys if p[k] != m[k]]
for b in bad: print("%s: planned %d, device tally %d" % b)
sys.exit(1 if bad or "device_peak_in_use" not in m else 0)
PY
then pass "simulated rank 3 of 4 on the emulated device holds the planned bytes"
else fail "simulated worker on the emulated device: its tally differs from the plan"; fi

if out=$(timeout 120 "$MPIEXEC" -n 4 --oversubscribe "$SDP_mpi_bn_average" 2>&1); then
  pass "running statistics averaged under backward masking: every rank holds the owners' average ($(grep -c '^ok' <<<"$out") cases: block and neuron units, every k, host and emulated device)"
else
  fail "running statistics averaged under backward masking: some rank lacks the owners' average"
  grep -v '^ok' <<<"$out" | head -8
fi

if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist"
  RES=(--model resnet --data "$WORK/fmnist" --depth 8 --channels 4 --batch 8 --optimizer sgd
       --lr 0.05 --steps 6 --log-every 1 --val-every 3 --val-batches 2 --threads 1 --seed 7
       --ckpt-every 3 --bn-recal-batches 2)
  compare "resnet backward neuron k=1 of 2" 2 "${RES[@]}" --sdp-mask backward --sdp-unit neuron \
    --sdp-owners 1 --check-replicas 1
  # Depth 14: depth 8 has one droppable block, which k = 2 of 4 would leave two workers without.
  compare "resnet forward block C=0.5 of 4" 4 "${RES[@]}" --depth 14 --sdp-mask forward \
    --sdp-unit block --sdp-coverage 0.5
  compare "resnet backward neuron k=2 of 4" 4 "${RES[@]}" --sdp-mask backward --sdp-unit neuron \
    --sdp-owners 2 --check-replicas 1
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
finish
