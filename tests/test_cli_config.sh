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
check overflow 'c["width"] = 2000000000; c["heads"] = 1' 'model too large to describe'
check params 'c["layers"] = 60000; c["width"] = 60000; c["heads"] = 1' 'too large for sdp'

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
