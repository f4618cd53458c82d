#!/usr/bin/env python3
"""Times the norm forward template at fixed configs, from one or more template
trees, beside torch.compile: the harness behind the fixed-config tables in
bench/results/ (the files and sections marked "fixed configs"; a change to a template is
measured here, config by config, before the tuner sees it). Run on the GPU
machine:

  git worktree add /tmp/base HEAD     # or any other tree of kernel_templates
  python3 bench/norm_variant_lab.py --trees base=/tmp/base/kernel_templates,new=kernel_templates \\
      --op layernorm --shape 32768x1024 --configs "w2 xb1 ch2 pd2 c14 keep;w2 xb1 ch2 pd1 c30"

A config is "wW xbX [vV] chC pdP cK [keep] [nofull|full]": NUM_WARPS, XBLOCK,
VEC (bf16 per vector, 8 when absent), CHUNKS (of VEC), PIPELINE, CTAS_PER_SM,
X_KEEP_L2, and FULL_TILES off, or on wherever the tiling is exact (beyond the
tuner's pd1 and 2 KB rows). Where the tree's template has FULL_TILES it is otherwise
derived as the tuner derives it; always persistent, bf16, with weight
(and bias for LayerNorm). The grid is the tuner's: one CTA per row block, or
one wave of CTAS_PER_SM per SM when pipelined. Each kernel is checked against
a float64 reference (y, and mean and rstd for LayerNorm) before it is timed
exactly as bench/norm_bench.py times (CUDA graph, inputs rotated past L2,
median); TB/s by the fewest bytes (read x, w(, b), write y).
"""
import argparse
import math
import os
import re
import sys

import cupy as cp
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from norm_bench import COPY_REF_TBS, EPS, L2_BYTES, graph_time_us  # noqa: E402

CONFIG = re.compile(r"^w(\d+) xb(\d+)(?: v(1|2|4|8))? ch(\d+) pd([12]) c(\d+)( keep)?( nofull| full)?$")


def parse_config(text):
    m = CONFIG.match(text.strip())
    if not m:
        raise ValueError(f"config {text!r}: expected 'wW xbX [vV] chC pdP cK [keep] [nofull|full]'")
    warps, xb, vec, chunks, pd, ctas = (int(g or 8) for g in m.groups()[:6])
    return dict(warps=warps, xb=xb, vec=vec, chunks=chunks, pd=pd, ctas=ctas, keep=bool(m.group(7)),
                full=(m.group(8) or "").strip() or None, text=text.strip())


def kernel(tree, op, c, m, n):
    t = "ktune::bf16"
    flags = ["true" if c["keep"] else "false"]
    with open(os.path.join(tree, "norm", f"{op}_fwd.cuh")) as f:
        if "FULL_TILES" in f.read():  # trees from before 1843eff lack it
            # As tuner/norm/norm_space.cc's FullTiles: pd1, an exact tiling, rows of <= 2 KB (bf16).
            r_block = c["warps"] * 32 // c["xb"] * c["vec"] * c["chunks"]
            exact = m % c["xb"] == 0 and n == r_block
            full = {"nofull": False, "full": exact, None: exact and c["pd"] == 1 and n * 2 <= 2048}[c["full"]]
            flags.append("true" if full else "false")
    params = f"{c['warps']}, {c['xb']}, {c['vec']}, {c['chunks']}, true, {c['pd']}, {', '.join(flags)}, {c['ctas']}"
    if op == "rmsnorm":
        expr = f"ktune::rmsnorm_fwd<{t}, {t}, {t}, true, {params}>"
    else:
        expr = f"ktune::layernorm_fwd<{t}, {t}, {t}, true, true, {params}>"
    module = cp.RawModule(code=f'#include "norm/{op}_fwd.cuh"\n',
                          options=("-std=c++17", "--gpu-architecture=sm_90", f"-I{tree}"), name_expressions=[expr])
    return module.get_function(expr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", required=True, help="NAME=DIR[,NAME=DIR...]: kernel_templates directories")
    ap.add_argument("--op", choices=["rmsnorm", "layernorm"], required=True)
    ap.add_argument("--shape", required=True, help="MxN")
    ap.add_argument("--configs", required=True, help="';'-separated configs")
    ap.add_argument("--no-peer", action="store_true", help="skip torch.compile max-autotune")
    ap.add_argument("--y", choices=["rotate", "fixed", "alloc"], default="rotate",
                    help="where our y goes: one buffer per input set (default), always the same one, or "
                         "torch.empty_like per call (as a torch.compile peer's output comes from the allocator)")
    args = ap.parse_args()
    trees = {}
    for t in args.trees.split(","):
        name, _, path = t.partition("=")
        if not name or not os.path.isfile(os.path.join(path, "norm", f"{args.op}_fwd.cuh")):
            ap.error(f"--trees {t!r}: expected NAME=DIR, DIR a kernel_templates tree with norm/{args.op}_fwd.cuh")
        trees[name] = path
    shape = re.fullmatch(r"(\d+)x(\d+)", args.shape.lower())
    if not shape or int(shape[1]) < 1 or int(shape[2]) < 1:
        ap.error(f"--shape {args.shape!r}: expected MxN with M, N >= 1")
    m, n = int(shape[1]), int(shape[2])
    try:
        configs = [parse_config(c) for c in args.configs.split(";")]
    except ValueError as e:
        ap.error(f"--configs: {e}")
    for c in configs:
        r_block = c["warps"] * 32 // c["xb"] * c["vec"] * c["chunks"]
        if n % c["vec"] != 0 or r_block < n:
            ap.error(f"--configs {c['text']!r}: does not hold a whole row of {n} (a multiple of vec) in registers")
        if c["full"] == "full" and not (m % c["xb"] == 0 and n == r_block):
            ap.error(f"--configs {c['text']!r}: 'full' needs M a multiple of xb and N == the row block {r_block}")

    ln = args.op == "layernorm"
    sets = max(1, math.ceil(3 * L2_BYTES / (2 * m * n * 2)))
    xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 2 + 3 for _ in range(sets)]
    ys = [torch.empty_like(xs[0]) for _ in range(sets)]
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.5 + 1
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1 if ln else None
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    x0 = xs[0].double()
    if ln:
        ref = F.layer_norm(x0, (n,), w.double(), b.double(), EPS)
        mean_ref, rstd_ref = x0.mean(-1), torch.rsqrt(x0.var(-1, unbiased=False) + EPS)
    else:
        ref = F.rms_norm(x0, (n,), w.double(), EPS)
        mean_ref, rstd_ref = None, torch.rsqrt(x0.pow(2).mean(-1) + EPS)
    byts = 2 * m * n * 2 + n * 2 * (2 if ln else 1)
    rows = []

    if not args.no_peer:
        fn = (lambda x: F.layer_norm(x, (n,), w, b, EPS)) if ln else (lambda x: F.rms_norm(x, (n,), w, EPS))
        f = torch.compile(fn, dynamic=False, mode="max-autotune-no-cudagraphs")
        with torch.no_grad():
            f(xs[0])
            rows.append(("torch.compile max-autotune", graph_time_us(lambda i: f(xs[i]), sets), None))
            # Where the peer's outputs land inside a captured graph (the allocator's choice).
            ptrs = set()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(2 * sets):
                    ptrs.add(f(xs[i % sets]).data_ptr())
            print(f"peer outputs in a captured graph of {2 * sets} calls: {len(ptrs)} distinct address(es)")
            del g

    for c in configs:
        for name, tree in trees.items():
            k = kernel(tree, args.op, c, m, n)
            row_blocks = (m + c["xb"] - 1) // c["xb"]
            grid = row_blocks if c["pd"] == 1 else min(row_blocks, 132 * c["ctas"])

            def go(i, k=k, c=c, grid=grid, where=args.y):
                y = ys[0] if where == "fixed" else torch.empty_like(xs[i]) if where == "alloc" else ys[i]
                a = [xs[i].data_ptr(), w.data_ptr()] + ([b.data_ptr()] if ln else []) + [y.data_ptr()]
                a += [mean.data_ptr()] if ln else []
                a = [cp.uint64(p) for p in a + [rstd.data_ptr()]] + [cp.int32(m), cp.int32(n), cp.float32(EPS)]
                with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                    k((grid,), (c["warps"] * 32,), tuple(a))

            ys[0].fill_(float("nan"))
            rstd.fill_(float("nan"))
            go(0, where="rotate")  # the check reads ys[0], poisoned above
            torch.cuda.synchronize()
            err = (ys[0].double() - ref).abs().max().item()
            rstd_err = ((rstd.double() - rstd_ref).abs() / rstd_ref).max().item()
            mean_err = (mean.double() - mean_ref).abs().max().item() if ln else 0.0
            ok = err < 0.0625 and rstd_err < 1e-4 and mean_err < 1e-3  # y is bf16: one ulp at |y| < 16
            us = graph_time_us(go, sets) if ok else float("nan")
            rows.append((f"{c['text']} [{name}]", us, f"max|dy| {err:.3g} rstd {rstd_err:.1e}" + ("" if ok else " WRONG")))

    print(f"{args.op} forward {m} x {n}, bf16; TB/s by the fewest bytes; % of {COPY_REF_TBS} TB/s")
    for label, us, check in rows:
        tbs = byts / us / 1e6
        print(f"{label:<36} {us:8.1f} us {tbs:5.2f} TB/s {tbs / COPY_REF_TBS * 100:5.1f}%  {check or ''}")


if __name__ == "__main__":
    main()
