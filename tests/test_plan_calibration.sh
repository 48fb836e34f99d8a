# sdp plan's step-time model is repeatable: the machine's speeds it measures (the sgemm peak) are
# measured once, kept in a calibration file, and named in the output, so the same command prints
# the same figures every time; a damaged file is one error line that names it and the fix.
source "$(dirname "$0")/lib.sh"
P=(plan --world 4 --layers 2 --heads 4 --width 32 --sdp-mask backward --sdp-unit block
   --threads 1 --link-gbps 1)
CAL="$WORK/cache/cal.json"

# ---- the same command prints the same figures ------------------------------------------------
"$SDP_BIN" "${P[@]}" --calibration "$CAL" >"$WORK/1.txt" 2>"$WORK/1.err"
"$SDP_BIN" "${P[@]}" --calibration "$CAL" >"$WORK/2.txt" 2>"$WORK/2.err"
if [ -s "$WORK/1.txt" ] && cmp -s "$WORK/1.txt" "$WORK/2.txt"; then
  pass "two identical sdp plan --link-gbps calls print the same bytes"
else
  fail "two identical sdp plan --link-gbps calls differ"; diff "$WORK/1.txt" "$WORK/2.txt"; cat "$WORK/1.err"
fi
if grep -qE "machine speeds from $CAL, measured [0-9]{4}-[0-9]{2}-[0-9]{2} on " "$WORK/1.txt" &&
   grep -qF -- "--recalibrate to measure again" "$WORK/1.txt"; then
  pass "the output names the calibration file and its date ($(grep 'machine speeds' "$WORK/1.txt"))"
else
  fail "the output does not name the calibration file"; cat "$WORK/1.txt"
fi
python3 - "$CAL" <<'PY' && pass "the calibration file holds this host's sgemm peak at 1 thread" || fail "calibration file: $(cat "$CAL")"
import json, socket, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "sdp-calibration" and d["version"] == 1, d
[m] = d["machines"]
assert m["host"] == socket.gethostname() and m["threads"] == 1 and m["sgemm_gflops"] > 0, m
PY
ls "$WORK/cache" | grep -q tmp && fail "a temporary file was left beside the calibration file"

# ---- the rate comes from the file, which is read and left as it was --------------------------
write_cal() { # write_cal FILE GFLOPS: this host at 1 and 2 threads
  python3 - "$1" "$2" <<'PY'
import json, socket, sys
e = lambda t, g: {"host": socket.gethostname(), "threads": t, "gemm": "dnnl", "sgemm_size": 2048,
                  "sgemm_gflops": g, "measured": "2026-01-02T03:04:05Z"}
json.dump({"format": "sdp-calibration", "version": 1,
           "machines": [e(2, 99.0), e(1, float(sys.argv[2]))]}, open(sys.argv[1], "w"))
PY
}
write_cal "$WORK/given.json" 12.5
before=$(md5sum <"$WORK/given.json")
out=$("$SDP_BIN" "${P[@]}" --calibration "$WORK/given.json" 2>&1)
if grep -q "12.5 GFLOP/s per worker" <<<"$out" && grep -q "measured 2026-01-02 on" <<<"$out" &&
   [ "$before" = "$(md5sum <"$WORK/given.json")" ]; then
  pass "the rate and date come from the file's entry for this host and thread count"
else
  fail "the calibration file's rate was not used"; echo "$out"
fi
# SDP_CALIBRATION, then $XDG_CACHE_HOME/sdp/calibration.json, place it when no option does.
out=$(SDP_CALIBRATION="$WORK/given.json" "$SDP_BIN" "${P[@]}" 2>&1)
grep -q "12.5 GFLOP/s per worker" <<<"$out" && pass "SDP_CALIBRATION names the file" ||
  { fail "SDP_CALIBRATION is not read"; echo "$out"; }
mkdir -p "$WORK/xdg/sdp" && write_cal "$WORK/xdg/sdp/calibration.json" 7.25
out=$(env -u SDP_CALIBRATION XDG_CACHE_HOME="$WORK/xdg" "$SDP_BIN" "${P[@]}" 2>&1)
grep -q "7.25 GFLOP/s per worker" <<<"$out" && grep -qF "$WORK/xdg/sdp/calibration.json" <<<"$out" &&
  pass "the default file is \$XDG_CACHE_HOME/sdp/calibration.json" ||
  { fail "\$XDG_CACHE_HOME/sdp/calibration.json is not the default"; echo "$out"; }
out=$(env -u SDP_CALIBRATION -u XDG_CACHE_HOME HOME="$WORK/home" "$SDP_BIN" "${P[@]}" 2>&1)
[ -f "$WORK/home/.cache/sdp/calibration.json" ] && grep -qF "$WORK/home/.cache/sdp/calibration.json" <<<"$out" &&
  pass "without XDG_CACHE_HOME the file is ~/.cache/sdp/calibration.json" ||
  { fail "~/.cache/sdp/calibration.json was not written"; echo "$out"; }
# --gflops gives the rate: no file is read or written.
out=$("$SDP_BIN" "${P[@]}" --gflops 10 --calibration "$WORK/none.json" 2>&1)
[ ! -e "$WORK/none.json" ] && grep -q "machine speeds from the options (--gflops 10)" <<<"$out" &&
  pass "--gflops needs no calibration file" || { fail "--gflops still calibrates"; echo "$out"; }

# ---- a damaged file: one line naming it and the fix; --recalibrate replaces it ---------------
bad() { # bad NAME NEEDLE PYTHON: the given file edited by PYTHON (d: its JSON) is refused
  local f="$WORK/$1.json"; write_cal "$f" 12.5
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); $3; json.dump(d, open(sys.argv[1], 'w'))" "$f"
  expect_error "calibration file with $1" "$f: $2" "$SDP_BIN" "${P[@]}" --calibration "$f"
  grep -q -- "--recalibrate" "$WORK/stderr" || fail "$1: the message does not say --recalibrate"
}
bad negative-rate '"machines"[1]: "sgemm_gflops"' 'd["machines"][1]["sgemm_gflops"] = -3'
bad string-rate '"machines"[1]: "sgemm_gflops"' 'd["machines"][1]["sgemm_gflops"] = "fast"'
bad no-threads '"machines"[0]: "threads"' 'del d["machines"][0]["threads"]'
bad other-format '"format"' 'd["format"] = "other"'
bad version '"version"' 'd["version"] = 2'
bad machines '"machines" is not a list' 'd["machines"] = 3'
printf 'not json{' >"$WORK/garbage.json"
expect_error "calibration file that is not JSON" "$WORK/garbage.json: not a JSON object" \
  "$SDP_BIN" "${P[@]}" --calibration "$WORK/garbage.json"
if "$SDP_BIN" "${P[@]}" --calibration "$WORK/garbage.json" --recalibrate >"$WORK/re.txt" 2>&1 &&
   "$SDP_BIN" "${P[@]}" --calibration "$WORK/garbage.json" >"$WORK/re2.txt" 2>&1 &&
   cmp -s "$WORK/re.txt" "$WORK/re2.txt"; then
  pass "--recalibrate replaces a damaged calibration file"
else
  fail "--recalibrate on a damaged file"; cat "$WORK/re.txt" "$WORK/re2.txt"
fi
# --recalibrate measures again and keeps the file's other entries.
"$SDP_BIN" "${P[@]}" --calibration "$WORK/given.json" --recalibrate >/dev/null 2>&1
python3 - "$WORK/given.json" <<'PY' && pass "--recalibrate replaces this entry and keeps the others" || fail "--recalibrate: $(cat "$WORK/given.json")"
import json, sys
m = json.load(open(sys.argv[1]))["machines"]
assert [(e["threads"], e["measured"] == "2026-01-02T03:04:05Z") for e in m] == [(2, True), (1, False)], m
PY
finish
