#!/usr/bin/env python3
"""Which kernels a torch.compile peer launches for a norm forward, with their
grids, blocks and registers, read from a torch profiler trace: the way to
learn what a peer's autotuner chose (a Triton cache directory holds every
config it tried, not only the one it runs). Run on the GPU machine:

  python3 bench/peer_kernels.py --op layernorm --shape 32768x1024

A profiler trace read this way showed that max-autotune's LayerNorm forward
at 32768x1024 is one row per 2-warp CTA, a geometry our template has
(bench/results/2026-11-29-layernorm-cliff-and-max-autotune.md, "LayerNorm
forward 32768x1024: what max-autotune runs").
"""
import argparse
import json
import os
import re
import tempfile

import torch
import torch.nn.functional as F

EPS = 1e-6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=["rmsnorm", "layernorm"], required=True)
    ap.add_argument("--shape", required=True, help="MxN")
    ap.add_argument("--mode", default="max-autotune-no-cudagraphs",
                    help="torch.compile mode (default: the one PyTorch's norm benchmarks use)")
    args = ap.parse_args()
    shape = re.fullmatch(r"(\d+)x(\d+)", args.shape.lower())
    if not shape or int(shape[1]) < 1 or int(shape[2]) < 1:
        ap.error(f"--shape {args.shape!r}: expected MxN with M, N >= 1")
    m, n = int(shape[1]), int(shape[2])
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    if args.op == "layernorm":
        fn = lambda t: F.layer_norm(t, (n,), w, b, EPS)  # noqa: E731
    else:
        fn = lambda t: F.rms_norm(t, (n,), w, EPS)  # noqa: E731
    f = torch.compile(fn, dynamic=False, mode=args.mode)
    with torch.no_grad():
        for _ in range(3):  # compile, autotune, warm up
            f(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                f(x)
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    seen = set()
    print(f"{args.op} forward {m} x {n}, torch.compile mode={args.mode}")
    for e in events:
        if e.get("cat") != "kernel" or e["name"] in seen:
            continue
        seen.add(e["name"])
        a = e.get("args", {})
        print(f"{e['name']}: {e.get('dur')} us, grid {a.get('grid')}, block {a.get('block')}, "
              f"{a.get('registers per thread')} registers, {a.get('shared memory')} B shared")


if __name__ == "__main__":
    main()
