# Block-streamed evaluation borrows the training activations between steps (eval_stream.c): its
# block models and streams are built in the memory the next step's forward pass writes again. So
# evaluating changes nothing that training reads: every run below trains with an evaluation after
# every step (and, for the ResNet, the batch-norm re-estimation pass before each) and with none
# until the end, and must write byte for byte the same model.safetensors, optim.safetensors and
# training losses. Covered: the ResNet (batch norm, padded convolution buffers) with block and
# neuron units, the GPT with dropout, the LLaMA with recomputation (activations too small to lend
# the whole pass: part of it is allocated), and the ViT. tests/test_sdp_memplan.sh checks that the
# bytes evaluation allocates of its own are the ones `sdp plan` predicts with the borrowing.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
COMMON=(--steps 4 --warmup 1 --log-every 1 --val-batches 2 --threads 1 --seed 5)
tiny_models "$WORK/text.txt"

# losses FILE: the training losses logged, one per step.
losses() {
  grep -o '"loss":[^,}]*' "$1"
}

# same NAME ARGS...: 4 workers with an evaluation after every step and with none; equal results.
same() {
  local name=$1; shift
  local a="$WORK/$name-every" b="$WORK/$name-never" f diff=""
  train 4 "$a" "$@" --val-every 1 || { fail "$name: --val-every 1 failed"; tail -3 "$a.log"; return; }
  train 4 "$b" "$@" --val-every 0 || { fail "$name: --val-every 0 failed"; tail -3 "$b.log"; return; }
  for f in model.safetensors optim.safetensors; do cmp -s "$a/$f" "$b/$f" || diff="$diff $f"; done
  cmp -s <(losses "$a/metrics.jsonl") <(losses "$b/metrics.jsonl") || diff="$diff losses"
  [ "$(losses "$a/metrics.jsonl" | wc -l)" -eq 4 ] || diff="$diff (not 4 losses logged)"
  [ "$(grep -c '"val_loss"' "$a/metrics.jsonl")" -ge 4 ] || diff="$diff (not evaluated each step)"
  if [ -n "$diff" ]; then fail "$name: evaluating after each step changed training:$diff"; return; fi
  pass "$name: evaluating after each step leaves training bitwise the same"
}

same gpt-forward-neuron-dropout "${GPT[@]}" --sdp-mask forward --sdp-unit neuron --dropout 0.1
same llama-forward-block-recompute "${LLAMA[@]}" --sdp-mask forward --sdp-unit block \
  --recompute layer
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  same resnet-forward-block "${RESNET[@]}" --sdp-mask forward --sdp-unit block
  same resnet-forward-neuron "${RESNET[@]}" --sdp-mask forward --sdp-unit neuron
  same vit-forward-block "${VIT[@]}" --sdp-mask forward --sdp-unit block
else
  echo "skip: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi
finish
