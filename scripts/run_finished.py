#!/usr/bin/env python3
"""Exits 0 when run directory DIR holds a finished run, one that reached its --steps.

A run stopped by a signal or --stop-after writes memory.json too (its record so far), so the file
alone does not say the run finished: its "finished" field does. A memory.json written before that
field existed is judged by the run's last logged training step against config.json's "steps".
Used by scripts/study.sh, scripts/experiments.sh and scripts/results_report.sh, which record
finished runs only and resume the others.
"""
import json
import os
import sys


def logged_steps(d):
    last = -1
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a last line cut short by a stop
            if "loss" in rec:
                last = max(last, rec["step"])
    return last


def finished(d):
    try:
        with open(os.path.join(d, "memory.json")) as f:
            mem = json.load(f)
        if "finished" in mem:
            return mem["finished"] is True
        with open(os.path.join(d, "config.json")) as f:
            steps = json.load(f)["steps"]
        return logged_steps(d) >= steps
    except (OSError, ValueError, KeyError, TypeError):
        return False


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: run_finished.py DIR")
    sys.exit(0 if finished(sys.argv[1]) else 1)
