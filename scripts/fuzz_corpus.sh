#!/usr/bin/env bash
# Seed corpora for the fuzz targets (fuzz/), made from valid files: a tiny real run's checkpoint
# and config.json (when build/sdp exists), an llm.c shard, text, CIFAR records and IDX files cut
# from Fashion-MNIST's test split.
#
#   bash scripts/fuzz_corpus.sh [OUT_DIR]     (default build-fuzz/seeds)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build-fuzz/seeds}
TEXT=${SDP_TEST_TEXT:-../shared/data/tinyshakespeare.txt}
FMNIST=/usr/share/datasets/fashion-mnist
mkdir -p "$OUT"/{safetensors,shards,text,cifar,idx,config,run_dir,calibration}

# Text: the start of a real text, and a short one.
if [ -f "$TEXT" ]; then head -c 2000 "$TEXT" >"$OUT/text/real.txt"; fi
printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..20} >"$OUT/text/fox.txt"

# A tiny run: its checkpoint files and config.json.
if [ -x build/sdp ] && [ -f "$TEXT" ]; then
  work=$(mktemp -d /tmp/sdp-fuzz-seed.XXXXXX)
  head -c 20000 "$TEXT" >"$work/text.txt"
  build/sdp train --data "$work/text.txt" --layers 1 --heads 2 --width 8 --seq-len 8 --batch 2 \
    --steps 2 --val-every 0 --threads 1 --out "$work/run" >/dev/null 2>&1 || true
  for f in model optim; do
    [ -f "$work/run/$f.safetensors" ] && cp "$work/run/$f.safetensors" "$OUT/safetensors/$f"
  done
  [ -f "$work/run/config.json" ] && cp "$work/run/config.json" "$OUT/config/config.json"
  # sdp report's view of the run: config.json, metrics.jsonl, memory.json, NUL between them.
  if [ -f "$work/run/memory.json" ]; then
    { cat "$work/run/config.json"; printf '\0'; cat "$work/run/metrics.jsonl"; printf '\0'
      cat "$work/run/memory.json"; } >"$OUT/run_dir/run"
  fi
  rm -rf "$work"
fi
echo '{"model": "gpt", "layers": 2, "width": 32, "sdp-mask": "forward"}' >"$OUT/config/small.json"
# A calibration file as sdp plan writes it, with the entry the target looks up and one other.
cat >"$OUT/calibration/two_machines.json" <<'EOF'
{"format": "sdp-calibration", "version": 1, "machines": [
  {"host": "node1", "threads": 2, "gemm": "dnnl", "sgemm_size": 2048, "sgemm_gflops": 210.5,
   "measured": "2026-11-26T10:31:02Z"},
  {"host": "node2", "threads": 1, "gemm": "dnnl", "sgemm_size": 2048, "sgemm_gflops": 105,
   "measured": "2026-11-26T10:35:40Z"}]}
EOF
{ cat "$OUT/config/small.json"; printf '\0{"step": 1, "loss": 5.5, "flops": 1e9}\n'
  printf '{"step": 1, "val_loss": 5.4}\n'; } >"$OUT/run_dir/small"

python3 - "$OUT" "$FMNIST" <<'PY'
import gzip, json, os, struct, sys
out, fmnist = sys.argv[1], sys.argv[2]
# An llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens.
toks = [i % 50257 for i in range(0, 4000, 7)]
hdr = struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253))
open(os.path.join(out, "shards", "shard.bin"), "wb").write(hdr + struct.pack("<%dH" % len(toks), *toks))
# CIFAR records: a label byte (two for CIFAR-100) and 3072 pixel bytes.
rec = bytes([3]) + bytes(range(256)) * 12
open(os.path.join(out, "cifar", "two_records.bin"), "wb").write(rec * 2)
open(os.path.join(out, "cifar", "coarse_fine.bin"), "wb").write((bytes([1]) + rec) * 2)
# A safetensors file written by hand, for when no run could be made.
head = json.dumps({"__metadata__": {"sdp.step": "1"},
                   "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
head += b" " * (-len(head) % 8)
open(os.path.join(out, "safetensors", "hand"), "wb").write(struct.pack("<Q", len(head)) + head + bytes(16))
# IDX: the first images of Fashion-MNIST's test split, in the target's framing (control byte,
# images length, images file, labels file), gzipped and plain.
def idx_pair(n):
    imgs = gzip.open(os.path.join(fmnist, "t10k-images-idx3-ubyte.gz")).read(16 + 784 * n)
    labs = gzip.open(os.path.join(fmnist, "t10k-labels-idx1-ubyte.gz")).read(8 + n)
    imgs = imgs[:4] + struct.pack(">I", n) + imgs[8:]
    labs = labs[:4] + struct.pack(">I", n) + labs[8:]
    return imgs, labs
if os.path.exists(os.path.join(fmnist, "t10k-images-idx3-ubyte.gz")):
    imgs, labs = idx_pair(2)
    for ctl, a, b in ((0, imgs, labs), (3, gzip.compress(imgs), gzip.compress(labs))):
        open(os.path.join(out, "idx", "pair%d" % ctl), "wb").write(
            bytes([ctl]) + struct.pack("<H", len(a)) + a + b)
PY
for d in "$OUT"/*; do echo "fuzz_corpus: $(basename "$d"): $(ls "$d" | wc -l) seeds"; done
