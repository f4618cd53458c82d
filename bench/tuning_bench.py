#!/usr/bin/env python3
"""What tuning costs and how repeatable it is, on the GPU machine (issue 4).

For each problem (op x shape, bf16):
  A  cold tune: fresh database and fresh kernel cache (wall time of `ktune tune`);
     warm re-tune: same daemon, --force (every cubin from the kernel cache);
  B  a second daemon, fresh database, A's kernel cache: a fresh tune, whose
     winner is compared with A's (stable winners: same config, or how far apart);
  C  coordinate descent (--search descent, budget --max-candidates), fresh
     database and fresh kernel cache: its wall time and its winner's time
     against the grid's (the performance the budget costs).
Times of winners are the tuner's own measurements (one protocol for all).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from run_info import run_info

OPS = ["rmsnorm.fwd", "rmsnorm.bwd", "layernorm.fwd", "layernorm.bwd"]
SHAPES = [(32768, 1024), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 2048),
          (4096, 4096), (4096, 5120), (16384, 12288)]  # bench/norm_bench.py's


class Daemon:
    def __init__(self, ktuned, ktune, work, name, extra=()):
        self.ktune = ktune
        self.sock = f"unix:{work}/{name}.sock"
        self.log = open(f"{work}/{name}.log", "w")
        args = [ktuned, "--listen", self.sock, "--db", f"{work}/{name}.db", "--log-level", "info",
                "--no-background-tunes"] + list(extra)
        self.proc = subprocess.Popen(args, stderr=self.log, stdout=self.log)
        for _ in range(600):
            if subprocess.run([ktune, "--server", self.sock, "status"], capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name}: ktuned did not start")

    def tune(self, op, m, n, force=False):
        cmd = [self.ktune, "--server", self.sock, "tune", op, "--m", str(m), "--n", str(n), "--dtype", "bf16",
               "--json"] + (["--bias"] if op.startswith("layernorm") else []) + (["--force"] if force else [])
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
        answer = json.loads(r.stdout)
        return wall, answer["config"]["norm"], answer["measurement"]["time_us"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def save(path, info, rows):
    """Written after every tune: a run cut short keeps what it measured. An
    object with the run's date and commit beside "rows" (before issue 32, the
    bare list of rows)."""
    with open(path, "w") as f:
        json.dump({**info, "rows": rows}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktuned", required=True)
    ap.add_argument("--ktune", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-candidates", type=int, default=10)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}" for m, n in SHAPES))
    ap.add_argument("--commit", help="the commit measured, for the JSON (default: git rev-parse --short HEAD)")
    args = ap.parse_args()
    ops = args.ops.split(",")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    info = run_info(args.commit)
    work = tempfile.mkdtemp(prefix="ktune-tuning-")
    rows = []
    # Three daemons side by side (only one tunes at a time): each problem gets
    # all of its figures before the next starts, so a run cut short by its time
    # limit still has whole rows.
    a = Daemon(args.ktuned, args.ktune, work, "a", ["--kernel-cache-dir", f"{work}/kc-a"])
    b = Daemon(args.ktuned, args.ktune, work, "b", ["--kernel-cache-dir", f"{work}/kc-a"])
    c = Daemon(args.ktuned, args.ktune, work, "c", ["--kernel-cache-dir", f"{work}/kc-c", "--search", "descent",
                                                   "--search-max-candidates", str(args.max_candidates)])
    try:
        for op in ops:
            for m, n in shapes:
                cold_s, cfg, us = a.tune(op, m, n)
                warm_s, warm_cfg, warm_us = a.tune(op, m, n, force=True)
                _, fresh_cfg, fresh_us = b.tune(op, m, n)  # fresh database, A's kernel cache
                descent_s, descent_cfg, descent_us = c.tune(op, m, n)
                rows.append({"op": op, "M": m, "N": n, "cold_s": cold_s, "warm_s": warm_s, "config": cfg, "us": us,
                             "warm_config": warm_cfg, "warm_us": warm_us, "fresh_config": fresh_cfg,
                             "fresh_us": fresh_us, "descent_s": descent_s, "descent_config": descent_cfg,
                             "descent_us": descent_us})
                save(args.out, info, rows)
                print(f"  {op} {m}x{n}: cold {cold_s:.1f} s, warm {warm_s:.1f} s, descent {descent_s:.1f} s",
                      flush=True)
    finally:
        for d in (a, b, c):
            d.stop()
        report(rows, args.max_candidates)


def report(rows, max_candidates):
    print(f"\nTuning cost and stability (bf16; grid = every pruned candidate; descent budget "
          f"{max_candidates} candidates)")
    hdr = (f"{'problem':<26} {'cold s':>6} {'warm s':>6} | {'fresh winner':>12} {'d%':>6} | "
           f"{'descent s':>9} {'saved':>6} {'loss%':>6}")
    print(hdr)
    print("-" * len(hdr))
    differ = 0
    for r in rows:
        same = r["fresh_config"] == r["config"]
        differ += not same
        d_fresh = 100 * (r["fresh_us"] - r["us"]) / r["us"]
        loss = 100 * (r["descent_us"] - min(r["us"], r["fresh_us"])) / min(r["us"], r["fresh_us"])
        print(f"{r['op'] + ' ' + str(r['M']) + 'x' + str(r['N']):<26} {r['cold_s']:6.1f} {r['warm_s']:6.1f} | "
              f"{'same' if same else 'differs':>12} {d_fresh:6.1f} | {r['descent_s']:9.1f} "
              f"{100 * (1 - r['descent_s'] / r['cold_s']):5.0f}% {loss:6.1f}")
    print(f"winners that differ between two fresh tunes: {differ} of {len(rows)}")
    if rows:
        print(f"total: cold {sum(r['cold_s'] for r in rows):.0f} s, warm {sum(r['warm_s'] for r in rows):.0f} s, "
              f"descent {sum(r['descent_s'] for r in rows):.0f} s")


if __name__ == "__main__":
    sys.exit(main())
