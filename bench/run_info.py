"""What a bench's JSON records about its run besides the figures: the UTC date
and the commit measured, so a plot (bench/plot_results.py) or a reader can
name the run it shows."""
import datetime
import os
import subprocess


def run_info(commit=None):
    """{"date": today in UTC, ISO; "commit": `commit` when given, else the short
    HEAD of the checkout this file is in, else None}. The GPU machine runs a
    copy of the tree without .git: there the caller passes --commit. A
    --commit given where git works wins, since it may name a tree git cannot
    (one with uncommitted changes)."""
    if not commit:
        try:
            r = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short",
                                "HEAD"], capture_output=True, text=True, timeout=10)
            commit = r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            commit = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "commit": commit or None}
