# ZeRO stage 1 (`--zero 1`): each owner keeps the optimizer state of its shard of every bucket,
# gradients are reduce-scattered instead of all-reduced and the updated shards all-gathered.
# Stage 2 (`--zero 2`) also keeps only the shards' gradients: each layer's are reduce-scattered
# piece by piece as its backward ends, in one of two slots. Each stage must train what --zero 0
# trains and hold less:
# - DDP and every SDP mode (forward and backward masking, block and neuron units, C = 0.5) on 4
#   ranks: every logged loss and gradient norm of --zero 1 within a relative 1e-4 of --zero 0's
#   (BOUND below), with --check-replicas 1 (owners hold the same parameters after every step),
#   and each rank's optimizer bytes (memory.json) between 1/N and 1/k of --zero 0's; under stage
#   2 its gradient bytes too fall below --zero 0's (a 6-layer model: two slots are a third of it);
# - one worker: --zero 1 is bitwise --zero 0 (every bucket has one member, the shard is all of
#   it), and the banner says so;
# - checkpoints keep their format: a run checkpointed under --zero 1 resumes under --zero 0 and
#   the reverse, giving the uninterrupted run's losses, and both resume on 2 ranks alike;
# - stage 2 with several micro-batches a step (--grad-accum): the same losses as --zero 0 with
#   them;
# - an unknown stage and --sim-world are refused with one line (both stages run on a device:
#   tests/test_device_emulated.sh).
# Why a bound and not bitwise: a reduce-scatter may add the k owners' gradients of an element in
# another order than the all-reduce does (MPI picks each collective's algorithm), a float32
# rounding of about 1e-7 per step, and the norm adds the squares shard by shard instead of bucket by
# bucket; 20 steps of AdamW keep the losses far inside 1e-4. (With Open MPI on these sizes the
# runs are in fact bitwise equal; the test reports it when they are.)
source "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt" 40000
BOUND=1e-4
GPT=(--model gpt --data "$WORK/text.txt" --layers 4 --heads 4 --width 32 --d-ff 64 --seq-len 16
     --batch 2)
COMMON=(--steps 20 --warmup 2 --log-every 1 --val-every 10 --val-batches 2 --threads 1 --seed 7)

# resume N DIR ARGS...: the run in DIR resumed on N ranks.
resume() {
  local n=$1 dir=$2; shift 2
  timeout 300 "$MPIEXEC" -n "$n" --oversubscribe "$SDP_BIN" train --resume "$dir" "$@" \
    >"$dir.resume.log" 2>&1
}

# close A B: every step's loss, gradient norm and validation loss of metrics.jsonl A and B within
# BOUND (relative); prints the largest difference, and "bitwise" when there is none.
close() {
  python3 - "$1" "$2" "$BOUND" <<'PY'
import json, sys
def rows(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        for k in ("loss", "grad_norm", "val_loss"):
            if k in r: out[(r["step"], k)] = r[k]
    return out
a, b, bound = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3])
if set(a) != set(b) or not a:
    print("different steps logged"); sys.exit(1)
worst = max(abs(a[k] - b[k]) / abs(b[k]) for k in a)
print("bitwise" if worst == 0 else "largest relative difference %.2e" % worst)
sys.exit(0 if worst <= bound else 1)
PY
}

# pair STAGE NAME N K ARGS...: the run with --zero 0 and --zero STAGE on N ranks whose owner
# groups have K members: the same losses, replicas checked after every step, optimizer bytes cut
# to 1/K..1/N, and under stage 2 gradient bytes cut on every rank. The --zero 0 run is shared by
# both stages.
pair() {
  local stage=$1 name=$2 n=$3 k=$4; shift 4
  local a="$WORK/$name-z0" b="$WORK/$name-z$stage" how
  [ -f "$a/metrics.jsonl" ] || train "$n" "$a" "$@" --zero 0 ||
    { fail "$name: --zero 0 failed"; tail -3 "$a.log"; return; }
  train "$n" "$b" "$@" --zero "$stage" --check-replicas 1 ||
    { fail "$name: --zero $stage failed"; tail -3 "$b.log"; return; }
  how=$(close "$a/metrics.jsonl" "$b/metrics.jsonl") ||
    { fail "$name: --zero $stage's losses are not within $BOUND of --zero 0's: $how"; return; }
  local bytes
  bytes=$(python3 - "$a/memory.json" "$b/memory.json" "$n" "$k" "$stage" <<'PY'
import json, os, sys
a, b = (json.load(open(p))["workers"] for p in sys.argv[1:3])
n, k, stage = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print(" ".join("%d->%d" % (x["optimizer"], y["optimizer"]) for x, y in zip(a, b)),
      "; gradient bytes " + " ".join("%d->%d" % (x["grads"], y["grads"]) for x, y in zip(a, b))
      if stage == 2 else "")
# Each shard is within one element (8 bytes of AdamW state) of 1/k of its bucket (1/N of the
# shared one), and a worker has at most N + 1 buckets.
slack = 8 * (n + 1)
ok = len(a) == len(b) == n and all(
    x["optimizer"] / n - slack <= y["optimizer"] <= x["optimizer"] / k + slack for x, y in zip(a, b))
# GRADS=more: stage 2's two layer slots outweigh what it saves (few layers per worker), and the
# banner must say so.
more = os.environ.get("GRADS") == "more"
grads_ok = stage != 2 or all((y["grads"] > x["grads"]) if more else (y["grads"] < x["grads"])
                             for x, y in zip(a, b))
sys.exit(0 if ok and grads_ok else 1)
PY
  ) || { fail "$name: --zero $stage: optimizer bytes per rank not cut to between 1/$n and 1/$k, or gradient bytes not as expected (${GRADS:-less}): $bytes"; return; }
  if [ "${GRADS:-}" = more ] && ! grep -q -- "--zero 2 holds more gradient memory here than --zero 1" "$b.log"; then
    fail "$name: --zero 2 holds more gradient memory, and the banner does not say so"; return
  fi
  pass "$name --zero $stage: losses and norms $how, replicas checked every step, optimizer bytes per rank $bytes"
}

pair 1 ddp 4 4 "${GPT[@]}" --sdp-mask none
pair 1 forward-block 4 2 "${GPT[@]}" --sdp-mask forward --sdp-unit block --sdp-coverage 0.5
pair 1 forward-neuron 4 2 "${GPT[@]}" --sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5
pair 1 backward-block 4 2 "${GPT[@]}" --sdp-mask backward --sdp-unit block --sdp-coverage 0.5
pair 1 backward-neuron 4 2 "${GPT[@]}" --sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5 \
  --dropout 0.1 --grad-accum 2
pair 1 backward-neuron-sgd 3 2 "${GPT[@]}" --sdp-mask backward --sdp-unit neuron --sdp-owners 2 \
  --optimizer sgd --lr 0.05
# Stage 2 on 6 layers, so that its two gradient slots hold less than every layer.
GPT6=("${GPT[@]}" --layers 6)
pair 2 ddp6 4 4 "${GPT6[@]}" --sdp-mask none
# Block units: each worker has 3 of the 6 layers, and two slots of one are more than its shards
# save.
GRADS=more pair 2 forward-block6 4 2 "${GPT6[@]}" --sdp-mask forward --sdp-unit block --sdp-coverage 0.5
pair 2 forward-neuron6 4 2 "${GPT6[@]}" --sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5
GRADS=more pair 2 backward-block6 4 2 "${GPT6[@]}" --sdp-mask backward --sdp-unit block --sdp-coverage 0.5
pair 2 backward-neuron6 4 2 "${GPT6[@]}" --sdp-mask backward --sdp-unit neuron \
  --sdp-coverage 0.5 --dropout 0.1
pair 2 backward-neuron6-sgd 3 2 "${GPT6[@]}" --sdp-mask backward --sdp-unit neuron \
  --sdp-owners 2 --optimizer sgd --lr 0.05
# Several micro-batches a step: stage 2 has no room to accumulate a layer in, so every
# micro-batch reduce-scatters its layers and adds them to the shards, and the stem and head,
# held whole, accumulate until the last. A micro-batch's gradients lost or counted twice would
# move the losses far past BOUND.
pair 2 ddp6-accum3 4 4 "${GPT6[@]}" --sdp-mask none --grad-accum 3
pair 2 forward-neuron6-accum2 4 2 "${GPT6[@]}" --sdp-mask forward --sdp-unit neuron \
  --sdp-coverage 0.5 --grad-accum 2 --dropout 0.1
pair 2 backward-neuron6-sgd-accum2 3 2 "${GPT6[@]}" --sdp-mask backward --sdp-unit neuron \
  --sdp-owners 2 --optimizer sgd --lr 0.05 --grad-accum 2
if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  small_images "$WORK/fmnist"
  # The last stage's blocks hold most of a ResNet's weights: two slots of one outweigh the
  # shards' saving.
  GRADS=more pair 2 resnet-backward-neuron 4 2 --model resnet --data "$WORK/fmnist" --depth 14 --channels 4 --batch 4 \
    --optimizer sgd --lr 0.05 --sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5 \
    --bn-recal-batches 2 --val-batches 2
fi

# One worker: nothing to shard, bitwise the same run (under stage 2 each layer's gradient passes
# through a slot to its place in the shard, unchanged).
train 0 "$WORK/one-z0" "${GPT[@]}" --zero 0 || { fail "one worker: --zero 0 failed"; tail -3 "$WORK/one-z0.log"; }
for stage in 1 2; do
  if train 0 "$WORK/one-z$stage" "${GPT[@]}" --zero "$stage"; then
    if cmp -s "$WORK/one-z0/model.safetensors" "$WORK/one-z$stage/model.safetensors" &&
      cmp -s "$WORK/one-z0/optim.safetensors" "$WORK/one-z$stage/optim.safetensors" &&
      [ "$(close "$WORK/one-z0/metrics.jsonl" "$WORK/one-z$stage/metrics.jsonl")" = bitwise ] &&
      grep -q -- "--zero $stage changes nothing here" "$WORK/one-z$stage.log"; then
      pass "one worker: --zero $stage is bitwise --zero 0, and the banner says it shares nothing"
    else
      fail "one worker: --zero $stage differs from --zero 0, or the banner does not say it shares nothing"
    fi
  else
    fail "one worker: --zero $stage failed"; tail -3 "$WORK/one-z$stage.log"
  fi
done

# Checkpoints: written under one setting, resumed under another, the uninterrupted run's losses.
R=("${GPT[@]}" --sdp-mask backward --sdp-unit block --sdp-coverage 0.5)
for fromto in "0 1" "1 0" "0 2" "2 1"; do
  read -r from to <<<"$fromto"
  part="$WORK/part-$from-$to"
  if train 4 "$part" "${R[@]}" --zero "$from" --stop-after 10 && resume 4 "$part" --zero "$to"; then
    if how=$(close "$WORK/backward-block-z0/metrics.jsonl" "$part/metrics.jsonl") &&
      grep -q "\"zero\":[[:space:]]*$to" "$part/config.json"; then
      pass "checkpoint of --zero $from resumed under --zero $to: the uninterrupted run's losses, $how"
    else
      fail "checkpoint of --zero $from resumed under --zero $to: $how, or config.json lacks zero $to"
    fi
  else
    fail "checkpoint of --zero $from resumed under --zero $to failed"; tail -3 "$part.resume.log"
  fi
done

# ... and on another N: 4 ranks checkpoint at step 10 under each setting, 2 ranks resume under
# another; the resumed runs must agree.
for fromto in "0 1" "1 0" "2 0"; do
  read -r from to <<<"$fromto"
  part="$WORK/half-$from-$to"
  train 4 "$part" "${R[@]}" --zero "$from" --stop-after 10 && resume 2 "$part" --zero "$to" ||
    { fail "checkpoint of --zero $from on 4 ranks resumed on 2 under --zero $to failed"; tail -3 "$part.resume.log"; }
done
for other in half-1-0 half-2-0; do
  if how=$(close "$WORK/half-0-1/metrics.jsonl" "$WORK/$other/metrics.jsonl"); then
    pass "4 ranks to 2: --zero 0 to 1 and $other give the same losses, $how"
  else
    fail "4 ranks to 2: --zero 0 to 1 and $other differ: $how"
  fi
done

expect_job_error "unknown --zero" "unknown --zero 3: use 0, 1 or 2" 0 \
  "$SDP_BIN" train --data "$WORK/text.txt" --zero 3 --out "$WORK/never"
expect_job_error "--zero 1 simulated" "--sim-world run does not have: use --zero 0" 0 \
  "$SDP_BIN" train --data "$WORK/text.txt" --zero 1 --sim-world 4 --out "$WORK/never"
# sdp plan says where stage 2's slots outweigh its saving (block units, 3 of 6 layers a worker),
# and says nothing where they do not (data parallelism on the same model).
if "$SDP_BIN" plan --world 4 --vocab 256 --layers 6 --zero 2 --sdp-mask forward --sdp-unit block \
  --sdp-coverage 0.5 >"$WORK/p2b.txt" 2>&1 &&
  grep -q -- "--zero 2 holds more gradient memory than --zero 1 on 4 of 4 workers" "$WORK/p2b.txt" &&
  "$SDP_BIN" plan --world 4 --vocab 256 --layers 6 --zero 2 >"$WORK/p2d.txt" 2>&1 &&
  ! grep -q -- "holds more gradient memory" "$WORK/p2d.txt"; then
  pass "sdp plan --zero 2 warns where its slots outweigh the shards, and only there"
else
  fail "sdp plan --zero 2: the warning is missing, or shown where stage 2 saves memory"
  cat "$WORK/p2b.txt"
fi
# sdp plan --zero 1 counts the shards and keeps the bytes sent: under data parallelism each of 4
# workers keeps a quarter of the optimizer state (one bucket: within one element, 8 bytes).
if "$SDP_BIN" plan --world 4 --vocab 256 --json >"$WORK/p0.json" 2>&1 &&
  "$SDP_BIN" plan --world 4 --vocab 256 --json --zero 1 >"$WORK/p1.json" 2>&1 &&
  python3 - "$WORK/p0.json" "$WORK/p1.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["workers"] for p in sys.argv[1:3])
print("optimizer bytes per worker: %s -> %s" % ([x["optimizer"] for x in a], [y["optimizer"] for y in b]))
sys.exit(0 if all(abs(y["optimizer"] - x["optimizer"] / 4) <= 8 and
                  y["sent_per_step"] == x["sent_per_step"] for x, y in zip(a, b)) else 1)
PY
then pass "sdp plan --zero 1: a quarter of the optimizer state on each of 4 workers, the same bytes sent"
else fail "sdp plan --zero 1: optimizer bytes not a quarter, or bytes sent changed"; fi
finish
