# sdp under Slurm: a single-node cluster started from Debian's packages (munge, slurmctld, slurmd,
# with a slurm.conf written here), `srun --mpi=pmix -n 4 sdp train`, and `sbatch` of a script
# that calls mpirun. Both must write bitwise the checkpoint of the same run under mpirun alone.
# Everything the test starts (munged, slurmctld, slurmd, jobs) is stopped when it ends, on failure
# too, and its files live under its work directory. Skipped (exit 77) without root or without the
# packages (apt-get install slurmd slurmctld slurm-client munge).
source "$(dirname "$0")/lib.sh"
MPI=${MPIEXEC:-mpiexec}
for tool in munged slurmctld slurmd srun sbatch sinfo; do
  command -v "$tool" >/dev/null || { echo "skip: $tool is not installed (apt-get install slurmd slurmctld slurm-client munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skip: the test cluster's daemons run as root"; exit 77; }

D=$WORK/slurm
mkdir -p "$D/state" "$D/spool"
stop_cluster() {
  scancel --quiet --full --user=root 2>/dev/null
  for pid in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munged.pid"; do
    [ -s "$pid" ] && kill "$(cat "$pid")" 2>/dev/null
  done
  sleep 0.5
  for pid in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munged.pid"; do
    [ -s "$pid" ] && kill -9 "$(cat "$pid")" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap stop_cluster EXIT
trap 'exit 1' INT TERM # through the EXIT trap

# munge, with a key of this test's own.
head -c 1024 /dev/urandom >"$D/munge.key"
chmod 400 "$D/munge.key"
munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munge.seed" ||
  { fail "munged did not start: $(tail -2 "$D/munged.log")"; finish; exit; }

# A cluster of this one node, on ports of its own.
host=$(hostname)
base=$((17000 + $$ % 1000 * 2))
cat >"$D/slurm.conf" <<CONF
ClusterName=sdptest$$
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=sdp Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$D/slurm.conf
slurmctld -f "$SLURM_CONF" || { fail "slurmctld did not start: $(tail -2 "$D/slurmctld.log")"; finish; exit; }
slurmd -f "$SLURM_CONF" || { fail "slurmd did not start: $(tail -2 "$D/slurmd.log")"; finish; exit; }
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && break; sleep 0.5; done
if sinfo -h -o %T | grep -qE '^idle'; then pass "a one-node Slurm cluster is up ($(sinfo -h -o '%P %D %T'))"
else fail "the node never became idle: $(sinfo -h 2>&1 | head -1); $(tail -2 "$D/slurmd.log")"; finish; exit; fi

make_text "$WORK/text.txt" 60000
T=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 32 --batch 4 --steps 3
   --val-every 0 --threads 1 --sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5)
timeout 120 "$MPI" -n 4 --oversubscribe "$SDP_BIN" "${T[@]}" --out "$WORK/mpirun" >"$WORK/mpirun.log" 2>&1 ||
  fail "the run under mpirun failed: $(tail -1 "$WORK/mpirun.log")"

same_as_mpirun() { # what, run directory
  if cmp -s "$WORK/mpirun/model.safetensors" "$2/model.safetensors" &&
     cmp -s "$WORK/mpirun/optim.safetensors" "$2/optim.safetensors"; then
    pass "$1: the checkpoint is bitwise the one under mpirun"
  else
    fail "$1: the checkpoint differs from the one under mpirun"
  fi
}

# srun starts the 4 ranks itself, wiring them up through PMIx.
if timeout 180 srun --mpi=pmix -n 4 --overcommit "$SDP_BIN" "${T[@]}" --out "$WORK/srun" \
     >"$WORK/srun.log" 2>&1; then
  same_as_mpirun "srun --mpi=pmix -n 4" "$WORK/srun"
else
  fail "srun --mpi=pmix -n 4 failed: $(grep -m2 -iE 'error|fatal' "$WORK/srun.log")"
fi

# A rank stopped with SIGSTOP under srun: alive, so Slurm sees nothing wrong, and every other rank
# waits in a collective. The ranks' watchdogs (--stall-timeout) end the step within seconds.
cat >"$WORK/rank.sh" <<'SH'
#!/bin/bash
echo $$ >"$PID_DIR/rank.$SLURM_PROCID"
exec "$@"
SH
chmod +x "$WORK/rank.sh"
export PID_DIR="$WORK/pids"; mkdir -p "$PID_DIR"
L=(train --data "$WORK/text.txt" --layers 2 --heads 4 --width 32 --seq-len 16 --batch 2
   --steps 1000000 --val-every 0 --log-every 100 --threads 1 --ckpt-every 4 --sdp-mask backward
   --sdp-coverage 0.5 --stall-timeout 3)
timeout 120 srun --mpi=pmix -n 4 --overcommit "$WORK/rank.sh" "$SDP_BIN" "${L[@]}" --out "$WORK/stall" \
  >"$WORK/stall.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  [ "$(ls "$PID_DIR" | wc -l)" -eq 4 ] && [ -s "$WORK/stall/optim.safetensors" ] && break; sleep 0.1
done
if [ "$(ls "$PID_DIR" | wc -l)" -eq 4 ] && kill -STOP "$(cat "$PID_DIR/rank.2")"; then
  t0=$(date +%s%N) n=0
  while kill -0 $job 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
  ms=$((($(date +%s%N) - t0) / 1000000))
  if kill -0 $job 2>/dev/null; then
    fail "srun with a stopped rank: still running 30 s later"; kill $job
  elif grep -q "made no progress" "$WORK/stall.log"; then
    pass "srun with a stopped rank: the step ended after $ms ms ($(grep -m1 -o 'rank [0-9]* made no progress for [0-9]* s' "$WORK/stall.log"))"
  else
    fail "srun with a stopped rank: ended without the watchdog's message: $(tail -2 "$WORK/stall.log")"
  fi
  wait $job 2>/dev/null
  sleep 1
  left=0
  for f in "$PID_DIR"/rank.*; do
    p=$(cat "$f"); if kill -0 "$p" 2>/dev/null; then left=$((left + 1)); kill -KILL "$p"; fi
  done
  [ $left -eq 0 ] && pass "srun with a stopped rank: no rank left running" ||
    fail "srun with a stopped rank: $left ranks left running"
  checkpoint_whole "srun with a stopped rank" "$WORK/stall"
else
  fail "srun with a stopped rank: the run never wrote its first checkpoint: $(tail -2 "$WORK/stall.log")"
  kill $job 2>/dev/null
fi

# sbatch of a script that runs mpirun inside the allocation.
cat >"$WORK/job.sh" <<JOB
#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec $MPI -n 4 --oversubscribe $SDP_BIN ${T[*]} --out $WORK/sbatch
JOB
job=$(sbatch --parsable -n 4 --overcommit -o "$WORK/sbatch.log" "$WORK/job.sh" 2>&1)
for _ in $(seq 240); do
  state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z]*' | cut -d= -f2)
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.5
done
if [ "$state" = COMPLETED ]; then same_as_mpirun "sbatch with mpirun inside" "$WORK/sbatch"
else fail "the sbatch job ended $state: $(tail -2 "$WORK/sbatch.log" 2>&1)"; fi

# Nothing the test started outlives it.
trap - EXIT
stop_cluster
left=$(pgrep -f "$D" | wc -l)
[ "$left" -eq 0 ] && pass "munged, slurmctld and slurmd stopped" || fail "$left processes left running"
finish
