#!/usr/bin/env python3
"""The Markdown table of one or more norm_bench.py JSON files (rows in file
order; peers the union of theirs), and the report of a norm_cliff.py JSON:
what bench/run_norm_issue34_h200.sh prints last.

  python3 bench/norm_summary.py OUT/rms.json [OUT/ln.json ...] [--cliff OUT/cliff.json]
"""
import argparse
import json
import sys

from norm_bench import markdown_lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", nargs="*")
    ap.add_argument("--cliff")
    args = ap.parse_args()
    rows, peers, notes = [], [], []
    for path in args.bench_json:
        try:
            d = json.load(open(path))
        except (OSError, ValueError) as e:
            notes.append(f"{path}: {e}")
            continue
        rows += d.get("rows", [])
        peers += [p for p in d.get("peers", []) if p not in peers]
        if d.get("not_reached"):
            notes.append(f"{path}: not reached: {', '.join(d['not_reached'])}")
        for k, why in d.get("failed", {}).items():
            notes.append(f"{path}: FAILED {k}: {why}")
    if rows:
        print("\n".join(markdown_lines(rows, peers)))
    if args.cliff:
        try:
            print("\n".join(json.load(open(args.cliff)).get("report", ["(no report: the cliff run did not finish)"])))
        except (OSError, ValueError) as e:
            notes.append(f"{args.cliff}: {e}")
    for n in notes:
        print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
