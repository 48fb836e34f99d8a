#!/usr/bin/python3
"""How well sdp plan's step-time model prices a worker's compute, both ways it can.

For each model and mode, trains on 2 MPI ranks, one per core (--threads 1), and takes rank 0's
forward and backward per step as `sdp train` reports them (metrics.jsonl: the median over the
logged intervals after the first). Beside it, `sdp plan` prices the same worker:
  - by FLOPs at this machine's sgemm peak at 1 thread (the calibration file, measured once per
    call of this script into a temporary file);
  - by --measure-compute: the worker's forward and backward timed alone.
Prints predicted over measured for both, the median over the repeats. Run it on a quiet machine.

    BUILD=build /usr/bin/python3 bench/compute_check.py [repeats (3)]

TEXT: the training text (default ../shared/data/tinyshakespeare.txt).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, LOG_EVERY, TIMED_STEPS = 24, 4, 10

MODELS = {
    "4x128 (the study's GPT)": "--layers 4 --width 128 --heads 4 --seq-len 64 --batch 3",
    "6x384": "--layers 6 --width 384 --heads 6 --seq-len 256 --batch 4",
}
MODES = {
    "DDP": "--sdp-mask none",
    "forward, neuron, C = 0.5": "--sdp-mask forward --sdp-unit neuron --sdp-coverage 0.5",
    "forward, block, C = 0.5": "--sdp-mask forward --sdp-unit block --sdp-coverage 0.5",
    "backward, neuron, C = 0.5": "--sdp-mask backward --sdp-unit neuron --sdp-coverage 0.5",
}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def measured_ms(sdp, text, args, out):
    """Rank 0's forward + backward per step as sdp train reports it."""
    cmd = ["mpiexec", "-n", "2", sdp, "train", "--data", text, "--threads", "1", "--vocab",
           "256", "--steps", str(STEPS), "--log-every", str(LOG_EVERY), "--val-every", "0",
           "--val-batches", "1", "--out", out, "--overwrite"] + args
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **MPI_ENV})
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(x) for x in f if '"ms_forward"' in x]
    return statistics.median(x["ms_forward"] + x["ms_backward"] for x in lines[1:])


def planned_ms(sdp, args, cal, timed):
    """Rank 0's forward + backward as sdp plan prices it."""
    cmd = [sdp, "plan", "--json", "--world", "2", "--threads", "1", "--vocab", "256",
           "--link-gbps", "100", "--ranks-per-host", "2", "--calibration", cal] + args
    if timed:
        cmd += ["--measure-compute", str(TIMED_STEPS)]
    w = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return 1e3 * (w["workers"][0]["forward_s"] + w["workers"][0]["backward_s"])


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sdp = os.path.join(ROOT, os.environ.get("BUILD", "build"), "sdp")
    text = os.environ.get("TEXT", os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
    for path, what in ((sdp, "build first (bash scripts/build.sh)"), (text, "set TEXT")):
        if not os.path.exists(path):
            sys.exit("compute_check: %s not found: %s" % (path, what))
    with tempfile.TemporaryDirectory() as tmp:
        cal = os.path.join(tmp, "calibration.json")
        cells = {}
        for rep in range(repeats):
            for mname, margs in MODELS.items():
                for name, flags in MODES.items():
                    args = (margs + " " + flags).split()
                    print("repeat %d of %d: %s, %s" % (rep + 1, repeats, mname, name),
                          file=sys.stderr, flush=True)
                    m = measured_ms(sdp, text, args, os.path.join(tmp, "run"))
                    f = planned_ms(sdp, args, cal, False)
                    t = planned_ms(sdp, args, cal, True)
                    cells.setdefault((mname, name), []).append((m, f, t))
        with open(cal) as f:
            peak = json.load(f)["machines"][0]["sgemm_gflops"]
    print("%d repeat(s); sgemm peak at 1 thread %.1f GFLOP/s; rank 0 of 2, forward + backward "
          "per step, medians" % (repeats, peak))
    print("| model | mode | sdp train measured | by FLOPs at the peak (over measured) | "
          "--measure-compute (over measured) |")
    print("|---|---|---|---|---|")
    for (mname, name), got in cells.items():
        m, f, t = (statistics.median(x[i] for x in got) for i in range(3))
        print("| %s | %s | %.1f ms | %.1f ms (%.2f) | %.1f ms (%.2f) |" % (
            mname, name, m, f, f / m, t, t / m))


if __name__ == "__main__":
    main()
