#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, ASan and UBSan into build-fuzz, makes seed
# corpora from valid files (scripts/fuzz_corpus.sh), and runs every target for SDP_FUZZ_SECONDS
# (default 15), printing one line per target: executions, executions per second, crashes. Exits
# non-zero on any crash, naming the reproducer. It installs nothing: it needs clang and
# libclang-rt-14-dev (Debian), beside what scripts/setup.sh installs.
#
#   bash scripts/fuzz.sh                          # CI: a short run of every target
#   SDP_FUZZ_SECONDS=3600 bash scripts/fuzz.sh    # a long run
#   SDP_FUZZ_RUNS=10000000 SDP_FUZZ_SECONDS=86400 bash scripts/fuzz.sh  # 10M executions each
#   SDP_FUZZ_TARGETS="idx text" bash scripts/fuzz.sh
#   SDP_FUZZ_TIMEOUT=60 ...   # on a loaded machine, where a stalled process would count as a hang
#
# Readers fail with sdp_fatal on bad bytes, which the harness takes back (fuzz/harness.h),
# releasing what they held (fuzz/ledger.c); LeakSanitizer reports what an accepted input leaves.
# Each target runs in processes of at most a million inputs, its corpus kept between them.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${SDP_FUZZ_SECONDS:-15}
RUNS_GOAL=${SDP_FUZZ_RUNS:-0} # stop a target at this many executions (0: only the time limit)
TIMEOUT=${SDP_FUZZ_TIMEOUT:-5} # seconds one input may take before it counts as a hang
TARGETS=${SDP_FUZZ_TARGETS:-"safetensors shards text cifar idx config run_dir calibration"}
command -v clang >/dev/null || { echo "fuzz: clang not found: apt-get install clang libclang-rt-14-dev" >&2; exit 1; }
mkdir -p build-fuzz
LOG=build-fuzz/build.log
CC=clang cmake -S . -B build-fuzz -DSDP_FUZZ=ON -DSDP_CUDA=OFF >$LOG 2>&1 ||
  { tail -20 $LOG; echo "fuzz: configuring build-fuzz failed (log: $LOG)" >&2; exit 1; }
cmake --build build-fuzz -j"$(nproc)" --target fuzz_targets >>$LOG 2>&1 ||
  { grep -m5 error $LOG; echo "fuzz: building the targets failed (log: $LOG)" >&2; exit 1; }
bash scripts/fuzz_corpus.sh build-fuzz/seeds >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
failed=0
for t in $TARGETS; do
  corpus=build-fuzz/corpus/$t crashes=build-fuzz/crashes/$t
  mkdir -p "$corpus" "$crashes"
  chunk=1000000
  runs=0 end=$((SECONDS + SECONDS_EACH)) t0=$SECONDS status=ok
  while [ $SECONDS -lt $end ] && { [ "$RUNS_GOAL" = 0 ] || [ $runs -lt "$RUNS_GOAL" ]; }; do
    left=$((end - SECONDS))
    [ "$RUNS_GOAL" = 0 ] || [ $((RUNS_GOAL - runs)) -ge $chunk ] || chunk=$((RUNS_GOAL - runs))
    log=build-fuzz/$t.log
    if ! "build-fuzz/fuzz_$t" -runs=$chunk -max_total_time=$left -timeout=$TIMEOUT -rss_limit_mb=2048 \
         -malloc_limit_mb=1024 -max_len=100000 -print_final_stats=1 \
         -artifact_prefix="$crashes/" "$corpus" "build-fuzz/seeds/$t" >"$log" 2>&1; then
      status="CRASH: $(grep -m1 -E 'ERROR|runtime error|deadly' "$log" | head -c 160); reproducer: $(ls -t "$crashes" | head -1 | sed "s|^|$crashes/|")"
      failed=1
    fi
    n=$(grep -o 'number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
    runs=$((runs + ${n:-0}))
    [ "$status" = ok ] || break
  done
  secs=$((SECONDS - t0)); [ $secs -gt 0 ] || secs=1
  printf 'fuzz: %-12s %10d executions  %8d/s  %s\n' "$t" "$runs" $((runs / secs)) "$status"
done
exit $failed
