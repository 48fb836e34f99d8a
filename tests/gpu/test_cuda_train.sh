# `sdp-cuda train --device cuda` against `sdp train --device cpu`: a tiny GPT, the same seed and
# data, 10 steps; every step's loss within 1e-4 relative. Then SDP on 2 ranks, forward and
# backward masking, k = 1, on CUDA with the owners' replicas compared every step
# (--check-replicas 1), against the same runs on the CPU. On a one-GPU machine the two ranks share
# the device, so their gradients are reduced through host memory (sdp_sync_use_backend's staged
# path); NCCL needs a GPU per rank. Then --zero 1 and 2 on 2 ranks, and the ResNet, 1 and 2
# ranks, when Fashion-MNIST is there.
# Exits 77 (skipped) without a device.
source "$(dirname "$0")/../lib.sh"
: "${SDP_CUDA_BIN:?ctest sets it to the sdp-cuda program}"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skip: no CUDA device (nvidia-smi lists none)"; exit 77
fi
make_text "$WORK/text.txt" 40000
ARGS=(--data "$WORK/text.txt" --layers 2 --heads 4 --width 64 --seq-len 32 --batch 4 --steps 10
      --log-every 1 --val-every 5 --val-batches 2 --threads 1 --seed 7)
for dev in cpu cuda; do
  bin=$SDP_BIN; [ "$dev" = cuda ] && bin=$SDP_CUDA_BIN
  timeout 120 "$bin" train "${ARGS[@]}" --device "$dev" --out "$WORK/$dev" --overwrite >"$WORK/$dev.log" 2>&1 \
    || { fail "--device $dev: training failed"; cat "$WORK/$dev.log"; finish; exit 1; }
done
# same_losses CPU_RUN CUDA_RUN: every logged loss and validation loss within 1e-4 relative
same_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def losses(p, key):
    return [json.loads(l)[key] for l in open(p) if '"%s"' % key in l]
ok = True
for key in ["loss", "val_loss"]:
    cpu, gpu = losses(sys.argv[1], key), losses(sys.argv[2], key)
    assert len(cpu) == len(gpu) and cpu, (key, len(cpu), len(gpu))
    for i, (a, b) in enumerate(zip(cpu, gpu)):
        rel = abs(a - b) / abs(a)
        print("%s %d: cpu %.7f cuda %.7f rel %.2e" % (key, i + 1, a, b, rel))
        ok &= rel <= 1e-4
sys.exit(0 if ok else 1)
PY
}
if same_losses "$WORK/cpu" "$WORK/cuda"
then pass "cuda losses equal cpu losses to 1e-4 relative at every step"
else fail "cuda losses differ from cpu losses"; fi

MPI=("${MPIEXEC:-mpiexec}" --oversubscribe -n 2)
for mask in none forward backward; do
  SDP=(--sdp-mask "$mask")
  [ "$mask" != none ] && SDP+=(--sdp-owners 1 --check-replicas 1)
  for dev in cpu cuda; do
    bin=$SDP_BIN; [ "$dev" = cuda ] && bin=$SDP_CUDA_BIN
    timeout 180 "${MPI[@]}" "$bin" train "${ARGS[@]}" "${SDP[@]}" --device "$dev" \
      --out "$WORK/$mask-$dev" --overwrite >"$WORK/$mask-$dev.log" 2>&1 \
      || { fail "2 ranks, $mask masking, --device $dev: training failed"; tail -5 "$WORK/$mask-$dev.log"; }
  done
  [ -f "$WORK/$mask-cuda/metrics.jsonl" ] || continue
  if same_losses "$WORK/$mask-cpu" "$WORK/$mask-cuda"
  then pass "2 ranks, --sdp-mask $mask: cuda losses equal cpu losses, and replicas stayed identical"
  else fail "2 ranks, --sdp-mask $mask: cuda losses differ from cpu losses"; fi
done
# The summary's DDP row is counted in device bytes, as the worker rows are (it once counted the
# host's scratch and data beside the device's: DDP itself showed 29% larger than DDP).
if ddp_row_is_worker0 "$WORK/none-cuda.log"
then pass "2 ranks, data parallelism on cuda: the summary's DDP row is worker 0's"
else fail "2 ranks, data parallelism on cuda: the summary's DDP row is not worker 0's"; fi
# ZeRO on the device, stages 1 and 2: two ranks sharing the GPU stage each bucket (stage 1) or
# each layer's piece (stage 2) through host memory; the optimizer runs on the device's shards.
# The losses are the cpu's run's with the same stage, replicas stay identical, and each rank's
# device bytes for gradients and optimizer state are exactly what sdp plan --device cuda says.
for stage in 1 2; do
  for dev in cpu cuda; do
    bin=$SDP_BIN; [ "$dev" = cuda ] && bin=$SDP_CUDA_BIN
    timeout 180 "${MPI[@]}" "$bin" train "${ARGS[@]}" --zero "$stage" --check-replicas 1 \
      --device "$dev" --out "$WORK/zero$stage-$dev" --overwrite >"$WORK/zero$stage-$dev.log" 2>&1 \
      || { fail "2 ranks, --zero $stage, --device $dev: training failed"; tail -5 "$WORK/zero$stage-$dev.log"; }
  done
  [ -f "$WORK/zero$stage-cuda/metrics.jsonl" ] || continue
  "$SDP_CUDA_BIN" plan --device cuda --layers 2 --heads 4 --width 64 --seq-len 32 --batch 4 \
    --vocab 256 --world 2 --threads 1 --val-batches 2 --zero "$stage" --json >"$WORK/zero$stage.json" 2>&1
  if same_losses "$WORK/zero$stage-cpu" "$WORK/zero$stage-cuda" &&
    python3 - "$WORK/zero$stage.json" "$WORK/zero$stage-cuda/memory.json" <<'PY'
import json, sys
plan, run = (json.load(open(p))["workers"] for p in sys.argv[1:3])
bad = [(r, k, p[k], m[k]) for r, (p, m) in enumerate(zip(plan, run)) for k in ("grads", "optimizer")
       if p[k] != m[k]]
for b in bad: print("rank %d %s: planned %d, on the device %d" % b)
print("device grads and optimizer bytes per rank:",
      " ".join("%d/%d" % (m["grads"], m["optimizer"]) for m in run))
sys.exit(1 if bad or len(plan) != len(run) else 0)
PY
  then pass "2 ranks, --zero $stage on cuda: the cpu's losses, replicas identical, the planned device bytes"
  else fail "2 ranks, --zero $stage on cuda: losses differ from the cpu's, or device bytes from the plan"; fi
done
# The ResNet (cuDNN convolutions, batch norm, SGD with momentum on the device) on Fashion-MNIST:
# one process, and 2 ranks under backward masking with neuron units.
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST/train-images-idx3-ubyte" ]; then
  R=(--model resnet --data "$FMNIST" --depth 8 --channels 4 --batch 8 --optimizer sgd --lr 0.05
     --steps 6 --log-every 1 --val-every 3 --val-batches 2 --threads 1 --seed 7)
  for ranks in 1 2; do
    SDP=(); [ "$ranks" = 2 ] && SDP=(--sdp-mask backward --sdp-unit neuron --sdp-owners 1 --check-replicas 1)
    for dev in cpu cuda; do
      bin=$SDP_BIN; [ "$dev" = cuda ] && bin=$SDP_CUDA_BIN
      timeout 180 "${MPIEXEC:-mpiexec}" --oversubscribe -n "$ranks" "$bin" train "${R[@]}" "${SDP[@]}" \
        --device "$dev" --out "$WORK/resnet$ranks-$dev" --overwrite >"$WORK/resnet$ranks-$dev.log" 2>&1 \
        || { fail "resnet, $ranks rank(s), --device $dev: training failed"; tail -5 "$WORK/resnet$ranks-$dev.log"; }
    done
    [ -f "$WORK/resnet$ranks-cuda/metrics.jsonl" ] || continue
    if same_losses "$WORK/resnet$ranks-cpu" "$WORK/resnet$ranks-cuda"
    then pass "resnet, $ranks rank(s): cuda losses equal cpu losses"
    else fail "resnet, $ranks rank(s): cuda losses differ from cpu losses"; fi
  done
else
  echo "skip: Fashion-MNIST not found in $FMNIST (set SDP_FASHION_MNIST to a copy of it)"
fi
# Activation recomputation on the device: the same kernels in the same order, so the losses of
# --recompute layer must equal those of the plain CUDA run above (to 1e-6 relative, in case a
# kernel's reduction order is not fixed), with fewer activation bytes and dropout drawn again.
for rc in none layer; do
  timeout 120 "$SDP_CUDA_BIN" train "${ARGS[@]}" --dropout 0.1 --device cuda --recompute "$rc" \
    --out "$WORK/recompute-$rc" --overwrite >"$WORK/recompute-$rc.log" 2>&1 \
    || { fail "--device cuda --recompute $rc: training failed"; tail -5 "$WORK/recompute-$rc.log"; }
done
if python3 - "$WORK/recompute-none" "$WORK/recompute-layer" <<'PY'
import json, sys
a, b = sys.argv[1:3]
la = [json.loads(l)["loss"] for l in open(a + "/metrics.jsonl") if '"loss"' in l]
lb = [json.loads(l)["loss"] for l in open(b + "/metrics.jsonl") if '"loss"' in l]
ok = len(la) == len(lb) and la and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(la, lb))
acts = [json.load(open(d + "/memory.json"))["workers"][0]["activations"] for d in (a, b)]
print("losses %s, activations %d -> %d bytes" % ("equal" if ok else "differ", acts[0], acts[1]))
sys.exit(0 if ok and acts[1] < acts[0] else 1)
PY
then pass "cuda --recompute layer: the same losses with fewer activation bytes"
else fail "cuda --recompute layer: losses differ or activations did not shrink"; fi
grep -q '"device_peak_in_use"' "$WORK/cuda/memory.json" && pass "memory.json has the device peak" \
  || fail "memory.json lacks device_peak_in_use"
[ -f "$WORK/cuda/model.safetensors" ] && pass "a cuda run writes its checkpoint" \
  || fail "no checkpoint after a cuda run"
finish
