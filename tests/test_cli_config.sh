# A run directory's config.json is checked as the command line is: each value's type and range,
# with one line naming the file, on the commands that read it (eval, train --resume) and on every
# rank, leaving the directory as it was. Sizes that would overflow the model's arithmetic are
# refused before anything is built. Its "resolved" record is checked alike; one that the options
# no longer give stops --resume; a run without one (written before it existed) is still read.
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
run="$WORK/run"
timeout 60 "$SDP_BIN" train --data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 \
  --batch 2 --steps 2 --val-every 0 --threads 1 --out "$run" >"$WORK/train.log" 2>&1 ||
  fail "the tiny run failed: $(tail -1 "$WORK/train.log")"
digest() { (cd "$1" && find . -type f ! -name .lock -exec md5sum {} + | sort); }

# damaged NAME PYTHON_EDIT: a copy of the run whose config.json the python statement edits (c is
# the parsed object; a string replaces the whole file); prints the copy's path.
damaged() {
  local dir="$WORK/$1"
  rm -rf "$dir"; cp -r "$run" "$dir"
  python3 - "$dir/config.json" "$2" <<'PY'
import json, sys
path, edit = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(edit)
open(path, "w").write(json.dumps(c) if isinstance(c, dict) else c)
PY
  echo "$dir"
}

check() { # NAME EDIT NEEDLE
  local dir; dir=$(damaged "$1" "$2")
  local before; before=$(digest "$dir")
  expect_error "eval, $1" "$3" "$SDP_BIN" eval --run "$dir"
  expect_error "train --resume, $1" "$3" "$SDP_BIN" train --resume "$dir" --steps 4
  [ "$(digest "$dir")" = "$before" ] && pass "$1: the run directory is unchanged" ||
    fail "$1: the run directory changed"
}
check string_for_number 'c["layers"] = "two"' 'config.json: "layers" should be a number'
check zero_layers 'c["layers"] = 0' 'config.json: "layers" is out of range'
check huge_width 'c["width"] = 1e12' 'config.json: "width" is out of range'
check fraction 'c["batch"] = 2.5' 'config.json: "batch" is out of range'
check negative_lr 'c["lr"] = -1' 'config.json: "lr" is out of range'
check flag_string 'c["flip"] = "yes"' 'config.json: "flip" should be true or false'
check not_object 'c = "[1, 2]"' 'config.json is not a valid JSON object'
check trailing_bytes 'c = json.dumps(c) + " {}"' 'config.json is not a valid JSON object'
check overflow 'c["width"] = 2000000000; c["heads"] = 1' \
  'config.json: "width" is 2000000000, which is more than sdp describes (at most 65536)'
check params 'c["layers"] = 60000; c["width"] = 60000; c["heads"] = 1' \
  'config.json: "width" is 60000, which with 60000 "layers" makes a model of'

# ---- values of the right type and range that set-up would still refuse -------------------------
# Each names the file and the key, never an option the user did not give ("lower --batch").
FIX='the file is damaged or was edited; restore it or start a new run'
check batch_huge 'c["batch"] = 2147483647' \
  "config.json: \"batch\" is 2147483647, which with sequences of 16 (\"seq-len\") is too large for the model's activations"
check batch_data 'c["batch"] = 100000' \
  'and 1 worker(s) x "batch" 100000 need 100000, with "batch" and "seq-len" from '
check model_unknown 'c["model"] = "transformer-xl"' \
  'config.json: "model" is "transformer-xl", which is not a model sdp knows (gpt, llama, resnet, vit): '"$FIX"
check width_absurd 'c["width"] = 1000000' 'config.json: "width" is 1000000, which is more than sdp describes'
check seq_len_huge 'c["seq-len"] = 100000000' 'config.json: "seq-len" is 100000000, which is more than sdp describes'
check heads_divide 'c["heads"] = 3' 'config.json: "heads" is 3, which does not divide "width" (16)'
check llama_heads 'c["model"] = "llama"; c["width"] = 18' \
  'config.json: "heads" is 2, which with "width" 18 gives heads of 9, and llama'"'"'s RoPE needs an even head size'
check vocab_one 'c["vocab"] = 1' 'config.json: "vocab" is 1, which is below 2'
check vocab_small 'c["vocab"] = 100' 'config.json: "vocab" is 100, which is'
check vocab_huge 'c["vocab"] = 100000000' 'config.json: "vocab" is 100000000, which is more than sdp describes'
check mask_unknown 'c["sdp-mask"] = "sideways"' \
  'config.json: "sdp-mask" is "sideways", which is not none, forward or backward: '"$FIX"
check unit_unknown 'c["sdp-unit"] = "layer"' 'config.json: "sdp-unit" is "layer", which is not neuron or block'
check assign_unknown 'c["sdp-assign"] = "greedy"' 'config.json: "sdp-assign" is "greedy", which is not cyclic or random'
check scale_unknown 'c["branch-scale"] = "half"' 'config.json: "branch-scale" is "half", which is not auto, none or inverse'
check coverage 'c["sdp-mask"] = "forward"; c["sdp-coverage"] = 3' \
  'config.json: "sdp-coverage" is 3, which is not a fraction of the workers in (0, 1]'
check optimizer_unknown 'c["optimizer"] = "lion"' 'config.json: "optimizer" is "lion", which is not adamw or sgd'
check gemm_unknown 'c["gemm"] = "mkl"' 'config.json: "gemm" is "mkl", which is not dnnl or openblas'
check device_unknown 'c["device"] = "tpu"' 'config.json: "device" is "tpu", which is not cpu, cuda'
check precision_cpu 'c["precision"] = "bf16"' 'config.json: "precision" is "bf16", which needs "device" "cuda"'
check beta1 'c["beta1"] = 1.5' 'config.json: "beta1" is 1.5, which is not below 1'
check lr_min 'c["lr-min"] = 0.5' 'config.json: "lr-min" is 0.5, which exceeds "lr" (0.001)'
check warmup 'c["warmup"] = 50' 'config.json: "warmup" is 50, which exceeds "steps" (2)'
check val_frac 'c["val-frac"] = 3' 'config.json: "val-frac" is 3, which is not below 1'
check sim_rank 'c["sim-rank"] = 2' 'config.json: "sim-rank" is 2, which needs "sim-world", which is 0'
# A key every run has recorded, gone: refused, where its default would train (or evaluate)
# another run and write that default back. One added later (dropout) may be missing from an
# older run's file: its default is what that run did.
check missing_lr 'del c["lr"]' 'config.json lacks "lr", which every run'"'"'s config.json records'
check missing_width 'del c["width"]' 'config.json lacks "width"'
check missing_model 'del c["model"]' 'config.json lacks "model"'
older=$(damaged older 'del c["dropout"]; del c["recompute"]; del c["zero"]')
if "$SDP_BIN" eval --run "$older" --threads 1 >"$WORK/older.out" 2>&1 &&
  timeout 60 "$SDP_BIN" train --resume "$older" --steps 3 >"$WORK/older.log" 2>&1; then
  pass "a run without keys added since the first (dropout, recompute, zero): eval and --resume"
else fail "a run without keys added since the first"; tail -2 "$WORK/older.out" "$WORK/older.log"; fi

# ---- the "resolved" record: what the options resolved to (k, chunks, branch scale) -------------
if python3 - "$run/config.json" "$run/plan.json" <<'PY'
import json, sys
r, p = json.load(open(sys.argv[1]))["resolved"], json.load(open(sys.argv[2]))
assert all(r[k] == p[k] for k in ("world", "owners", "coverage", "chunks", "branch_scale")), (r, p)
assert r["units_per_worker_min"] == r["units_per_worker_max"] >= 1, r
PY
then pass "config.json records the resolved plan values, as plan.json has them"
else fail "config.json lacks a \"resolved\" record matching plan.json"; fi
check resolved_not_object 'c["resolved"] = 3' 'config.json: "resolved" should be an object'
check resolved_owners_type 'c["resolved"]["owners"] = "1"' \
  'config.json: "resolved".owners should be an integer in [1, 1]'
check resolved_k_above_n 'c["resolved"]["owners"] = 2; c["resolved"]["coverage"] = 2.0' \
  'config.json: "resolved".owners should be an integer in [1, 1]'
check resolved_no_world 'del c["resolved"]["world"]' 'config.json: "resolved".world should be'
check resolved_coverage 'c["resolved"]["coverage"] = 0.5' \
  'config.json: "resolved".coverage should be owners / world'
check resolved_scale 'c["resolved"]["branch_scale"] = "half"' \
  'config.json: "resolved".branch_scale should be "none" or "inverse"'
check resolved_units 'c["resolved"]["units_per_worker_max"] = -1' \
  'config.json: "resolved".units_per_worker_max should be'
# A well-formed record that the run's options no longer give (a run written under another rule)
# stops --resume before anything is written.
other_rule() { # NAME EDIT NEEDLE
  local dir; dir=$(damaged "$1" "$2")
  local before; before=$(digest "$dir")
  expect_error "train --resume, $1" "$3" "$SDP_BIN" train --resume "$dir" --steps 4
  [ "$(digest "$dir")" = "$before" ] && pass "$1: the run directory is unchanged" ||
    fail "$1: the run directory changed"
}
other_rule other_rule_scale 'c["resolved"]["branch_scale"] = "inverse"' \
  'config.json: "resolved".branch_scale is inverse, but the run'"'"'s options give none for N = 1'
other_rule other_rule_chunks 'c["resolved"]["chunks"] = 3' \
  'config.json: "resolved".chunks is 3, but the run'"'"'s options give 1 for N = 1'
# An edited option is named as a possible cause, not only another version of sdp.
other_rule edited_chunks 'c["sdp-chunks"] = 2' \
  'its options were edited, or another version of sdp wrote it'
# A layer count edited up or down is refused from the checkpoint's header, before a model is
# built for it (thousands of layers would take seconds and gigabytes), and never evaluated on
# the layers that the file and the edit have in common.
check many_layers 'c["layers"] = 4096' "model.safetensors has no tensor 'transformer.h.1.ln_1.weight'"
run2="$WORK/run2"
timeout 60 "$SDP_BIN" train --data "$WORK/text.txt" --layers 2 --heads 2 --width 16 --seq-len 16 \
  --batch 2 --steps 2 --val-every 0 --threads 1 --out "$run2" >"$WORK/train2.log" 2>&1 ||
  fail "the 2-layer run failed: $(tail -1 "$WORK/train2.log")"
run="$run2" check fewer_layers 'c["layers"] = 1' \
  'model.safetensors holds 28 tensors where the model has 16: it was written for a different model'
# A run written before the record existed is still read: derived as before.
legacy=$(damaged legacy 'del c["resolved"]')
if "$SDP_BIN" eval --run "$legacy" --threads 1 >"$WORK/legacy.out" 2>&1 &&
   timeout 60 "$SDP_BIN" train --resume "$legacy" --steps 3 >"$WORK/legacy.log" 2>&1 &&
   "$SDP_BIN" report "$legacy" | grep -qE '^\| legacy \| DDP \| - \| 1 \| 1 \| 3 \|'; then
  pass "a run without a \"resolved\" record: eval, --resume and report read it"
else fail "a run without a \"resolved\" record"; tail -2 "$WORK/legacy.out" "$WORK/legacy.log"; fi

# An image run evaluated on a dataset of another shape (its config.json pointed at CIFAR-10).
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  img="$WORK/img"
  timeout 60 "$SDP_BIN" train --model resnet --depth 8 --channels 4 --batch 4 --steps 1 \
    --val-every 0 --optimizer sgd --threads 1 --out "$img" >"$WORK/img.log" 2>&1 ||
    fail "the tiny image run failed: $(tail -1 "$WORK/img.log")"
  cifar="$WORK/cifar"; mkdir -p "$cifar"
  python3 -c "
import sys
rec = bytes([1]) + bytes(range(256)) * 12
for n in ['data_batch_%d.bin' % i for i in range(1, 6)] + ['test_batch.bin']:
    open(sys.argv[1] + '/' + n, 'wb').write(rec * 8)" "$cifar"
  dir="$WORK/img_cifar"; rm -rf "$dir"; cp -r "$img" "$dir"
  python3 - "$dir/config.json" "$cifar" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["dataset"] = "cifar10"; c["data"] = sys.argv[2]
open(sys.argv[1], "w").write(json.dumps(c))
PY
  expect_error "eval of a Fashion-MNIST model on CIFAR-10 images" "trained on 1x28x28 images" \
    "$SDP_BIN" eval --run "$dir"
  run="$img" # check() edits copies of the image run from here on
  check resnet_depth 'c["depth"] = 19' 'config.json: "depth" is 19, which is not a CIFAR ResNet depth'
  check resnet_channels 'c["channels"] = 100000' \
    'config.json: "channels" is 100000, which makes the last stage wider than 65536 channels'
  check dataset_unknown 'c["dataset"] = "imagenet"' \
    'config.json: "dataset" is "imagenet", which is not fashion-mnist, mnist, cifar10 or cifar100'
  check image_batch 'c["batch"] = 100000000' \
    'config.json: "batch" is 100000000, which is more than the 60000 training images of "dataset" fashion-mnist'
  check vit_patch 'c["model"] = "vit"; c["patch"] = 5; c["width"] = 16; c["heads"] = 2' \
    'config.json: "patch" is 5, which does not divide the 28x28 images of "dataset" fashion-mnist'
  # The checkpoint's image shape, read before the model is built for it.
  dir="$WORK/img_shape"; rm -rf "$dir"; cp -r "$img" "$dir"
  python3 "$(dirname "$0")/st_edit.py" "$dir/model.safetensors" meta "sdp.image_shape=1 100000 10"
  expect_error "eval of a checkpoint with an absurd image shape" \
    "model.safetensors': metadata 'sdp.image_shape' is '1 100000 10', which is not the shape of a dataset" \
    "$SDP_BIN" eval --run "$dir"
  run="$WORK/run"
fi

# Every rank stops at once (OpenMPI adds its own lines about the abort).
dir=$(damaged ranks 'c["layers"] = -3')
t0=$(date +%s%N)
timeout 60 "$MPIEXEC" -n 4 --oversubscribe "$SDP_BIN" train --resume "$dir" --steps 4 \
  >"$WORK/ranks.out" 2>"$WORK/ranks.err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $ms -lt 10000 ] &&
   grep -q 'config.json: "layers" is out of range' "$WORK/ranks.err"; then
  pass "4 ranks, train --resume: status $rc in $ms ms, naming the file"
else fail "4 ranks, train --resume: status $rc in $ms ms"; head -3 "$WORK/ranks.err"; fi
finish
