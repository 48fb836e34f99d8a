#!/usr/bin/python3
"""The step-time model under --grad-accum against bench/bandwidth.sh's measurements.

For every mode of bandwidth.sh's results files that has an "-accum3" twin (the same mode at
--grad-accum 3), and every link rate measured, prints the step measured and predicted at one
micro-batch and at three (each cell's median over the files: one per sweep), and what the two
extra micro-batches added. The predictions come from
`sdp plan --link-gbps` at the achieved rate, with the network model that scripts/study_report.py
uses (docs/network.md's calibration). Nothing is trained or timed here.

    BUILD=build /usr/bin/python3 bench/accum_check.py RESULTS.tsv...

MODEL and BATCH: the model options and batch bandwidth.sh ran with (defaults: the study's GPT,
"--layers 4 --width 128 --heads 4 --seq-len 64" and 3).
"""
import csv
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from study_report import NETWORK_MODEL  # noqa: E402  the calibrated speeds, one place

# bandwidth.sh's mode names and their options (bench/bandwidth.sh, MODES).
MODE_FLAGS = {
    "ddp": ["--sdp-mask", "none"],
    "fwd-neuron-0.5": ["--sdp-mask", "forward", "--sdp-unit", "neuron", "--sdp-coverage", "0.5"],
    "ddp-zero2": ["--sdp-mask", "none", "--zero", "2"],
}


def predict(sdp, model, flags, mbit, accum):
    args = [sdp, "plan", "--json", "--world", "4", "--vocab", "256"] + model + flags + [
        "--grad-accum", str(accum), "--link-gbps", "%g" % (mbit / 1e3)] + NETWORK_MODEL
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return 1e3 * json.loads(out)["steptime"]["step_s"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sdp = os.path.join(ROOT, os.environ.get("BUILD", "build"), "sdp")
    if not os.access(sdp, os.X_OK):
        sys.exit("accum_check: %s not found: build first (bash scripts/build.sh)" % sdp)
    model = os.environ.get("MODEL", "--layers 4 --width 128 --heads 4 --seq-len 64").split()
    model += ["--batch", os.environ.get("BATCH", "3")]
    rows = []
    for path in sys.argv[1:]:
        with open(path) as f:
            rows += list(csv.DictReader(f, delimiter="\t"))
    cell = {}  # (rate, mode): (achieved Mbit/s, step ms), medians over the sweeps
    for key in dict.fromkeys((r["rate"], r["mode"]) for r in rows):
        got = [r for r in rows if (r["rate"], r["mode"]) == key]
        cell[key] = tuple(statistics.median(float(r[c]) for r in got)
                          for c in ("achieved_mbit", "step_ms"))
    print("%d sweep(s): %s" % (len(sys.argv) - 1, " ".join(sys.argv[1:])))
    print("| mode | link | step, 1 micro-batch: measured / predicted | step, 3 micro-batches: "
          "measured / predicted | added by 2 micro-batches: measured / predicted |")
    print("|---|---|---|---|---|")
    for (rate, mode), one in cell.items():
        three = cell.get((rate, mode + "-accum3"))
        if mode not in MODE_FLAGS or not three:
            continue
        (mbit, m1), m3 = one, three[1]
        p1, p3 = (predict(sdp, model, MODE_FLAGS[mode], mbit, a) for a in (1, 3))
        print("| %s | %s (%.0f Mbit/s) | %.1f / %.1f ms (%.2f) | %.1f / %.1f ms (%.2f) | "
              "%.1f / %.1f ms |" % (mode, rate, mbit, m1, p1, m1 / p1, m3, p3, m3 / p3,
                                   m3 - m1, p3 - p1))


if __name__ == "__main__":
    main()
