#!/usr/bin/env python3
"""The pay-off study's tables, from the rows that scripts/study.sh commits (docs/study/*.tsv).

Each configuration is one line: its seeds, and the mean and sample standard deviation of its final
validation loss (or test accuracy), the largest worker's accounted bytes and peak RSS over all
ranks, and its wall-clock time. The tables replace the blocks between
<!-- study:WORKLOAD --> and <!-- /study:WORKLOAD --> in docs/results.md, so the figures there are
this script's output, never typed.

Usage: python3 scripts/study_report.py [--check]
  --check  exit 1 when docs/results.md differs from what the rows give (nothing is written)
"""
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
STUDY = os.path.join(ROOT, "docs", "study")
RESULTS = os.path.join(ROOT, "docs", "results.md")

# Public references the calibration is held to, with where each figure comes from.
REFERENCES = {
    "gpt": "nanoGPT README, shakespeare-char on a CPU (same recipe): val loss 1.88",
    "resnet20": "Fashion-MNIST benchmark (zalandoresearch/fashion-mnist README): "
                "90-93% for small CNNs, 94.9% for a ResNet-18 with augmentation",
}


def mean_sd(xs, fmt):
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return (fmt + " ± " + fmt).format(statistics.mean(xs), statistics.stdev(xs))


def mib(b):
    return b / 2**20


def table(rows):
    groups = {}
    for r in rows:
        groups.setdefault(r["config"], []).append(r)
    # The lowest validation loss over a run's evaluations is shown where it tells something the
    # final one does not: in a workload where some configuration got worse as it trained.
    lowest = any(statistics.mean(float(r["val_loss"]) - float(r.get("val_loss_min") or "nan")
                                 for r in rs) >= 0.005 for rs in groups.values())
    out = ["| configuration | N | mask | unit | C | seeds | steps | TFLOP/worker | val loss | " +
           ("lowest val loss | " if lowest else "") +
           "test accuracy | accounted MiB (largest worker) | peak RSS MiB (largest worker) | "
           "wall s (mean) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if lowest else "")]
    for name, rs in groups.items():
        r0 = rs[0]
        loss = [float(r["val_loss"]) for r in rs]
        low = ([float(r["val_loss_min"]) for r in rs if r.get("val_loss_min") not in (None, "", "nan")]
               if lowest else [])
        acc = [100 * float(r["val_acc"]) for r in rs if r["val_acc"] not in ("-", "")]
        total = [mib(float(r["total_bytes"])) for r in rs]
        rss = [mib(float(r["peak_rss_bytes"])) for r in rs]
        wall = statistics.mean(float(r["wall_s"]) for r in rs)
        out.append(f"| {name} | {r0['N']} | {r0['mask']} | {r0['unit']} | {r0['C']} | "
                   f"{','.join(r['seed'] for r in rs)} | {r0['steps']} | "
                   f"{float(r0['tflop_per_worker']):.3f} | {mean_sd(loss, '{:.4f}')} | " +
                   (f"{mean_sd(low, '{:.4f}')} | " if lowest else "") +
                   f"{mean_sd(acc, '{:.2f}%') if acc else '-'} | {mean_sd(total, '{:.1f}')} | "
                   f"{mean_sd(rss, '{:.1f}')} | {wall:.0f} |")
    return "\n".join(out)


def by_config(rows):
    groups = {}
    for r in rows:
        groups.setdefault(r["config"], []).append(r)
    return groups


def pareto(points):
    """The configurations that no other beats on both axes (less memory and lower loss)."""
    front, best = [], float("inf")
    for mem, loss, name in sorted(points):
        if loss < best:
            front.append((mem, loss, name))
            best = loss
    return front


def plot(workload, rows):
    """docs/study/<workload>.svg: final validation loss against the largest worker's accounted
    bytes, one point per configuration run on several seeds (seed mean, with the seeds' spread), and
    those points' Pareto front.
    Needs gnuplot; without it, no plot and a note."""
    points = []
    groups = by_config(rows)
    # The learning-rate search's single-seed rows clutter the plot: it shows the configurations
    # that were run on several seeds (their best learning rate), when there are any.
    if any(len(rs) > 1 for rs in groups.values()):
        groups = {n: rs for n, rs in groups.items() if len(rs) > 1}
    for name, rs in groups.items():
        loss = [float(r["val_loss"]) for r in rs]
        mem = statistics.mean(mib(float(r["total_bytes"])) for r in rs)
        sd = statistics.stdev(loss) if len(loss) > 1 else 0.0
        points.append((mem, statistics.mean(loss), name, sd))
    if not points:
        return None
    svg = os.path.join(STUDY, workload + ".svg")
    with tempfile.TemporaryDirectory() as tmp:
        pts, front = os.path.join(tmp, "points.dat"), os.path.join(tmp, "front.dat")
        with open(pts, "w") as f:
            for mem, loss, name, sd in points:
                f.write(f"{mem:.4f} {loss:.6f} {sd:.6f} \"{name}\"\n")
        with open(front, "w") as f:
            for mem, loss, _ in pareto([(m, l, n) for m, l, n, _ in points]):
                f.write(f"{mem:.4f} {loss:.6f}\n")
        script = f"""set terminal svg size 900,600 font "sans,11"
set output "{svg}"
set title "{workload}: final validation loss against the largest worker's memory"
set xlabel "largest worker's accounted memory, MiB (all ranks)"
set ylabel "validation loss (nats per byte)"
set key top right
set grid
plot "{pts}" using 1:2:3 with yerrorbars title "configuration (mean, seed sd)", \\
     "{pts}" using 1:2:4 with labels offset 0,1 font ",8" notitle, \\
     "{front}" using 1:2 with lines lw 2 title "Pareto front"
"""
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            return None
    # gnuplot stamps nothing variable into the file, so a re-run with the same rows is identical.
    return os.path.relpath(svg, os.path.dirname(RESULTS))


def block(workload):
    path = os.path.join(STUDY, workload + ".tsv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    refs = sorted({v for k, v in REFERENCES.items()
                   if any(r["config"].startswith(k) for r in rows)})
    total_s = sum(float(r["wall_s"]) for r in rows)
    lines = [f"From `docs/study/{workload}.tsv` ({len(rows)} runs, {total_s / 60:.0f} minutes of "
             "wall-clock time on this machine); regenerate with "
             f"`bash scripts/study.sh {workload} && python3 scripts/study_report.py`.", "",
             table(rows), ""]
    lines += [f"- Reference: {ref}." for ref in refs]
    if not workload.startswith("calibrate"):
        svg = plot(workload, rows)
        if svg:
            lines += ["", f"![{workload}: loss against memory]({svg})"]
        front = pareto([(statistics.mean(mib(float(r["total_bytes"])) for r in rs),
                         statistics.mean(float(r["val_loss"]) for r in rs), name)
                        for name, rs in by_config(rows).items()])
        lines += ["", "On the Pareto front (less memory and lower loss than every other "
                  "configuration to its left): " + ", ".join(n for _, _, n in front) + "."]
    return "\n".join(lines)


def main():
    check = "--check" in sys.argv[1:]
    with open(RESULTS) as f:
        text = f.read()
    new = text
    for name in sorted(os.listdir(STUDY)):
        if not name.endswith(".tsv"):
            continue
        w = name[:-4]
        pattern = re.compile(
            rf"(<!-- study:{re.escape(w)} -->\n)(?:.*?\n)?(<!-- /study:{re.escape(w)} -->)", re.S)
        if not pattern.search(new):
            print(f"study_report: docs/results.md has no block for '{w}' "
                  f"(add <!-- study:{w} --> and <!-- /study:{w} --> lines)", file=sys.stderr)
            continue
        new = pattern.sub(lambda m: m.group(1) + block(w) + "\n" + m.group(2), new)
    if check:
        if new != text:
            print("study_report: docs/results.md differs from the committed rows: run "
                  "python3 scripts/study_report.py", file=sys.stderr)
            sys.exit(1)
        return
    if new != text:
        with open(RESULTS, "w") as f:
            f.write(new)
    print("study_report: docs/results.md is up to date with docs/study/*.tsv")


if __name__ == "__main__":
    main()
