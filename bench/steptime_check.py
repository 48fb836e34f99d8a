#!/usr/bin/python3
"""The step-time model of `sdp plan` against the measurements of bench/bandwidth.sh.

For every mode and link rate of docs/network.md's measurements, runs `sdp plan` with the
model's options for the measured setting (2 hosts x 2 ranks, Open MPI over TCP, the achieved
link rate) and prints the predicted step, exposed sync and update beside the measured ones, and
the step's error. Nothing is trained or timed here.

    /usr/bin/python3 bench/steptime_check.py [BUILD_DIR] [DATE | RESULTS.tsv ...]

BUILD_DIR defaults to build. DATE picks a table of docs/network.md: 2026-11-24 (one sweep) or
2026-11-26 (each cell's median over three sweeps; the default). RESULTS.tsv files
(bench/bandwidth.sh's results.tsv, one per sweep) are used instead of a table: each cell's median
over the sweeps (step, exposed and update apart) and each link's median achieved rate.

Calibration: three numbers from one cell, DDP with no cap (on 2026-11-24: 1892 ms step, 846
exposed, 24 update). Its compute part (1892 - 846 - 24 = 1022 ms) sets the compute rate, its
exposed sync the transport rate of the non-blocking all-reduces (--host-gbps), its update the
memory bandwidth (--mem-gbs). A fourth from a second cell, backward masking by neuron, C = 0.5,
no cap (update 342 ms): the transport rate of the blocking publishing broadcasts
(--host-bcast-gbps). Those two cells are marked (cal) and left out of the error statistics;
every other figure is a prediction.
"""
import csv
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDP = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "sdp")
SWEEPS = sys.argv[2:]  # a date of MEASURED, or results files

MODEL = ["--world", "4", "--layers", "6", "--width", "384", "--heads", "6", "--seq-len", "256",
         "--batch", "4", "--vocab", "256", "--threads", "1"]
SETTING = ["--ranks-per-host", "2", "--link-latency-us", "50", "--comm", "mpi"]

RATE_KEYS = ["none", "10gbit", "1gbit", "100mbit"]  # bandwidth.sh's names of the links
RATE_LABELS = ["no cap", "10gbit", "1gbit", "100mbit"]
# The modes: bandwidth.sh's name, the name printed here, sdp's options.
MODES_RUN = [
    ("ddp", "DDP", ["--sdp-mask", "none"]),
    ("fwd-block-0.5", "forward, block, C = 0.5",
     ["--sdp-mask", "forward", "--sdp-unit", "block", "--sdp-coverage", "0.5"]),
    ("fwd-block-0.25", "forward, block, C = 0.25",
     ["--sdp-mask", "forward", "--sdp-unit", "block", "--sdp-coverage", "0.25"]),
    ("fwd-neuron-0.5", "forward, neuron, C = 0.5",
     ["--sdp-mask", "forward", "--sdp-unit", "neuron", "--sdp-coverage", "0.5"]),
    ("fwd-neuron-0.25", "forward, neuron, C = 0.25",
     ["--sdp-mask", "forward", "--sdp-unit", "neuron", "--sdp-coverage", "0.25"]),
    ("bwd-block-0.5", "backward, block, C = 0.5",
     ["--sdp-mask", "backward", "--sdp-unit", "block", "--sdp-coverage", "0.5"]),
    ("bwd-block-0.25", "backward, block, C = 0.25",
     ["--sdp-mask", "backward", "--sdp-unit", "block", "--sdp-coverage", "0.25"]),
    ("bwd-neuron-0.5", "backward, neuron, C = 0.5",
     ["--sdp-mask", "backward", "--sdp-unit", "neuron", "--sdp-coverage", "0.5"]),
    ("bwd-neuron-0.25", "backward, neuron, C = 0.25",
     ["--sdp-mask", "backward", "--sdp-unit", "neuron", "--sdp-coverage", "0.25"]),
]

# The measurements of docs/network.md: per link the achieved rate (Mbit/s), per mode and link
# (step, exposed, update) in ms, modes in the order of MODES_RUN.
MEASURED = {
    # One sweep (the "Results" table).
    "2026-11-24": ([7538, 7957, 958, 96], [
        [(1892, 846, 24), (1858, 754, 27), (2696, 1672, 22), (12529, 11430, 45)],
        [(632, 59, 9), (620, 92, 8), (750, 189, 8), (2808, 2315, 11)],
        [(442, 35, 3), (390, 44, 4), (463, 48, 3), (623, 202, 7)],
        [(746, 144, 45), (672, 80, 39), (832, 215, 34), (2795, 2140, 42)],
        [(368, 58, 2), (318, 45, 2), (350, 47, 2), (572, 288, 3)],
        [(1330, 129, 311), (1247, 65, 294), (1647, 207, 592), (7884, 1894, 4941)],
        [(1814, 36, 377), (1120, 12, 273), (1538, 31, 613), (6305, 12, 4898)],
        [(1424, 214, 342), (1384, 86, 316), (1903, 249, 667), (8217, 2306, 4936)],
        [(1268, 238, 296), (1158, 55, 234), (1542, 44, 599), (6549, 272, 4558)]]),
    # Each cell's median over three sweeps ("Repeated").
    "2026-11-26": ([9987, 9567, 963, 96], [
        [(2760, 454, 35), (2758, 436, 34), (3636, 1314, 29), (13241, 11055, 32)],
        [(1308, 93, 15), (1226, 113, 15), (1355, 224, 17), (3369, 2265, 14)],
        [(832, 51, 9), (844, 47, 9), (783, 32, 9), (1189, 207, 10)],
        [(1414, 106, 28), (1446, 101, 26), (1508, 216, 25), (3486, 2231, 27)],
        [(728, 39, 7), (744, 39, 8), (754, 52, 9), (926, 238, 8)],
        [(2542, 93, 306), (2307, 114, 261), (2704, 140, 615), (8366, 1642, 4921)],
        [(1984, 8, 222), (1912, 8, 225), (2456, 8, 599), (7390, 8, 4916)],
        [(2538, 81, 303), (2478, 90, 317), (2890, 250, 608), (9166, 2302, 4899)],
        [(1977, 55, 226), (2186, 63, 278), (2536, 50, 550), (7528, 244, 4562)]]),
}


def from_table(date):
    mbits, cells = MEASURED[date]
    return (list(zip(RATE_LABELS, mbits)),
            [(name, args, c) for (_, name, args), c in zip(MODES_RUN, cells)])


RATES, MODES = from_table(max(MEASURED))
TARGET = 0.25


# The configuration whose update calibrates the broadcasts' transport rate: (mode, rate) indices.
BCAST_CAL = (7, 0)


def plan(mode, mbit, gflops, host_gbps, mem_gbs, bcast_gbps=0):
    args = [SDP, "plan", "--json"] + MODEL + SETTING + mode + [
        "--link-gbps", "%g" % (mbit / 1e3), "--gflops", "%.17g" % gflops,
        "--host-gbps", "%.17g" % host_gbps, "--mem-gbs", "%.17g" % mem_gbs,
        "--host-bcast-gbps", "%.17g" % bcast_gbps]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def calibrate():
    """Compute rate, transport rate and memory bandwidth from DDP with no cap."""
    ddp, mbit = MODES[0][1], RATES[0][1]
    step, exposed, update = (x / 1e3 for x in MODES[0][2][0])
    w = plan(ddp, mbit, 1, 0, 1)["workers"][0]  # at 1 GFLOP/s, a free transport and 1 GB/s
    gflops = (w["forward_s"] + w["backward_s"]) / (step - exposed - update)
    # The exposed sync is E0 + K / host_gbps: E0 with a free transport, K from one more run.
    e0 = w["exposed_s"]
    k = plan(ddp, mbit, gflops, 1, 1)["workers"][0]["exposed_s"] - e0
    host = k / (exposed - e0)
    mem = w["optimizer_s"] / update
    # The update under backward masking is U0 + K / bcast_gbps (the optimizer, the link and the
    # latency in U0): two runs give U0 and K, the measured update the rate.
    name, mode, measured = MODES[BCAST_CAL[0]]
    mbit, update = RATES[BCAST_CAL[1]][1], measured[BCAST_CAL[1]][2] / 1e3
    u1, u2 = (plan(mode, mbit, gflops, host, mem, b)["workers"][0]["update_s"] for b in (1, 2))
    k = 2 * (u1 - u2)
    bcast = k / (update - (u1 - k))
    return gflops, host, mem, bcast


def read_sweeps(paths):
    """RATES and MODES from bandwidth.sh results files: the median of each cell over them."""
    rows = []
    for p in paths:
        with open(p) as f:
            rows += list(csv.DictReader(f, delimiter="\t"))
    med = lambda xs: statistics.median(float(x) for x in xs)
    rates = []
    for label, key in zip(RATE_LABELS, RATE_KEYS):
        got = [r["achieved_mbit"] for r in rows if r["rate"] == key]
        if not got:
            sys.exit("steptime_check: no run at link %s in %s" % (key, " ".join(paths)))
        rates.append((label, round(med(got))))
    modes = []
    for key, name, args in MODES_RUN:
        cells = []
        for rk in RATE_KEYS:
            got = [r for r in rows if r["rate"] == rk and r["mode"] == key]
            if not got:
                sys.exit("steptime_check: no run of %s at link %s" % (key, rk))
            cells.append(tuple(round(med(r[c] for r in got))
                               for c in ("step_ms", "sync_ms", "update_ms")))
        modes.append((name, args, cells))
    return rates, modes


def main():
    global RATES, MODES
    if not os.access(SDP, os.X_OK):
        sys.exit("steptime_check: %s not found: build first (bash scripts/build.sh)" % SDP)
    if len(SWEEPS) == 1 and SWEEPS[0] in MEASURED:
        RATES, MODES = from_table(SWEEPS[0])
    elif SWEEPS:
        RATES, MODES = read_sweeps(SWEEPS)
    print("measurements: %s" % (
        "the median of %d sweep(s): %s" % (len(SWEEPS), " ".join(SWEEPS))
        if SWEEPS and SWEEPS[0] not in MEASURED else
        "docs/network.md's, %s" % (SWEEPS[0] if SWEEPS else max(MEASURED))))
    gflops, host, mem, bcast = calibrate()
    print("calibrated on DDP, no cap: %.1f GFLOP/s per worker, transport %.3g Gbit/s, "
          "memory %.3g GB/s; on %s, %s: broadcast transport %.3g Gbit/s" % (
              gflops, host, mem, MODES[BCAST_CAL[0]][0], RATES[BCAST_CAL[1]][0], bcast))
    print("predicted / measured step in ms, error; exposed and update (rank 0) predicted / measured\n")
    print("| mode | " + " | ".join("%s (%d Mbit/s)" % r for r in RATES) + " |")
    print("|---|" + "---|" * len(RATES))
    errors = []
    for i, (name, mode, measured) in enumerate(MODES):
        cells = []
        for j, ((_, mbit), (m_step, m_exp, m_upd)) in enumerate(zip(RATES, measured)):
            p = plan(mode, mbit, gflops, host, mem, bcast)
            step = 1e3 * p["steptime"]["step_s"]
            w0 = p["workers"][0]
            err = step / m_step - 1
            cal = (i, j) in ((0, 0), BCAST_CAL)
            if not cal:
                errors.append((abs(err), name, mbit))
            flag = " (cal)" if cal else "" if abs(err) <= TARGET else " **"
            cells.append("%.0f / %d, %+.1f%%%s (%.0f/%d, %.0f/%d)" % (
                step, m_step, 100 * err, flag, 1e3 * w0["exposed_s"], m_exp,
                1e3 * w0["update_s"], m_upd))
        print("| %s | %s |" % (name, " | ".join(cells)))
    within = sum(e <= TARGET for e, _, _ in errors)
    print("\nstep error: mean %.1f%%, median %.1f%%, largest %.1f%% (%s at %d Mbit/s); "
          "%d of %d within %d%% (** marks the others; the 2 calibration cells left out)" % (
              100 * sum(e for e, _, _ in errors) / len(errors),
              100 * sorted(e for e, _, _ in errors)[len(errors) // 2],
              100 * max(errors)[0], max(errors)[1], max(errors)[2], within, len(errors),
              100 * TARGET))


if __name__ == "__main__":
    main()
