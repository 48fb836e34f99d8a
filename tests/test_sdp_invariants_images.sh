# The SDP invariants of docs/architecture.md on the image models (ResNet and ViT), on real MPI
# ranks and real Fashion-MNIST, as tests/test_sdp_invariants.sh checks them on the text models:
#  I1: identical replicas: every k < N run compares the owners' checksums of every unit after
#      every step (--check-replicas 1), and fails on the first difference;
#  I2: k = N under forward and backward masking is bitwise data parallelism, and (ViT, which has
#      no batch statistics) 2 workers with batch 4 train the model of 1 worker with batch 8.
source "$(dirname "$0")/lib.sh"
: "${SDP_mpi_st_diff:?ctest sets it}"
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 0
fi
small_images "$WORK/fmnist"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)

train_on() {
  local n=$1 dir=$2; shift 2
  if ! timeout 90 "${MPI[@]}" -n "$n" "$SDP_BIN" train --threads 1 "$@" --out "$dir" \
      >"$dir.log" 2>&1; then
    fail "run $dir on $n ranks failed"; tail -5 "$dir.log"; return 1
  fi
}

# Four blocks (neuron units: 4 heads and 32 MLP neurons, or 4-channel convs, split in two).
RESNET=(--model resnet --depth 14 --channels 4 --optimizer sgd --lr 0.05 --bn-recal-batches 2)
VIT=(--model vit --layers 4 --heads 4 --width 16 --d-ff 32 --patch 7 --optimizer adamw --lr 1e-2)
COMMON=(--data "$WORK/fmnist" --batch 4 --steps 4 --warmup 1 --log-every 2 --val-batches 1 --seed 5)

for model in resnet vit; do
  if [ "$model" = resnet ]; then M=("${RESNET[@]}" "${COMMON[@]}"); else M=("${VIT[@]}" "${COMMON[@]}"); fi
  train_on 2 "$WORK/${model}_ddp" "${M[@]}" --sdp-mask none || continue
  for mode in forward:block forward:neuron backward:block backward:neuron; do
    mask=${mode%:*} unit=${mode#*:}
    dir="$WORK/${model}_${mask}_${unit}"
    train_on 2 "$dir" "${M[@]}" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-owners 2 || continue
    if cmp -s "$WORK/${model}_ddp/model.safetensors" "$dir/model.safetensors" &&
       cmp -s "$WORK/${model}_ddp/optim.safetensors" "$dir/optim.safetensors"; then
      pass "$model: $mask masking with $unit units and k=N=2 is bitwise data parallelism"
    else
      fail "$model: $mask masking, $unit units, k=N=2 differs from --sdp-mask none"
    fi
    # k = 1 of 2: each worker owns half; the replicas of every unit must stay identical.
    dir="$WORK/${model}_${mask}_${unit}_k1"
    train_on 2 "$dir" "${M[@]}" --sdp-mask "$mask" --sdp-unit "$unit" --sdp-owners 1 \
      --check-replicas 1 &&
    if ! cmp -s "$WORK/${model}_ddp/model.safetensors" "$dir/model.safetensors"; then
      pass "$model: $mask $unit k=1 of 2: replicas identical every step, and a model other than DDP's"
    else
      fail "$model: $mask $unit k=1 of 2 gave data parallelism's model"
    fi
  done
done

# ViT: 2 workers x batch 4 = 1 worker x batch 8 (SGD, no clipping; measured differences are float
# rounding, far below a step's size of ~1e-2).
E=("${VIT[@]}" --steps 4 --warmup 0 --log-every 2 --val-batches 1 --seed 6 --clip 0
   --optimizer sgd --lr 1e-2)
train_on 2 "$WORK/vit_dp2" "${E[@]}" --batch 4 &&
train_on 1 "$WORK/vit_dp1" "${E[@]}" --batch 8 &&
if out=$("$SDP_mpi_st_diff" "$WORK/vit_dp2/model.safetensors" "$WORK/vit_dp1/model.safetensors" 1e-6 0); then
  pass "vit: 2 workers x batch 4 = 1 worker x batch 8 within 1e-6 ($out)"
else
  fail "vit: 2 workers x batch 4 differ from 1 worker x batch 8 beyond 1e-6: $out"
fi
finish
