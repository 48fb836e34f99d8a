#!/usr/bin/env bash
# Predicted step times at the paper's scales (docs/scale.md, "Step time at scale"): GPT-2 124M and
# the 1B LLaMA on 8 to 1024 H100-class GPUs over NVLink, NDR InfiniBand and 100 GbE, for DDP as
# sdp runs it, SDP (forward and backward masking, block units, C = 0.5 and 0.25), and two
# analytical baselines: DDP with its all-reduce overlapped with the backward, and FSDP/ZeRO-3.
# Every sdp figure is one `sdp plan --json` call with the step-time model's options; nothing is
# trained. Prints Markdown.
#
#   bash scripts/scale_table.sh [BUILD_DIR]     (default build; a few seconds)
#
# Block units throughout, as docs/scale.md's table (d) scales.
set -euo pipefail
cd "$(dirname "$0")/.."
SDP=${1:-build}/sdp
[ -x "$SDP" ] || { echo "scale_table: $SDP is missing: run scripts/build.sh first" >&2; exit 1; }
export SDP
exec /usr/bin/python3 - <<'PY'
import json, os, subprocess

SDP = os.environ["SDP"]

# Per GPU: H100 SXM, bf16. 989 TFLOP/s dense is the datasheet's peak; 40% of it is what the
# model assumes a worker sustains. 3.35 TB/s of HBM3 streams the optimizer.
GFLOPS = 0.40 * 989e3
MEM_GBS = 3350
GPU = ["--gflops", "%g" % GFLOPS, "--mem-gbs", "%g" % MEM_GBS, "--comm", "nccl",
       "--dtype", "bf16", "--optimizer", "adamw", "--sdp-unit", "block"]

# Per GPU and direction, Gbit/s, and the latency of one ring step, us (NCCL's own figures for
# the Simple protocol's ring: 3.4 over NVLink, 14 over the network; src/graph/tuning.cc).
LINKS = [
    ("NVLink 4 (450 GB/s per direction)", 3600, 3.4),
    ("NDR InfiniBand (400 Gbit/s)", 400, 14),
    ("100 GbE (100 Gbit/s)", 100, 14),
]
MODELS = [
    ("GPT-2 124M (12 layers, width 768, vocab 50257), batch 8 x 1024 per GPU", 12,
     ["--model", "gpt", "--layers", "12", "--width", "768", "--heads", "12", "--vocab", "50257",
      "--seq-len", "1024", "--batch", "8"]),
    ("LLaMA 1B (18 layers, width 2048, d_ff 5472, vocab 32000), batch 4 x 2048 per GPU", 18,
     ["--model", "llama", "--layers", "18", "--width", "2048", "--heads", "16", "--d-ff", "5472",
      "--vocab", "32000", "--seq-len", "2048", "--batch", "4"]),
]
WORLDS = [8, 64, 256, 1024]
SDP_MODES = [("forward", 0.5), ("forward", 0.25), ("backward", 0.5), ("backward", 0.25)]


def plan(model, n, gbps, lat_us, mask, coverage=None):
    args = [SDP, "plan", "--json", "--world", str(n), "--link-gbps", "%g" % gbps,
            "--link-latency-us", "%g" % lat_us, "--sdp-mask", mask] + GPU + model
    if coverage is not None:
        args += ["--sdp-coverage", "%g" % coverage]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def analytical(ddp, params, layers, n, gbps, lat_us):
    """DDP overlapped and FSDP/ZeRO-3 from DDP's compute and the parameter count (bf16)."""
    B, a, S = gbps * 1e9 / 8, lat_us * 1e-6, 2.0 * params
    fwd, bwd, opt = ddp["forward_s"], ddp["backward_s"], ddp["optimizer_s"]
    ring = 2 * (n - 1) / n * S / B + 2 * (n - 1) * a
    ddp_overlapped = fwd + max(bwd, ring) + opt
    # Per layer: all-gather the weights in the forward and again in the backward, reduce-scatter
    # the gradients: 3 (n-1)/n of the bytes through each GPU's link, 3 layers (n-1) ring steps.
    fsdp_comm = 3 * (n - 1) / n * S / B + 3 * layers * (n - 1) * a
    fsdp = max(fwd + bwd, fsdp_comm) + opt / n
    return ddp_overlapped, fsdp


def cell(step, ref):
    return "%.0f ms (%.2fx)" % (1e3 * step, step / ref)


for title, layers, model in MODELS:
    print("\n### Step time: %s\n" % title)
    ddp = plan(model, WORLDS[0], LINKS[0][1], LINKS[0][2], "none")["ddp"]
    print("Per GPU (DDP): forward %.1f ms, backward %.1f ms, optimizer %.1f ms." % (
        1e3 * ddp["forward_s"], 1e3 * ddp["backward_s"], 1e3 * ddp["optimizer_s"]))
    for link, gbps, lat in LINKS:
        print("\n%s, %g us per ring step; step time and its ratio to DDP (sdp):\n" % (link, lat))
        head = ["N", "DDP (sdp)", "DDP, overlapped*", "FSDP/ZeRO-3*"]
        head += ["%s C = %g" % (m, c) for m, c in SDP_MODES]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for n in WORLDS:
            d = plan(model, n, gbps, lat, "none")
            ddp = d["ddp"]
            ref = d["steptime"]["ddp_step_s"]
            over, fsdp = analytical(ddp, d["parameters"], layers, n, gbps, lat)
            row = [str(n), "%.0f ms" % (1e3 * ref), cell(over, ref), cell(fsdp, ref)]
            for mask, c in SDP_MODES:
                row.append(cell(plan(model, n, gbps, lat, mask, c)["steptime"]["step_s"], ref))
            print("| " + " | ".join(row) + " |")
print("\n\\* analytical, not `sdp plan` (docs/scale.md, \"Step time at scale\").")
PY
