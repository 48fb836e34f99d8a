# Hostile input (issue 15): every bad file ends sdp within seconds, with one line on stderr that
# names the file and the problem (control characters escaped), on every rank, and leaves the
# files it was given as they were. Checkpoints are edited with tests/st_edit.py, which recomputes
# their checksums, so what is tested is sdp's validation of what a checksum cannot vouch for.
source "$(dirname "$0")/lib.sh"
MPI=("${MPIEXEC:-mpiexec}" --oversubscribe)
EDIT=(python3 "$(dirname "$0")/st_edit.py")
make_text "$WORK/text.txt" 20000
T=(--data "$WORK/text.txt" --layers 1 --heads 2 --width 16 --seq-len 16 --batch 2 --warmup 0
   --val-batches 1 --threads 1)
"$SDP_BIN" train "${T[@]}" --steps 2 --out "$WORK/base" >"$WORK/base.log" 2>&1 ||
  { fail "the small training run failed"; cat "$WORK/base.log"; }

# Names, types and contents of everything under a directory (a FIFO is listed, never read).
snapshot() {
  (cd "$1" && find . -printf '%y %p %s\n' | sort && find . -type f -exec md5sum {} + | sort)
}

# rejected WHAT NEEDLE SECONDS DIR COMMAND...: the command fails (status 1-123: no signal, no
# time-out) within SECONDS, with exactly one line on stderr that holds NEEDLE and no control
# character, and DIR is as it was.
rejected() {
  local what=$1 needle=$2 limit=$3 dir=$4; shift 4
  local before start rc ms
  before=$(snapshot "$dir")
  start=$(date +%s%N)
  timeout $((limit * 5)) "$@" >"$WORK/stdout" 2>"$WORK/stderr"; rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$rc" -eq 0 ] || [ "$rc" -gt 123 ]; then fail "$what: exit status $rc"; cat "$WORK/stderr"; return; fi
  if [ "$ms" -gt $((limit * 1000)) ]; then fail "$what: took $ms ms"; return; fi
  if ! grep -qF -- "$needle" "$WORK/stderr"; then fail "$what: message lacks '$needle'"; cat -v "$WORK/stderr"; return; fi
  if [ "$(wc -l <"$WORK/stderr")" -ne 1 ]; then fail "$what: not one line on stderr"; cat -v "$WORK/stderr"; return; fi
  if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$WORK/stderr"; then fail "$what: raw control characters"; cat -v "$WORK/stderr"; return; fi
  if [ "$before" != "$(snapshot "$dir")" ]; then fail "$what: $dir changed"; return; fi
  pass "$what in $ms ms ($(head -c 160 "$WORK/stderr"))"
}

# rejected_everywhere WHAT NEEDLE SECONDS DIR ARGS...: the same on 2 MPI ranks, where OpenMPI adds
# its own lines about the abort: every rank ends, the job fails in time, and DIR is unchanged.
rejected_everywhere() {
  local what=$1 needle=$2 limit=$3 dir=$4; shift 4
  local before start rc ms
  before=$(snapshot "$dir")
  start=$(date +%s%N)
  timeout $((limit * 5)) "${MPI[@]}" -n 2 "$SDP_BIN" "$@" >"$WORK/stdout" 2>"$WORK/stderr"; rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then fail "$what: exit status $rc"; head -3 "$WORK/stderr"; return; fi
  if [ "$ms" -gt $((limit * 1000)) ]; then fail "$what: took $ms ms"; return; fi
  if ! grep -qF -- "$needle" "$WORK/stderr"; then fail "$what: message lacks '$needle'"; head -3 "$WORK/stderr"; return; fi
  if [ "$before" != "$(snapshot "$dir")" ]; then fail "$what: $dir changed"; return; fi
  pass "$what in $ms ms"
}

# fresh NAME EDIT...: a copy of the base run as $WORK/NAME with model.safetensors and
# optim.safetensors edited alike.
fresh() {
  local dir="$WORK/$1"; shift
  rm -rf "$dir" && cp -a "$WORK/base" "$dir"
  [ $# -eq 0 ] && return
  "${EDIT[@]}" "$dir/model.safetensors" "$dir/optim.safetensors" "$@"
}

# ---- 1. checkpoint metadata: presence, type and range; finite values -------------------------
for key in sdp.step sdp.opt_t sdp.loader_epoch sdp.loader_step sdp.tokens sdp.flops; do
  fresh r drop $key
  rejected "resume without $key" "no '$key' metadata" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
done
for bad in sdp.step=-3 sdp.step=abc sdp.step=2.5 sdp.step= sdp.opt_t=-1 sdp.opt_t=1e999 \
           sdp.loader_epoch=-1 sdp.loader_step=0x10 sdp.tokens=nan sdp.tokens=-64 sdp.flops=inf \
           'sdp.step= 2' 'sdp.step=2 '; do
  fresh r meta "$bad"
  rejected "resume with $bad" "'${bad%%=*}' is '${bad#*=}'" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
done
# sdp eval and sdp sample hold the same file to the same checks.
for bad in sdp.step=-1 sdp.tokens=nan sdp.world=0; do
  fresh r meta "$bad"
  rejected "eval with $bad" "'${bad%%=*}' is '${bad#*=}'" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
  rejected "sample with $bad" "'${bad%%=*}' is '${bad#*=}'" 2 "$WORK/r" "$SDP_BIN" sample --run "$WORK/r" --length 4
done
fresh r drop sdp.loader_step
rejected "eval without sdp.loader_step" "no 'sdp.loader_step' metadata" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta sdp.vocab=abc
rejected "eval with sdp.vocab=abc" "'sdp.vocab' is 'abc'" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta sdp.vocab=0
rejected "eval with sdp.vocab=0" "'sdp.vocab' is '0'" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta "sdp.image_shape=1 2"
rejected "eval with a two-number image shape" "'sdp.image_shape' is '1 2'" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta sdp.vocab=200
rejected "resume with a vocabulary the data does not give" "written for a vocabulary of 200" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
rejected "eval of text with a vocabulary below its 256 bytes" "the data holds a vocabulary of 256 tokens, more than the 200" 2 \
  "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta "sdp.image_shape=3 32 10"
rejected "resume of a text run with an image shape" "images of 3 32 10" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
fresh r drop sdp.vocab
rejected "eval without sdp.vocab" "no 'sdp.vocab' metadata" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"

# Data cut at the same path since the checkpoint (same vocabulary, fewer tokens) is refused, not
# silently trained on; a checkpoint from before sdp.data_examples still resumes.
cp "$WORK/text.txt" "$WORK/cut.txt"
"$SDP_BIN" train "${T[@]}" --data "$WORK/cut.txt" --steps 2 --out "$WORK/cut" >/dev/null 2>&1 ||
  fail "the run on cut.txt failed"
head -c 12000 "$WORK/text.txt" >"$WORK/cut.txt"
rejected "resume after the data was cut" "was written for data of 18000 training and 2000 validation tokens, but the data now gives 10800 and 1200" \
  2 "$WORK/cut" "$SDP_BIN" train --resume "$WORK/cut" --steps 4
# Every rank meets it alike, so a job ends with the one line, without an MPI_Abort banner.
cp -a "$WORK/cut" "$WORK/cut_mpi"
expect_job_error "resume on 2 ranks after the data was cut" "the data now gives 10800 and 1200" 2 \
  "$SDP_BIN" train --resume "$WORK/cut_mpi" --steps 4
"${EDIT[@]}" "$WORK/cut/model.safetensors" "$WORK/cut/optim.safetensors" drop sdp.data_examples
"$SDP_BIN" train --resume "$WORK/cut" --steps 3 >"$WORK/cut.log" 2>&1 &&
  pass "a checkpoint without sdp.data_examples resumes" ||
  { fail "a checkpoint without sdp.data_examples"; tail -2 "$WORK/cut.log"; }

# A checkpoint at or past --steps leaves nothing to train: one line that says so and how to go
# on, exit 0, and the run directory untouched.
fresh r
before=$(snapshot "$WORK/r")
for steps in 2 1; do
  if "$SDP_BIN" train --resume "$WORK/r" --steps $steps >"$WORK/stdout" 2>"$WORK/stderr" &&
     grep -q "nothing left to train" "$WORK/stdout" && grep -q -- "--steps" "$WORK/stdout" &&
     [ "$(cat "$WORK/stdout" "$WORK/stderr" | wc -l)" -eq 1 ] && [ "$before" = "$(snapshot "$WORK/r")" ]; then
    pass "resume at step 2 with --steps $steps: $(cat "$WORK/stdout")"
  else
    fail "resume at step 2 with --steps $steps"; cat "$WORK/stdout" "$WORK/stderr"
  fi
done
fresh r meta sdp.step=1000000000000
rejected "a step far past --steps is not clamped" "'sdp.step' is '1000000000000'" 2 "$WORK/r" \
  "$SDP_BIN" train --resume "$WORK/r" --steps 4 --val-every 0 --stop-after 1

fresh r
"${EDIT[@]}" "$WORK/r/model.safetensors" poke transformer.wte.weight 3 nan
rejected "eval of NaN weights" "tensor 'transformer.wte.weight' holds nan" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
rejected "resume from NaN weights" "tensor 'transformer.wte.weight' holds nan" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
fresh r
"${EDIT[@]}" "$WORK/r/optim.safetensors" poke transformer.h.0.ln_1.weight.exp_avg 0 -inf
rejected "resume from an infinite moment" "'transformer.h.0.ln_1.weight.exp_avg' holds -inf" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
fresh r
"${EDIT[@]}" "$WORK/r/optim.safetensors" poke transformer.h.0.ln_1.weight.exp_avg_sq 1 -0.5
rejected "resume from a negative second moment" "'transformer.h.0.ln_1.weight.exp_avg_sq' holds -0.5" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4

# ---- 2. the checksum covers the header -------------------------------------------------------
fresh r
"${EDIT[@]}" "$WORK/r/optim.safetensors" meta sdp.tokens=65 stale
rejected "resume from an edited header" "checksum mismatch" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
fresh r
"${EDIT[@]}" "$WORK/r/model.safetensors" meta sdp.vocab=255 stale
rejected "eval of an edited header" "checksum mismatch" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
# A checkpoint from before the header checksum: its sdp.crc32 covers only the tensors.
fresh r drop sdp.file_crc32 meta sdp.crc32=0
rejected "resume from a checkpoint without the header checksum" "predates the header checksum" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4

# ---- 3. a FIFO where a file belongs fails at once on every rank ------------------------------
mkdir -p "$WORK/pipes" && mkfifo "$WORK/pipes/data.txt" "$WORK/pipes/x_train.bin"
rejected "--data FIFO" "is not a regular file" 2 "$WORK/pipes" "$SDP_BIN" train "${T[@]}" --data "$WORK/pipes/data.txt" --steps 2 --out "$WORK/pipes/run"
rejected_everywhere "--data FIFO on 2 ranks" "is not a regular file" 4 "$WORK/pipes" train "${T[@]}" --data "$WORK/pipes/data.txt" --steps 2 --out "$WORK/pipes/run"
rejected "a shard glob matching a FIFO" "x_train.bin' is not a regular file" 2 "$WORK/pipes" "$SDP_BIN" train "${T[@]}" --data "$WORK/pipes/*_train.bin" --steps 2 --out "$WORK/pipes/run"
for f in model.safetensors optim.safetensors config.json metrics.jsonl; do
  fresh r && rm "$WORK/r/$f" && mkfifo "$WORK/r/$f"
  rejected "resume with $f a FIFO" "$f' is not a regular file" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
done
fresh r && rm "$WORK/r/model.safetensors" && mkfifo "$WORK/r/model.safetensors"
rejected "eval with model.safetensors a FIFO" "model.safetensors' is not a regular file" 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
rejected_everywhere "resume from a FIFO on 2 ranks" "is not a regular file" 4 "$WORK/r" train --resume "$WORK/r" --steps 4

# ---- 5. a file that must be a token shard, and is not ----------------------------------------
mkdir -p "$WORK/shards"
python3 - "$WORK/shards" <<'PY'
import struct, sys
d = sys.argv[1]
with open(f"{d}/a_train.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 5000, *([0] * 253)))
    f.write(struct.pack("<5000H", *[(i * 7) % 300 for i in range(5000)]))
with open(f"{d}/magic.bin", "wb") as f:
    f.write(struct.pack("<256i", 1234, 1, 5000, *([0] * 253)))
    f.write(struct.pack("<5000H", *[(i * 7) % 300 for i in range(5000)]))
PY
cp "$WORK/text.txt" "$WORK/shards/b_train.txt"
rejected "a .bin file with a wrong magic" "magic.bin' has magic number 1234, expected 20240520" 2 "$WORK/shards" "$SDP_BIN" train "${T[@]}" --data "$WORK/shards/magic.bin" --steps 2 --out "$WORK/shards/run"
rejected "a shard glob matching a text file" "b_train.txt' has magic number" 2 "$WORK/shards" "$SDP_BIN" train "${T[@]}" --data "$WORK/shards/*_train*" --steps 2 --out "$WORK/shards/run"
cp "$WORK/text.txt" "$WORK/shards/0_train.txt"
rejected "a glob whose first match is text" "0_train.txt' has magic number" 2 "$WORK/shards" "$SDP_BIN" train "${T[@]}" --data "$WORK/shards/*_train*" --steps 2 --out "$WORK/shards/run"

# ---- 6. text from a file cannot forge lines or drive the terminal ----------------------------
evil=$'evil\nsdp: error: forged line\e[2J\e[31m'
fresh r
"${EDIT[@]}" "$WORK/r/model.safetensors" rename transformer.wte.weight "$evil"
"${EDIT[@]}" "$WORK/r/model.safetensors" set "$evil" dtype '"Q4"'
rejected "a tensor name with a newline and escapes" 'evil\nsdp: error: forged line\x1b[2J\x1b[31m' 2 "$WORK/r" "$SDP_BIN" eval --run "$WORK/r"
fresh r meta $'sdp.step=2\e]0;owned\a'
rejected "a metadata value with escapes" "'sdp.step' is '2\\x1b]0;owned\\x07'" 2 "$WORK/r" "$SDP_BIN" train --resume "$WORK/r" --steps 4
# sdp report quotes config.json's strings in its tables and in the gnuplot scripts it runs, where
# a newline would end the quoted label and run the next line as a command.
rm -rf "$WORK/rA" "$WORK/rB" && cp -a "$WORK/base" "$WORK/rA" && cp -a "$WORK/base" "$WORK/rB"
python3 - "$WORK/rB/config.json" "$WORK/pwned" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["dataset"] = 'cifar10\nsystem "touch %s"\n#\x1b[31m' % sys.argv[2]
json.dump(c, open(sys.argv[1], "w"))
PY
# Without gnuplot (a machine that lacks scripts/setup.sh's packages) only the tables are checked.
PLOTS=(--plots "$WORK/plots")
command -v gnuplot >/dev/null || { PLOTS=(); echo "skip: gnuplot is not installed: tables only"; }
"$SDP_BIN" report --group "${PLOTS[@]}" "$WORK/rA" "$WORK/rB" >"$WORK/stdout" 2>"$WORK/stderr" ||
  { echo "sdp report failed:"; cat "$WORK/stderr"; }
if [ -e "$WORK/pwned" ] || { [ ${#PLOTS[@]} -gt 0 ] && grep -q '^system' "$WORK/plots"/*.gp; }; then
  fail "sdp report: a config.json string ran a command through gnuplot"
elif LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$WORK/stdout" || ! grep -qF 'cifar10\nsystem' "$WORK/stdout"; then
  fail "sdp report: control characters from config.json reach the terminal"; cat -v "$WORK/stdout"
else
  pass "sdp report: config.json strings are escaped in tables and gnuplot scripts"
fi
finish
