# Helpers for the shell tests that drive the real sdp binary. Sourced, not run.
set -uo pipefail
: "${SDP_BIN:?SDP_BIN must point at the sdp binary (ctest sets it)}"
TMP_ROOT="${SDP_TEST_TMP:-/tmp}"
mkdir -p "$TMP_ROOT"
WORK=$(mktemp -d "$TMP_ROOT/sdp-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); echo "ok: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }

# train N DIR ARGS...: sdp train on N ranks (0: one process, without mpiexec) into DIR, with the
# calling test's COMMON options first; its output goes to DIR.log.
train() {
  local n=$1 dir=$2; shift 2
  local run=("$SDP_BIN")
  [ "$n" -gt 0 ] && run=("$MPIEXEC" -n "$n" --oversubscribe "$SDP_BIN")
  timeout 300 "${run[@]}" train "${COMMON[@]}" "$@" --out "$dir" --overwrite >"$dir.log" 2>&1
}

# expect_error "description" "needle" command...: the command must exit non-zero within 60 s,
# print exactly one line to stderr that contains needle, and not crash (no signal exit).
expect_error() {
  local what=$1 needle=$2; shift 2
  local err="$WORK/stderr" rc
  timeout 60 "$@" >"$WORK/stdout" 2>"$err"; rc=$?
  local lines; lines=$(grep -c . "$err")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then fail "$what: exit status $rc"; cat "$err"; return; fi
  if ! grep -qF -- "$needle" "$err"; then fail "$what: message lacks '$needle'"; cat "$err"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$what: expected one line on stderr, got $lines"; cat "$err"; return; fi
  pass "$what ($(head -c 150 "$err"))"
}

# expect_job_error "description" "needle" N ARGS...: ARGS (a command: "$SDP_BIN" train ...) run
# under mpiexec on N ranks (N = 0: alone, without mpiexec) must exit non-zero within 60 s and
# print, in stdout and stderr together, exactly one sdp error line, "sdp: error: ..." with needle
# in it, and needle nowhere else: one line per job, by rank 0. Nothing may read like a crash: no
# ORTE_ERROR_LOG, no MPI_ABORT banner. mpirun's own notice of the non-zero exit status is allowed.
# Arguments naming "$WORK/never" (--out) must leave it uncreated.
expect_job_error() {
  local what=$1 needle=$2 n=$3 rc; shift 3
  local out="$WORK/job.out" t0=$SECONDS
  if [ "$n" -eq 0 ]; then
    timeout 60 "$@" >"$out" 2>&1; rc=$?
  else
    timeout 60 "${MPIEXEC:-mpiexec}" --oversubscribe -n "$n" "$@" >"$out" 2>&1; rc=$?
  fi
  local where="on $n ranks"; [ "$n" -eq 1 ] && where="on 1 rank"; [ "$n" -eq 0 ] && where="alone"
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then fail "$what ($where): exit status $rc"; cat "$out"; return; fi
  local errors mentions; errors=$(grep -c '^sdp: error' "$out"); mentions=$(grep -cF -- "$needle" "$out")
  if [ "$errors" -ne 1 ] || [ "$mentions" -ne 1 ] || ! grep -q '^sdp: error: ' "$out"; then
    fail "$what ($where): expected one 'sdp: error: ' line with '$needle', got $errors error lines and $mentions mentions:"
    cat "$out"; return
  fi
  if grep -qE 'ORTE_ERROR_LOG|MPI_ABORT' "$out"; then fail "$what ($where): reads like a crash:"; cat "$out"; return; fi
  if [ -e "$WORK/never" ]; then fail "$what ($where): created $WORK/never"; rm -rf "$WORK/never"; return; fi
  pass "$what ($where, $((SECONDS - t0)) s): $(grep -m1 '^sdp: error' "$out" | head -c 200)"
}

# A small real text: the start of tinyshakespeare when available, else generated prose.
make_text() {
  local out=$1 bytes=${2:-60000}
  if [ -f "${SDP_TEST_TEXT:-}" ]; then head -c "$bytes" "$SDP_TEST_TEXT" >"$out"
  else # exactly $bytes bytes, as the shared text gives: every line is longer than 30 bytes
    for i in $(seq 1 $((bytes / 30 + 1))); do echo "the quick brown fox $i jumps over dogs"; done >"$out"
    truncate -s "$bytes" "$out"
  fi
}

# FMNIST: Fashion-MNIST, where Debian's dataset-fashion-mnist puts it (or SDP_FASHION_MNIST, as
# scripts/gpu_check.sh sets it); image tests skip without it.
FMNIST=${SDP_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}

# small_images DIR [TRAIN] [TEST]: Fashion-MNIST's first TRAIN training images and labels (2048,
# or "all" for the whole split) and first TEST test images (512), as IDX files in DIR. For tests
# that compare runs with each other or with a plan: every run evaluates on the whole test split,
# and on all 10,000 images that evaluation, with loading the 60,000, was most of an image test.
small_images() {
  local dir=$1 train=${2:-2048} test=${3:-512}
  mkdir -p "$dir"
  [ "$train" = all ] && { ln -sf "$FMNIST"/train-*-ubyte.gz "$dir/"; train=0; }
  python3 - "$FMNIST" "$dir" "$train" "$test" <<'EOF'
import gzip, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind, size, header in (("images-idx3", 784, 16), ("labels-idx1", 1, 8)):
        if n == 0:
            continue
        name = "%s-%s-ubyte" % (split, kind)
        raw = gzip.open("%s/%s.gz" % (src, name)).read(header + n * size)  # not the whole split
        head = raw[:4] + struct.pack(">I", n) + raw[8:header]
        open("%s/%s" % (dst, name), "wb").write(head + raw[header : header + n * size])
EOF
}

# tiny_models TEXT: GPT, LLAMA, VIT and RESNET, arrays of the smallest models of each family that
# the bitwise comparisons train (on TEXT, and on IMAGES, which it sets: a small copy of
# Fashion-MNIST, where the real one is installed). The ResNet is 14 deep: block units need as many
# droppable blocks as 4 workers at k = 2 cover.
tiny_models() {
  IMAGES=$WORK/fmnist
  [ -f "$FMNIST/train-images-idx3-ubyte.gz" ] && small_images "$IMAGES"
  GPT=(--model gpt --data "$1" --layers 3 --heads 4 --width 32 --d-ff 64 --seq-len 16 --batch 2)
  LLAMA=(--model llama --data "$1" --layers 4 --heads 4 --width 32 --d-ff 64 --seq-len 16
         --batch 2)
  VIT=(--model vit --data "$IMAGES" --layers 4 --heads 4 --width 16 --d-ff 32 --patch 7 --batch 4)
  RESNET=(--model resnet --data "$IMAGES" --depth 14 --channels 4 --batch 4 --optimizer sgd
          --bn-recal-batches 2)
}

# checkpoint_whole WHAT DIR: DIR's last checkpoint loads and its CRCs verify (needs
# SDP_mpi_st_diff). A kill between a checkpoint's two files can leave the optimizer state of the
# model's step in optim.prev alone (see save_checkpoint): that is the file a load takes.
checkpoint_whole() {
  local what=$1 dir=$2 ok=1 optim=optim f
  [ -e "$dir/optim.safetensors" ] || optim=optim.prev
  for f in model $optim; do
    "$SDP_mpi_st_diff" "$dir/$f.safetensors" >"$WORK/check.log" 2>&1 ||
      { ok=0; fail "$what: $f.safetensors is damaged: $(cat "$WORK/check.log")"; }
  done
  [ $ok -eq 1 ] && pass "$what: model and optimizer files load and their CRCs verify"
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}

# ddp_row_is_worker0 LOG: a data-parallel run's summary (LOG) compares its workers with a DDP row
# counted apart (what data parallelism's largest worker holds): under --sdp-mask none that row
# must be worker 0's, column for column, peak RSS aside (the DDP row has none). The columns are
# fixed-width: a 12-character name, then 11 characters a column.
ddp_row_is_worker0() {
  local w d
  w=$(grep -m1 '^  0  ' "$1") && d=$(grep -m1 '^  DDP  ' "$1") || { echo "no summary table in $1"; return 1; }
  [ "${w:12:88}${w:111:11}" = "${d:12:88}${d:111:11}" ] && return 0
  echo "worker 0 and the DDP row differ:"; echo "$w"; echo "$d"; return 1
}
