# The folders of src/ keep their layers, and no include or call cycles among its files
# (tests/src_cycles.py): each file depends on the others in one direction, and each folder only on
# those below it, so that it can be read, tested and replaced without its callers.
source "$(dirname "$0")/lib.sh"
: "${SDP_BUILD_DIR:?ctest sets it}"
command -v python3 >/dev/null && command -v nm >/dev/null ||
  { echo "skip: needs python3 and nm (binutils)"; exit 77; }
if out=$(python3 "$(dirname "$0")/src_cycles.py" "$(dirname "$0")/.." "$SDP_BUILD_DIR" 2>&1); then
  pass "$(tail -1 <<<"$out")"
else
  fail "layers broken or cycles among the files of src/"; echo "$out"
fi
finish
