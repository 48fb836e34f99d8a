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
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
STUDY = os.path.join(ROOT, "docs", "study")
RESULTS = os.path.join(ROOT, "docs", "results.md")
# Where the plots are drawn: docs/study, or under --check a scratch folder whose plots are then
# compared with the committed ones (so a check writes nothing).
PLOTS = {"dir": STUDY}


def svg_target(name):
    """The path gnuplot writes `name` to, and the path docs/results.md links."""
    return (os.path.join(PLOTS["dir"], name),
            os.path.relpath(os.path.join(STUDY, name), os.path.dirname(RESULTS)))

# Public references the calibration is held to, with where each figure comes from.
REFERENCES = {
    "gpt": "nanoGPT README, shakespeare-char on a CPU (same recipe): val loss 1.88",
    "resnet20": "Fashion-MNIST benchmark (zalandoresearch/fashion-mnist README): "
                "90-93% for small CNNs, 94.9% for a ResNet-18 with augmentation",
    "vit": "Fashion-MNIST benchmark (zalandoresearch/fashion-mnist README, submitted results; no "
           "ViT is listed): 87.6% for two conv layers with max pooling (Keras), 88.8% for a "
           "GRU+SVM, 90.0% for an MLP 256-128-64, all without preprocessing",
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


def is_vision(rows):
    return any(r["val_acc"] not in ("-", "") for r in rows)


def quality(r):
    """What a configuration is judged by: test error in percent for the image models (where
    accuracy is what a user reads), else the final validation loss."""
    if r["val_acc"] not in ("-", ""):
        return 100 * (1 - float(r["val_acc"]))
    return float(r["val_loss"])


def by_config(rows):
    groups = {}
    for r in rows:
        groups.setdefault(r["config"], []).append(r)
    return groups


# A configuration's name: its prefix, its learning rate, and what follows (-matched).
CONFIG_NAME = re.compile(r"^(?P<prefix>.*)-lr(?P<lr>[0-9.]+(?:e-?[0-9]+)?)(?P<suffix>-.*)?$")


def grids(rows):
    """Each prefix's learning-rate grid: {prefix: {rate string: seed-1 validation loss}}, the rates
    whose seed-1 run finished with a finite loss."""
    out = {}
    for r in rows:
        m = CONFIG_NAME.match(r["config"])
        if not m or m["suffix"] or r["seed"] != "1" or not math.isfinite(float(r["val_loss"])):
            continue
        out.setdefault(m["prefix"], {})[m["lr"]] = float(r["val_loss"])
    return out


def best_rates(rows):
    """{prefix: (loss, rate)}: the lowest seed-1 validation loss over the grid, as
    scripts/study.sh's best_lr picks it."""
    return {p: min((loss, lr) for lr, loss in g.items()) for p, g in grids(rows).items()}


def edge_rates(rows):
    """The prefixes whose best rate is the largest or smallest of a grid of two or more: their best
    may lie beyond it (scripts/study.sh grows such a grid, up to GRID_GROW rates)."""
    out = []
    for p, g in grids(rows).items():
        if len(g) < 2:
            continue
        best = min(g, key=g.get)
        rates = [float(lr) for lr in g]
        if float(best) in (max(rates), min(rates)):
            side = "top" if float(best) == max(rates) else "bottom"
            out.append(f"{p} ({best}, the {side})")
    return sorted(out)


def tuned(rows):
    """The configurations run on several seeds, each at its prefix's best learning rate (see
    best_rates). When a grid grows, the seeds run at an earlier best stay in the rows but not
    here."""
    best = best_rates(rows)
    out = {}
    for name, rs in by_config(rows).items():
        m = CONFIG_NAME.match(name)
        if len(rs) > 1 and (not m or m["prefix"] not in best or best[m["prefix"]][1] == m["lr"]):
            out[name] = rs
    return out


def pareto(points):
    """The configurations that no other beats on both axes (less memory and lower loss or error)."""
    front, best = [], float("inf")
    for mem, loss, name in sorted(points):
        if loss < best:
            front.append((mem, loss, name))
            best = loss
    return front


def run_gnuplot(script):
    """Runs a gnuplot script; False where gnuplot is missing or fails (the plot is then left out)."""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


def plot(workload, rows):
    """docs/study/<workload>.svg: final validation loss (test error for the image models) against
    the largest worker's accounted bytes, one point per configuration run on several seeds (seed mean, with the seeds' spread), and
    those points' Pareto front.
    Needs gnuplot; without it, no plot and a note."""
    points = []
    groups = by_config(rows)
    # The learning-rate search's single-seed rows clutter the plot: it shows the configurations
    # that were run on several seeds at their best learning rate, when there are any.
    if any(len(rs) > 1 for rs in groups.values()):
        groups = tuned(rows)
    for name, rs in groups.items():
        loss = [quality(r) for r in rs]
        mem = statistics.mean(mib(float(r["total_bytes"])) for r in rs)
        sd = statistics.stdev(loss) if len(loss) > 1 else 0.0
        points.append((mem, statistics.mean(loss), name, sd))
    if not points:
        return None
    svg, link = svg_target(workload + ".svg")
    with tempfile.TemporaryDirectory() as tmp:
        pts, front = os.path.join(tmp, "points.dat"), os.path.join(tmp, "front.dat")
        with open(pts, "w") as f:
            for mem, loss, name, sd in points:
                f.write(f"{mem:.4f} {loss:.6f} {sd:.6f} \"{name}\"\n")
        with open(front, "w") as f:
            for mem, loss, _ in pareto([(m, l, n) for m, l, n, _ in points]):
                f.write(f"{mem:.4f} {loss:.6f}\n")
        what, unit = (("test error", "test error, % of the test images") if is_vision(rows) else
                      ("final validation loss", "validation loss (nats per byte)"))
        script = f"""set terminal svg size 900,600 font "sans,11"
set output "{svg}"
set title "{workload}: {what} against the largest worker's memory"
set xlabel "largest worker's accounted memory, MiB (all ranks)"
set ylabel "{unit}"
set key top right
set grid
plot "{pts}" using 1:2:3 with yerrorbars title "configuration (mean, seed sd)", \\
     "{pts}" using 1:2:4 with labels offset 0,1 font ",8" notitle, \\
     "{front}" using 1:2 with lines lw 2 title "Pareto front"
"""
        if not run_gnuplot(script):
            return None
    # gnuplot stamps nothing variable into the file, so a re-run with the same rows is identical.
    return link


def read_rows(path):
    """The rows of a study TSV, checked: every row as many cells as the header, its numbers
    numbers (a validation loss may be nan: a learning rate that diverged), and one row per
    (config, seed). A damaged file stops the report with one line naming it and the
    row, rather than a traceback or a figure averaged over a duplicate."""
    numeric = ("seed", "N", "C", "layers", "width", "lr", "steps", "tflop_per_worker",
               "state_bytes", "total_bytes", "peak_rss_bytes", "val_loss", "wall_s",
               "val_loss_min")
    with open(path, newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        sys.exit(f"study_report.py: {path} is empty: restore it (git checkout -- {path})")
    header = lines[0].split("\t")
    rows, seen = [], {}
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        where = f"study_report.py: {path} line {n}"
        if len(cells) != len(header):
            sys.exit(f"{where} has {len(cells)} cells where the header has {len(header)}: a "
                     "damaged or cut row; delete it and run its sweep again (scripts/study.sh "
                     "records it anew)")
        r = dict(zip(header, cells))
        for k in numeric:
            if k not in r:
                continue
            try:
                # A rate that diverged logs a NaN loss: a grid's honest result, never its best.
                ok = math.isfinite(float(r[k])) or (k.startswith("val_loss") and r[k] == "nan")
            except ValueError:
                ok = False
            if not ok:
                sys.exit(f"{where}: {k} is '{r[k]}', not a number: a damaged row; delete it and "
                         "run its sweep again")
        key = (r.get("config"), r.get("seed"))
        if key in seen:
            sys.exit(f"{where} repeats {key[0]} seed {key[1]} of line {seen[key]}: delete one")
        seen[key] = n
        rows.append(r)
    return rows


def block(workload):
    path = os.path.join(STUDY, workload + ".tsv")
    rows = read_rows(path)
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
        # The same configurations as the plot: a single seed picked as a grid's best, or seeds
        # at a rate the grid has since left, would put selection or stale rows on the front.
        groups = by_config(rows)
        if any(len(rs) > 1 for rs in groups.values()):
            groups = tuned(rows)
        front = pareto([(statistics.mean(mib(float(r["total_bytes"])) for r in rs),
                         statistics.mean(quality(r) for r in rs), name)
                        for name, rs in groups.items()])
        lower = "lower test error" if is_vision(rows) else "lower loss"
        lines += ["", f"On the Pareto front (less memory and {lower} than every other "
                  "configuration to its left): " + ", ".join(n for _, _, n in front) + "."]
        edges = edge_rates(rows)
        if edges:
            lines += ["", "Best learning rate still at its grid's edge, so possibly not the best: "
                      + ", ".join(edges) + "."]
    return "\n".join(lines)


# Quality against wall-clock time where bandwidth is short: each configuration's steps at the step
# time that sdp plan's model predicts (src/sdp/steptime.c), with the speeds that docs/network.md
# measured and validated on two hosts of two ranks each: the link rates are its three measured
# caps, the rest its fitted transport, broadcast, compute and memory speeds. Every speed is an
# option, so the figures are the same on every machine that runs this.
LINKS_MBITS = [7538, 958, 96]
NETWORK_MODEL = ["--ranks-per-host", "2", "--link-latency-us", "50", "--host-gbps", "1.96",
                 "--host-bcast-gbps", "3.79", "--gflops", "71.5", "--mem-gbs", "16.3",
                 "--comm", "mpi"]
# What the rows do not record of each workload's model: heads, context, batch and vocabulary
# (sdp train reads text as bytes: 256 tokens, whatever the text holds).
TIME_MODELS = {"gpt": ["--model", "gpt", "--heads", "4", "--seq-len", "64", "--batch", "3",
                       "--vocab", "256"],
               "gpt-large": ["--model", "gpt", "--heads", "6", "--seq-len", "64", "--batch", "3",
                             "--vocab", "256"]}
# The workloads whose levers sdp plan prices: the GPTs above, the ResNet-20 (its rows' layers and
# width are its depth and channels), and the ViT.
PLAN_MODELS = dict(TIME_MODELS, resnet=["--model", "resnet", "--dataset", "fashion-mnist",
                                        "--batch", "32", "--optimizer", "sgd"],
                   vit=["--model", "vit", "--dataset", "fashion-mnist", "--batch", "32",
                        "--heads", "4", "--patch", "7"])
SDP_BIN = os.environ.get("SDP_BIN", os.path.join(ROOT, "build", "sdp"))


def step_seconds(workload, r, mbits):
    import json
    args = [SDP_BIN, "plan", *TIME_MODELS[workload], "--layers", r["layers"], "--width",
            r["width"], "--world", r["N"], "--sdp-mask", r["mask"], "--link-gbps",
            f"{mbits / 1000:g}", *NETWORK_MODEL, "--json"]
    if r["mask"] != "none":
        args += ["--sdp-unit", r["unit"], "--sdp-coverage", r["C"]]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["steptime"]["step_s"]


def time_block(workload, rows):
    """The configurations run on several seeds, with their time to train at each link rate."""
    groups = tuned(rows)
    head = " | ".join(f"step s at {m} Mbit/s | minutes at {m} Mbit/s" for m in LINKS_MBITS)
    out = [f"| configuration | steps | val loss | {head} |",
           "|---|---|---|" + "---|---|" * len(LINKS_MBITS)]
    points = {m: [] for m in LINKS_MBITS}
    for name, rs in groups.items():
        r0 = rs[0]
        loss = [float(r["val_loss"]) for r in rs]
        cells = []
        for m in LINKS_MBITS:
            t = step_seconds(workload, r0, m)
            minutes = t * int(r0["steps"]) / 60
            points[m].append((minutes, statistics.mean(loss), name))
            cells.append(f"{t:.3f} | {minutes:.1f}")
        out.append(f"| {name} | {r0['steps']} | {mean_sd(loss, '{:.4f}')} | " +
                   " | ".join(cells) + " |")
    lines = ["Step times from `sdp plan`'s model with the speeds measured in docs/network.md "
             "(two hosts of two workers; " + " ".join(NETWORK_MODEL) + "); regenerate with "
             "`python3 scripts/study_report.py`.", "", "\n".join(out), ""]
    for m in LINKS_MBITS:
        front = pareto(points[m])
        lines.append(f"- Fastest to each loss at {m} Mbit/s (the front of loss against time): " +
                     ", ".join(f"{n} ({t:.1f} min, {l:.4f})" for t, l, n in front) + ".")
    svg = time_plot(workload, points)
    if svg:
        lines += ["", f"![{workload}: loss against wall-clock time]({svg})"]
    return "\n".join(lines)


def plan_total(workload, r, recompute, zero=0):
    """The largest worker's total bytes that sdp plan predicts for row r's configuration (exact:
    tests/test_sdp_memplan.sh holds it to the measured bytes)."""
    import json
    resnet = workload == "resnet"
    args = [SDP_BIN, "plan", *PLAN_MODELS[workload], "--depth" if resnet else "--layers",
            r["layers"], "--channels" if resnet else "--width", r["width"], "--world", r["N"],
            "--sdp-mask", r["mask"], "--val-batches", "200", "--recompute", recompute, "--zero",
            str(zero), "--json"]
    if r["mask"] != "none":
        args += ["--sdp-unit", r["unit"], "--sdp-coverage", r["C"]]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return max(w["total"] for w in json.loads(out)["workers"])


# The levers beside each configuration: (column, --recompute, --zero, point suffix).
LEVERS = [("with --recompute layer", "layer", 0, " +recompute"),
          ("with --zero 1", "none", 1, " +zero1"),
          ("with --zero 2", "none", 2, " +zero2"),
          ("with --recompute layer --zero 1", "layer", 1, " +recompute +zero1"),
          ("with --recompute layer --zero 2", "layer", 2, " +recompute +zero2")]


def lever_points(workload, rows):
    """Each configuration run on several seeds, and the same with each lever: (name, loss, MiB,
    [MiB with each lever of LEVERS]). A lever's memory is the row's measured total less what
    sdp plan says the lever saves on its largest worker; its loss is the row's."""
    groups = tuned(rows)
    out = []
    for name, rs in groups.items():
        r0 = rs[0]
        loss = statistics.mean(quality(r) for r in rs)
        mem = statistics.mean(float(r["total_bytes"]) for r in rs)
        plain = plan_total(workload, r0, "none")
        out.append((name, loss, mib(mem),
                    [mib(mem - (plain - plan_total(workload, r0, rc, z))) for _, rc, z, _ in LEVERS]))
    return out


def levers_checked(workload):
    """The measured runs of docs/study/<workload>-levers.tsv (scripts/study.sh
    <workload>-levers) beside the rows they repeat with the levers on: the same configuration and
    seed in docs/study/<workload>.tsv, its name without the lever suffix."""
    path = os.path.join(STUDY, workload + "-levers.tsv")
    if not os.path.exists(path):
        return ""
    runs = read_rows(path)
    base = {(r["config"], r["seed"]): r for r in read_rows(os.path.join(STUDY, workload + ".tsv"))}
    out = ["| measured run | seed | val loss | without the levers | accounted MiB | predicted |",
           "|---|---|---|---|---|---|"]
    for r in runs:
        name = re.sub(r"-zero\d", "", r["config"]).replace("-recompute", "")
        b = base.get((name, r["seed"]))
        if not b:
            continue
        rc = "layer" if "-recompute" in r["config"] else "none"
        z = int(re.search(r"-zero(\d)", r["config"]).group(1)) if "-zero" in r["config"] else 0
        # The row without the levers, less what sdp plan says they save: the dataset's bytes,
        # which the plan leaves out, stay in.
        predicted = float(b["total_bytes"]) - (plan_total(workload, b, "none") -
                                               plan_total(workload, b, rc, z))
        out.append(f"| {r['config']} | {r['seed']} | {float(r['val_loss']):.6f} | "
                   f"{float(b['val_loss']):.6f} | {mib(float(r['total_bytes'])):.1f} | "
                   f"{mib(predicted):.1f} |")
    return ("\n\nMeasured, from `docs/study/" + workload + "-levers.tsv`: the levers on, beside the "
            "same configuration and seed without them (`bash scripts/study.sh " + workload +
            "-levers`).\n\n" + "\n".join(out))


def levers_block(workload, rows):
    """The configurations with activation recomputation, ZeRO stages 1 and 2, and both: the same
    training (bit for bit under recomputation, tests/test_recompute.sh; up to floating-point
    reordering under ZeRO, tests/test_zero.sh), so the same losses, in less memory (or, for
    ZeRO-2's two layer slots on few layers, more)."""
    pts = lever_points(workload, rows)
    vision = is_vision(rows)
    what, fmt = ("test error, %", "{:.2f}") if vision else ("val loss", "{:.4f}")
    out = [f"| configuration | {what} | accounted MiB | " + " | ".join(c for c, *_ in LEVERS) +
           " |", "|---|---|---|" + "---|" * len(LEVERS)]
    points = []
    for name, loss, mem, levered in pts:
        out.append(f"| {name} | {fmt.format(loss)} | {mem:.1f} | " +
                   " | ".join(f"{m:.1f}" for m in levered) + " |")
        points.append((mem, loss, name))
        points += [(m, loss, name + suffix) for m, (*_, suffix) in zip(levered, LEVERS)]
    front = pareto(points)
    svg = levers_plot(workload, pts, front, vision)
    return ("From `docs/study/" + workload + ".tsv` and `sdp plan --recompute layer --zero 1|2`; "
            "regenerate with `python3 scripts/study_report.py`.\n\n" + "\n".join(out) + "\n\n" +
            f"On the Pareto front of {'test error' if vision else 'loss'} against memory, with "
            "and without the levers: " +
            ", ".join(f"{n} ({m:.1f} MiB, {fmt.format(l)})" for m, l, n in front) + "." +
            (f"\n\n![{workload}: the levers]({svg})" if svg else "") +
            levers_checked(workload))


def levers_plot(workload, pts, front, vision=False):
    """docs/study/<workload>-levers.svg: each configuration's point and its points with each
    lever, one series each, and the front over all of them. Needs gnuplot."""
    svg, link = svg_target(workload + "-levers.svg")
    with tempfile.TemporaryDirectory() as tmp:
        series = []
        for i, title in enumerate(["as run"] + [c for c, *_ in LEVERS]):
            path = os.path.join(tmp, f"s{i}.dat")
            with open(path, "w") as f:
                for name, loss, mem, levered in pts:
                    f.write(f"{(mem if i == 0 else levered[i - 1]):.4f} {loss:.6f}\n")
            series.append(f'"{path}" using 1:2 with points pt {i + 5} ps 1.2 title "{title}"')
        fr = os.path.join(tmp, "front.dat")
        with open(fr, "w") as f:
            for mem, loss, _ in front:
                f.write(f"{mem:.4f} {loss:.6f}\n")
        series.append(f'"{fr}" using 1:2 with lines lw 2 title "Pareto front"')
        script = f"""set terminal svg size 900,600 font "sans,11"
set output "{svg}"
set title "{workload}: each configuration with activation recomputation and ZeRO-1"
set xlabel "largest worker's accounted memory, MiB (all ranks; levers: sdp plan's saving)"
set ylabel "{'test error, % of the test images' if vision else 'validation loss (nats per byte)'}"
set key top right
set grid
plot {", ".join(series)}
"""
        if not run_gnuplot(script):
            return None
    return link


def time_plot(workload, points):
    svg, link = svg_target(workload + "-time.svg")
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        # Every configuration is a point; the front of each link rate is a line, and only its
        # points are named, the rest being in the table.
        for i, m in enumerate(LINKS_MBITS):
            dat, fr = os.path.join(tmp, f"{m}.dat"), os.path.join(tmp, f"{m}-front.dat")
            with open(dat, "w") as f:
                for t, loss, name in sorted(points[m]):
                    f.write(f"{t:.4f} {loss:.6f}\n")
            with open(fr, "w") as f:
                for t, loss, name in pareto(points[m]):
                    f.write(f"{t:.4f} {loss:.6f} \"{name}\"\n")
            plots.append(f'"{dat}" using 1:2 with points pt {5 + 2 * i} ps 1.2 lc {i + 1} '
                         f'title "{m} Mbit/s"')
            plots.append(f'"{fr}" using 1:2 with lines lc {i + 1} notitle')
            plots.append(f'"{fr}" using 1:2:3 with labels left offset 0.5,0.5 font ",7" notitle')
        script = f"""set terminal svg size 900,600 font "sans,11"
set output "{svg}"
set title "{workload}: final validation loss against the time to train, at three link rates"
set xlabel "minutes to train on two hosts of two workers (sdp plan's step-time model)"
set ylabel "validation loss (nats per byte)"
set logscale x
set key top right
set grid
plot {", ".join(plots)}
"""
        if not run_gnuplot(script):
            return None
    return link


README = os.path.join(ROOT, "README.md")

# The workloads the verdict covers, in the order docs/results.md gives them, with what each is.
VERDICT_WORKLOADS = [
    ("gpt", "GPT, nanoGPT's shakespeare-char recipe"),
    ("gpt-large", "GPT, 6 layers of width 192"),
    ("gpt-overfit", "GPT on 10% of the text (overfits)"),
    ("gpt-overfit3", "GPT on 3% of the text (overfits more)"),
    ("resnet", "ResNet-20, Fashion-MNIST"),
    ("vit", "ViT, Fashion-MNIST"),
]


def verdict_block():
    """docs/results.md's summary: per workload, DDP, SDP's best configuration and the best dense
    configuration in no more memory than it, and the Pareto front, each configuration on its
    several seeds at its best learning rate (the plots' points). SDP gives a better model for
    the memory where one of its configurations is on the front."""
    out = ["| workload | DDP | SDP's best | the best dense model in no more memory | "
           "SDP on the front |", "|---|---|---|---|---|"]
    for w, what in VERDICT_WORKLOADS:
        path = os.path.join(STUDY, w + ".tsv")
        if not os.path.exists(path):
            continue
        rows = read_rows(path)
        vision = is_vision(rows)
        points = []
        for name, rs in tuned(rows).items():
            points.append((statistics.mean(mib(float(r["total_bytes"])) for r in rs),
                           statistics.mean(quality(r) for r in rs), name, rs[0]["mask"] != "none"))

        def show(pt):
            q = f"{100 - pt[1]:.2f}%" if vision else f"{pt[1]:.3f}"
            return f"{pt[2]}: {q}, {pt[0]:.1f} MiB"
        # DDP at the reference size: "ddp-lr<LR>", nothing after it (a name without a rate is none).
        ddp = [p for p in points if re.fullmatch(r"ddp-lr[0-9.]+(?:e-?[0-9]+)?", p[2])]
        sdp = [p for p in points if p[3]]
        if not ddp or not sdp:
            continue
        best = min(sdp, key=lambda p: p[1])
        dense = [p for p in points if not p[3] and p[0] <= best[0]]
        rival = min(dense, key=lambda p: p[1]) if dense else None
        front = {n for _, _, n in pareto([(m, q, n) for m, q, n, _ in points])}
        on_front = [p[2] for p in sdp if p[2] in front]
        out.append(f"| {what} | {show(ddp[0])} | {show(best)} | "
                   f"{show(rival) if rival else 'none'} | "
                   f"{', '.join(on_front) if on_front else 'no'} |")
    return ("From `docs/study/*.tsv`; regenerate with `python3 scripts/study_report.py`. Each "
            "configuration on 3 seeds (mean) at its best learning rate; test accuracy for the image "
            "models, else validation loss in nats per byte (lower is better); memory is the "
            "largest worker's accounted bytes over all ranks, the dataset included.\n\n"
            + "\n".join(out))


def floor_block():
    """gpt-floor's rows (CONFIG-lr<LR>-floor<F>: the cosine's floor at F) beside the gpt
    workload's CONFIG-lr<LR> (the recipe's floor, 1e-4), on their seeds."""
    def load(w):
        return by_config(read_rows(os.path.join(STUDY, w + ".tsv")))
    floor, ref = load("gpt-floor"), load("gpt")
    out = ["| configuration | floor 1e-4 (the recipe's) | floor a tenth of the rate |",
           "|---|---|---|"]
    for name, rs in floor.items():
        m = re.fullmatch(r"(?P<base>.*-lr[0-9.]+(?:e-?[0-9]+)?)-floor(?P<f>[0-9.e-]+)", name)
        if not m or m["base"] not in ref:
            continue
        losses = [float(r["val_loss"]) for r in ref[m["base"]]]
        out.append(f"| {m['base']} | {mean_sd(losses, '{:.3f}')} | "
                   f"{mean_sd([float(r['val_loss']) for r in rs], '{:.3f}')} ({m['f']}) |")
    return ("Final validation loss on each configuration's seeds, from `docs/study/gpt.tsv` and "
            "`docs/study/gpt-floor.tsv` (equal steps).\n\n" + "\n".join(out))


def which_mode_block():
    """README's short table: for the GPT of the study's reference recipe, each configuration run
    on several seeds, its largest worker's memory and its loss against DDP's, at equal steps and
    at matched FLOPs."""
    rows = read_rows(os.path.join(STUDY, "gpt.tsv"))
    groups = tuned(rows)
    mean = lambda rs, k: statistics.mean(float(r[k]) for r in rs)
    ddp = next(rs for n, rs in groups.items() if rs[0]["mask"] == "none" and rs[0]["width"] == "128"
               and not n.endswith("-matched"))
    d_mem, d_loss = mean(ddp, "total_bytes"), mean(ddp, "val_loss")
    out = ["| configuration (N = 4) | memory per worker | val loss, equal steps | val loss, "
           "DDP's FLOPs per worker |", "|---|---|---|---|"]
    lines = []
    for name, rs in groups.items():
        r0 = rs[0]
        if name.endswith("-matched") or (r0["mask"] != "none" and r0["width"] != "128"):
            continue
        if r0["mask"] == "none":
            what = "DDP" if r0["width"] == "128" else f"DDP, dense model shrunk to width {r0['width']}"
        else:
            what = f"SDP, {r0['mask']} masking, {r0['unit']} units, C = {r0['C']}"
        matched = groups.get(name + "-matched")
        mem, loss = mean(rs, "total_bytes"), mean(rs, "val_loss")
        same_flops = abs(float(r0["tflop_per_worker"]) / float(ddp[0]["tflop_per_worker"]) - 1) < 0.01
        m = (f"{mean(matched, 'val_loss') - d_loss:+.3f}" if matched else
             f"{loss - d_loss:+.3f}" if same_flops else "-")
        lines.append((mem, f"| {what} | {mib(mem):.1f} MiB ({100 * (mem / d_mem - 1):+.0f}%) | "
                           f"{loss - d_loss:+.3f} | {m} |" if r0["mask"] != "none" or
                     r0["width"] != "128" else
                     f"| {what} | {mib(mem):.1f} MiB | {loss:.3f} | {loss:.3f} |"))
    out += [line for _, line in sorted(lines, key=lambda x: -x[0])]
    return ("Measured on the GPT of nanoGPT's shakespeare-char recipe (docs/results.md, from "
            "`docs/study/gpt.tsv`: 3 seeds each, at its best learning rate; memory is the largest "
            "worker's accounted bytes over all ranks). Losses are nats per byte, DDP's absolute "
            "and the others' against it; lower is better.\n\n" + "\n".join(out))


def main():
    check = "--check" in sys.argv[1:]
    if check:
        with tempfile.TemporaryDirectory() as tmp:
            PLOTS["dir"] = tmp
            report(True)
            stale = [n for n in sorted(os.listdir(tmp))
                     if not os.path.exists(os.path.join(STUDY, n)) or
                     open(os.path.join(tmp, n), "rb").read() !=
                     open(os.path.join(STUDY, n), "rb").read()]
        if stale:
            print("study_report: docs/study/" + ", docs/study/".join(stale) +
                  (" differs" if len(stale) == 1 else " differ") + " from what "
                  "the rows give: run python3 scripts/study_report.py", file=sys.stderr)
            sys.exit(1)
        return
    report(False)


def report(check):
    with open(RESULTS) as f:
        text = f.read()
    new = text
    for name in sorted(os.listdir(STUDY)):
        if not name.endswith(".tsv") or name.endswith("-levers.tsv"):  # in the levers block
            continue
        w = name[:-4]
        pattern = re.compile(
            rf"(<!-- study:{re.escape(w)} -->\n)(?:.*?\n)?(<!-- /study:{re.escape(w)} -->)", re.S)
        if not pattern.search(new):
            print(f"study_report: docs/results.md has no block for '{w}' "
                  f"(add <!-- study:{w} --> and <!-- /study:{w} --> lines)", file=sys.stderr)
            continue
        new = pattern.sub(lambda m: m.group(1) + block(w) + "\n" + m.group(2), new)
        timed = re.compile(rf"(<!-- study-time:{re.escape(w)} -->\n)(?:.*?\n)?"
                           rf"(<!-- /study-time:{re.escape(w)} -->)", re.S)
        if w in TIME_MODELS and timed.search(new):
            rows = read_rows(os.path.join(STUDY, name))
            new = timed.sub(lambda m: m.group(1) + time_block(w, rows) + "\n" + m.group(2), new)
        rc = re.compile(rf"(<!-- study-recompute:{re.escape(w)} -->\n)(?:.*?\n)?"
                        rf"(<!-- /study-recompute:{re.escape(w)} -->)", re.S)
        if w in PLAN_MODELS and rc.search(new):
            rows = read_rows(os.path.join(STUDY, name))
            new = rc.sub(lambda m: m.group(1) + levers_block(w, rows) + "\n" + m.group(2), new)
    new = re.sub(r"(<!-- study:verdict -->\n)(?:.*?\n)?(<!-- /study:verdict -->)",
                 lambda m: m.group(1) + verdict_block() + "\n" + m.group(2), new, flags=re.S)
    if os.path.exists(os.path.join(STUDY, "gpt-floor.tsv")):
        new = re.sub(r"(<!-- study-floor -->\n)(?:.*?\n)?(<!-- /study-floor -->)",
                     lambda m: m.group(1) + floor_block() + "\n" + m.group(2), new, flags=re.S)
    with open(README) as f:
        readme = f.read()
    new_readme = re.sub(r"(<!-- study:which-mode -->\n)(?:.*?\n)?(<!-- /study:which-mode -->)",
                        lambda m: m.group(1) + which_mode_block() + "\n" + m.group(2), readme,
                        flags=re.S)
    if check:
        if new != text or new_readme != readme:
            print("study_report: docs/results.md or README.md differs from the committed rows: run "
                  "python3 scripts/study_report.py", file=sys.stderr)
            sys.exit(1)
        return
    if new != text:
        with open(RESULTS, "w") as f:
            f.write(new)
    if new_readme != readme:
        with open(README, "w") as f:
            f.write(new_readme)
    print("study_report: docs/results.md and README.md are up to date with docs/study/*.tsv")


if __name__ == "__main__":
    main()
