#!/usr/bin/env python3
"""Norm kernels on the GPU: ktune's tuned answers against PyTorch eager,
torch.compile (default) and torch.compile(mode='max-autotune-no-cudagraphs'),
on the same inputs, timed the same way, in one run.

For each (op, pass, shape) a running ktuned tunes the problem (the cold tune is
timed), then the winner is fetched with `ktune get --policy cached --cubin-out`
and launched from its recipe alone (CuPy loads the cubin; lowered names, grids,
blocks, params and workspace size come from the recipe), as a compiler
frontend would. Every implementation is checked against an fp32 reference
before it is timed; outputs are poisoned with NaN first.

Timing, the same for everyone: a CUDA graph of K calls rotating input sets that
together exceed 3x the 60 MB L2, replayed many times; median per call. PyTorch
backward cannot be captured apart from its forward, so a peer's backward time
is graph(forward + backward) - graph(forward), both captured the same way.
Outputs, the same for everyone since 4bddd4b: each timed call of ours takes
what it writes (y, mean, rstd; dx, dw, db and the workspace) from PyTorch's
caching allocator, as a peer's call does. Before, ours wrote into one buffer
per input set, while a peer's output, freed before its next call, may come
back at one address (the allocator's reuse; not checked). At RMSNorm 4096 x
4096 (64 MB a call) ours ran 1-2% faster from the allocator than rotating
(bench/results/2026-11-30-norms-gemm-4bddd4b.md, "What max-autotune runs at
RMSNorm 4096 x 4096, and where the outputs go").

Bytes (fewest): forward reads x, w(, b) and writes y; backward reads x, dy, w
and writes dx, dw(, db). TB/s = bytes / time.

The main table's forward is ours writing mean/rstd (for the backward) against
the peers' forward on tensors that need no grad, which write neither. A second
table compares like with like both ways: ours writing them against the peers'
training forward (tensors that need grad), and ours with null mean/rstd (the
recipe's inference form) against the peers' plain forward.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import warnings

import copy
import ctypes

import cupy as cp
import torch
from cuda.bindings import driver as cu
import torch.nn.functional as F

from run_info import run_info

warnings.filterwarnings("ignore", category=DeprecationWarning)

SHAPES = [(32768, 1024), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 2048),
          (4096, 4096), (4096, 5120), (16384, 12288)]
# --shapes cliff: issue 3's non-power-of-two row lengths beside their
# neighbouring powers of two, at one M, to show there is no performance cliff.
CLIFF_SHAPES = [(8192, n) for n in (2048, 3000, 4096, 5120, 6144, 8192, 12288, 14336, 16384)]
# Issue 34's inference shapes: decode steps (M = 1-256 tokens) at two hidden
# sizes, and Qwen3-style per-head q/k norms (N = 128, M = tokens x 32 heads).
DECODE_SHAPES = [(m, n) for m in (1, 4, 16, 64, 256) for n in (4096, 8192)]
QK_SHAPES = [(8192 * 32, 128), (64 * 32, 128)]
SHAPE_SETS = {"all": SHAPES, "cliff": CLIFF_SHAPES, "decode": DECODE_SHAPES, "qk": QK_SHAPES,
              "issue34": SHAPES + DECODE_SHAPES + QK_SHAPES}
L2_BYTES = 60 << 20
EPS = 1e-6
COPY_REF_TBS = 4.27
PEERS = ("eager", "compile", "compile_ma")
# Optional peers, timed when --peers names them and their package imports
# (carried as wheels, bench/run_python_h200.sh): Liger-Kernel's Triton norms
# and Quack's CuTe-DSL norms. A peer that does not import is dropped with its
# reason printed, so a run without the wheels still times the others.
OPTIONAL_PEERS = ("liger", "quack")


def parse_shapes(text):
    """--shapes: a named set (SHAPE_SETS) or MxN[,MxN...]; None if malformed."""
    if text in SHAPE_SETS:
        return list(SHAPE_SETS[text])
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in text.split(",")]
    except ValueError:
        return None
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        return None
    return shapes


def quack_layernorm(fwd, bwd):
    """Quack's LayerNorm kernels as fn(x, w, b) with a backward. The casts of
    w and b to fp32 (N elements each, kernels of their own) are counted in
    Quack's time: the bench's weights are bf16, as a model's are."""
    import torch as t

    class QuackLayerNorm(t.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            y, rstd, mean = fwd(x, w.float(), b.float() if b is not None else None, eps=EPS, return_rstd=True,
                                return_mean=True)
            ctx.save_for_backward(x, w, rstd, mean)
            ctx.has_bias = b is not None
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, rstd, mean = ctx.saved_tensors
            dx, dw, db = bwd(x, w, dy.contiguous(), rstd, mean, has_bias=ctx.has_bias)
            return dx, dw, db

    return lambda x, w, b: QuackLayerNorm.apply(x, w, b)


def optional_peer_fn(name, op):
    """(fn(x, w, b), None) for an optional peer, or (None, why) when it cannot run."""
    try:
        if name == "liger":
            if op == "rmsnorm":
                from liger_kernel.ops.rms_norm import LigerRMSNormFunction
                # in_place=False: Liger's default writes dx into dy, which
                # would change the dy every later peer is verified on.
                return (lambda x, w, b: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)), None
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            return (lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, EPS)), None
        if name == "quack":
            if op == "rmsnorm":
                from quack.rmsnorm import rmsnorm
                return (lambda x, w, b: rmsnorm(x, w, eps=EPS)), None
            # quack-kernels 0.6.5 has no autograd LayerNorm, only
            # layernorm_fwd/layernorm_bwd (fp32 weight and bias): wrap them.
            from quack.rmsnorm import layernorm_bwd, layernorm_fwd
            return quack_layernorm(layernorm_fwd, layernorm_bwd), None
    except Exception as e:  # an import or API mismatch: report it, time the rest
        return None, f"{type(e).__name__}: {e}"
    return None, f"unknown peer {name}"


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def graph_time_us(launch, sets, per_graph=None, replays=40):
    """Median per-call time of `launch(i)` captured K times in one CUDA graph."""
    per_graph = per_graph or max(2 * sets, 16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            launch(i % sets)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            launch(i % sets)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        samples.append(s.elapsed_time(e) * 1e3 / per_graph)
    del graph
    return statistics.median(samples)


def copy_ceiling_tbs():
    """Device copy of 1 GiB, bytes read + written. Per-copy events (a copy
    takes ~0.5 ms, far above event resolution): replaying ten 1 GiB copies in
    a graph measured 2.76 TB/s on 2026-11-29, against 4.22-4.27 by events."""
    n = 1 << 30
    a = torch.empty(n // 4, dtype=torch.float32, device="cuda").uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    samples = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        samples.append(s.elapsed_time(e) * 1e3)
    return 2 * n / (statistics.median(samples) * 1e-6) / 1e12


class Recipe:
    """A tuned answer launched from its recipe: every kernel, in order."""

    def __init__(self, answer, cubin_path):
        recipe = answer["recipe"]
        self.module = cp.RawModule(path=cubin_path)
        self.kernels = []
        for k in recipe["kernels"]:
            function = self.module.get_function(k["lowered_name"])
            smem = int(k["dynamic_smem_bytes"])
            if smem > 0:  # the recipe's launch contract (proto KernelLaunch)
                function.max_dynamic_shared_size_bytes = smem
            self.kernels.append((function, tuple(int(g) for g in k["grid"]), tuple(int(b) for b in k["block"]),
                                 smem, list(k["params"]), bool(k.get("programmatic_dependent", False))))
        self.workspace_bytes = int(recipe.get("workspace_bytes", 0))

    def ordinary(self):
        """The same kernels launched the ordinary way, none as a programmatic dependent."""
        other = copy.copy(self)
        other.kernels = [k[:5] + (False,) for k in self.kernels]
        return other

    def __call__(self, values):
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            for function, grid, block, smem, params, dependent in self.kernels:
                args = []
                for p in params:
                    v = values[p]  # a KeyError names a parameter this bench does not know
                    if isinstance(v, torch.Tensor):
                        args.append(cp.uint64(v.data_ptr()))
                    elif v is None:
                        args.append(cp.uint64(0))
                    elif isinstance(v, float):
                        args.append(cp.float32(v))
                    else:
                        args.append(cp.int32(v))
                if dependent:
                    launch_programmatic_dependent(function, grid, block, smem, args, stream.ptr)
                else:
                    function(grid, block, tuple(args), shared_mem=smem)


def launch_programmatic_dependent(function, grid, block, smem, args, stream):
    """Launches as the recipe allows a programmatic_dependent kernel to be
    launched (proto KernelLaunch), as ktune's own measurement launches it:
    with programmatic stream serialization, so it may start during the
    previous kernel's tail (it waits for that kernel's results itself)."""
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    config.hStream = cu.CUstream(stream)
    config.attrs = [attr]
    config.numAttrs = 1
    kinds = {cp.uint64: ctypes.c_void_p, cp.int32: ctypes.c_int, cp.float32: ctypes.c_float}
    values = tuple(int(a) if type(a) is not cp.float32 else float(a) for a in args)
    types = tuple(kinds[type(a)] for a in args)
    handle = function.kernel.ptr  # RawModule.get_function's RawKernel holds the loaded CUfunction
    (err,) = cu.cuLaunchKernelEx(config, cu.CUfunction(handle), (values, types), 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent): {err}")


def rel_err(got, want):
    if torch.isnan(got).any():
        raise RuntimeError("output has NaN (unwritten or wrong)")
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def torch_fn(op):
    if op == "rmsnorm":
        return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, EPS)
    return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def run_shape(args, op, m, n, ceiling):
    dt = torch.bfloat16
    has_bias = op == "layernorm"
    sets = max(1, math.ceil(3 * L2_BYTES / (3 * m * n * 2)))
    xs = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)]
    dys = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)]
    w = (torch.randn(n, device="cuda", dtype=dt) * 0.5 + 1)
    b = torch.randn(n, device="cuda", dtype=dt) * 0.1 if has_bias else None
    ys = [torch.empty_like(xs[0]) for _ in range(sets)]
    dxs = [torch.empty_like(xs[0]) for _ in range(sets)]
    mean = [torch.empty(m, device="cuda", dtype=torch.float32) for _ in range(sets)]
    rstd = [torch.empty(m, device="cuda", dtype=torch.float32) for _ in range(sets)]
    dw = torch.empty(n, device="cuda", dtype=dt)
    db = torch.empty(n, device="cuda", dtype=dt) if has_bias else None

    # fp32 references and the saved statistics the backward consumes.
    xf = xs[0].float()
    if op == "rmsnorm":
        r = torch.rsqrt(xf.pow(2).mean(-1) + EPS)
        mu = torch.zeros(m, device="cuda")
        xhat = xf * r[:, None]
    else:
        mu = xf.mean(-1)
        r = torch.rsqrt(xf.var(-1, unbiased=False) + EPS)
        xhat = (xf - mu[:, None]) * r[:, None]
    for i in range(sets):
        xi = xs[i].float()
        if op == "rmsnorm":
            rstd[i].copy_(torch.rsqrt(xi.pow(2).mean(-1) + EPS))
        else:
            mean[i].copy_(xi.mean(-1))
            rstd[i].copy_(torch.rsqrt(xi.var(-1, unbiased=False) + EPS))
    y_ref = xhat * w.float() + (b.float() if has_bias else 0)
    g = dys[0].float() * w.float()
    if op == "rmsnorm":
        dx_ref = r[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    else:
        dx_ref = r[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    dw_ref = (dys[0].float() * xhat).sum(0)
    db_ref = dys[0].float().sum(0) if has_bias else None

    fwd_bytes = 2 * m * n * 2 + n * 2 * (2 if has_bias else 1)
    bwd_bytes = 3 * m * n * 2 + 2 * n * 2 + (n * 2 if has_bias else 0)
    results = {}
    base = [args.ktune, "--server", args.server]
    for pas in ("fwd", "bwd"):
        shape = [f"{op}.{pas}", "--m", str(m), "--n", str(n), "--dtype", "bf16"] + (["--bias"] if has_bias else [])
        t0 = time.time()
        sh(base + ["tune"] + shape + ["--json", "--force"])
        tune_s = time.time() - t0
        cubin = f"{args.workdir}/{op}_{pas}_{m}x{n}.cubin"
        answer = json.loads(sh(base + ["get"] + shape + ["--policy", "cached", "--json", "--cubin-out", cubin]))
        assert answer["source"] == "TUNED", answer["source"]
        recipe = Recipe(answer, cubin)
        ws = torch.empty(max(recipe.workspace_bytes, 4), device="cuda", dtype=torch.uint8)

        # The reduce kernel's P: workspace rows, one per CTA of the fused
        # kernel or per cluster of them.
        split = int(answer["config"]["norm"].get("split_size", 0))
        cluster = max(int(answer["config"]["norm"].get("cluster", 1)), 1)
        partial_rows = ((m + split - 1) // split + cluster - 1) // cluster if split > 0 else 0

        def values(i):
            return {"x": xs[i], "w": w, "b": b, "y": ys[i], "mean": mean[i] if op == "layernorm" else None,
                    "rstd": rstd[i], "dy": dys[i], "dx": dxs[i], "dw": dw, "db": db, "ws": ws,
                    "M": m, "N": n, "P": partial_rows, "eps": EPS}

        # Verify ours on set 0 (poisoned outputs first).
        if pas == "fwd":
            ys[0].fill_(float("nan"))
            recipe(values(0))
            torch.cuda.synchronize()
            errs = {"y": rel_err(ys[0], y_ref)}
        else:
            for t in (dxs[0], dw) + ((db,) if has_bias else ()):
                t.fill_(float("nan"))
            ws.fill_(255)
            recipe(values(0))
            torch.cuda.synchronize()
            errs = {"dx": rel_err(dxs[0], dx_ref), "dw": rel_err(dw, dw_ref)}
            if has_bias:
                errs["db"] = rel_err(db, db_ref)
        if max(errs.values()) > 2e-2:
            raise RuntimeError(f"ktune {op}.{pas} {m}x{n}: relative errors {errs}")

        def allocated(v):
            """v with every buffer a call writes taken from the allocator, as a peer's outputs are."""
            written = ("y", "mean", "rstd") if pas == "fwd" else ("dx", "dw", "db", "ws")
            return {k: torch.empty_like(t) if k in written and t is not None else t for k, t in v.items()}

        ours_us = graph_time_us(lambda i: recipe(allocated(values(i))), sets)
        extra = {}
        if any(k[5] for k in recipe.kernels):
            # The same kernels without programmatic dependent launches: what a
            # caller that launches them the ordinary way gets.
            plain = recipe.ordinary()
            extra["ktune_ordinary_us"] = graph_time_us(lambda i: plain(allocated(values(i))), sets)
        if pas == "fwd":
            # Inference's forward: mean and rstd not written (null pointers),
            # as a peer's forward on tensors that need no grad. Verified too.
            def no_stats(i):
                return {**values(i), "mean": None, "rstd": None}

            ys[0].fill_(float("nan"))
            recipe(no_stats(0))
            torch.cuda.synchronize()
            if rel_err(ys[0], y_ref) > 2e-2:
                raise RuntimeError(f"ktune {op}.fwd {m}x{n} without mean/rstd: relative error {rel_err(ys[0], y_ref)}")
            extra["ktune_nostats_us"] = graph_time_us(lambda i: recipe(allocated(no_stats(i))), sets)
        row = {"op": op, "pass": pas, "M": m, "N": n, "bytes": fwd_bytes if pas == "fwd" else bwd_bytes,
               "tune_s": tune_s, "config": answer["config"]["norm"],
               "kernels": len(answer["recipe"]["kernels"]), "workspace_bytes": recipe.workspace_bytes,
               "rel_err": errs, "ktune_us": ours_us, **extra}
        results[pas] = row

    # Peers, same inputs, same timing.
    fn = torch_fn(op)
    variants = {"eager": fn}
    torch._dynamo.reset()
    variants["compile"] = torch.compile(fn, dynamic=False)
    if "compile_ma" in args.peers:
        variants["compile_ma"] = torch.compile(fn, dynamic=False, mode="max-autotune-no-cudagraphs")
    for name in OPTIONAL_PEERS:
        if name in args.peers:
            f, why = optional_peer_fn(name, op)
            if f is None:
                raise RuntimeError(f"peer {name} for {op} cannot run ({why}); leave it out of --peers")
            variants[name] = f
    xg = [x.detach().clone().requires_grad_(True) for x in xs]
    wg = w.detach().clone().requires_grad_(True)
    bg = b.detach().clone().requires_grad_(True) if has_bias else None
    for name, f in variants.items():
        if name not in args.peers:
            continue
        with torch.no_grad():
            y0 = f(xs[0], w, b)
        fwd_err = rel_err(y0, y_ref)
        fwd_us = graph_time_us(lambda i: f(xs[i], w, b), sets)
        leaves = [xg[0], wg] + ([bg] if has_bias else [])
        grads = torch.autograd.grad(f(xg[0], wg, bg), leaves, dys[0])
        bwd_err = max(rel_err(grads[0], dx_ref), rel_err(grads[1], dw_ref))

        def fwd_train(i):
            return f(xg[i], wg, bg)

        def fwd_bwd(i):
            leaves = [xg[i], wg] + ([bg] if has_bias else [])
            torch.autograd.grad(f(xg[i], wg, bg), leaves, dys[i])

        train_fwd_us = graph_time_us(fwd_train, sets)
        both_us = graph_time_us(fwd_bwd, sets)
        results["fwd"][f"{name}_us"] = fwd_us
        results["fwd"][f"{name}_train_us"] = train_fwd_us  # saves what its backward needs
        results["bwd"][f"{name}_us"] = max(both_us - train_fwd_us, 1e-3)
        results["fwd"].setdefault("peer_err", {})[name] = fwd_err
        results["bwd"].setdefault("peer_err", {})[name] = bwd_err
    for pas in ("fwd", "bwd"):
        r = results[pas]
        r["ktune_tbs"] = r["bytes"] / (r["ktune_us"] * 1e-6) / 1e12
        for p in args.peers:
            r[f"{p}_tbs"] = r["bytes"] / (r[f"{p}_us"] * 1e-6) / 1e12
        if args.peers:  # --peers "" times ktune alone
            r["best_peer"] = max(args.peers, key=lambda p: r[f"{p}_tbs"])
            r["vs_best_peer"] = r["ktune_tbs"] / r[f"{r['best_peer']}_tbs"]
        r["pct_ceiling"] = 100 * r["ktune_tbs"] / COPY_REF_TBS
        r["pct_inrun_copy"] = 100 * r["ktune_tbs"] / ceiling
        if "ktune_nostats_us" in r:
            r["ktune_nostats_tbs"] = r["bytes"] / (r["ktune_nostats_us"] * 1e-6) / 1e12
        for p in args.peers:
            if f"{p}_train_us" in r:
                r[f"{p}_train_tbs"] = r["bytes"] / (r[f"{p}_train_us"] * 1e-6) / 1e12
    return [results["fwd"], results["bwd"]]


def cfg_text(c):
    s = f"xb{c['x_block']} rb{c['r_block']} w{c['num_warps']} v{c['vec']} pd{c['pipeline_depth']}"
    s += " pers" if c["persistent"] else " loop"
    if c.get("split_size"):
        s += f" sp{c['split_size']}"
    if int(c.get("cluster", 1)) > 1:
        s += f" cl{c['cluster']}"
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktune", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--ops", default="rmsnorm,layernorm")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--shapes", default="all",
                    help="all (the training shapes), cliff (non-powers of two and their neighbours), "
                         "decode (M 1-256 x N 4096, 8192), qk (N = 128 per-head norms), issue34 (all three), "
                         "or e.g. 32768x1024,4096x5120")
    ap.add_argument("--commit", help="the commit measured, for the JSON (default: git rev-parse --short HEAD)")
    args = ap.parse_args()
    args.peers = [p for p in args.peers.split(",") if p]
    shapes = parse_shapes(args.shapes)
    if shapes is None:
        ap.error(f"--shapes {args.shapes!r}: expected {', '.join(SHAPE_SETS)}, or MxN[,MxN...] with M, N >= 1")
    unknown = [p for p in args.peers if p not in PEERS + OPTIONAL_PEERS]
    if unknown:
        ap.error(f"--peers: unknown {unknown}; known: {', '.join(PEERS + OPTIONAL_PEERS)}")
    torch.manual_seed(0)
    ceiling = copy_ceiling_tbs()
    info = run_info(args.commit)
    rows = []
    for op in args.ops.split(","):
        for m, n in shapes:
            t0 = time.time()
            rows += run_shape(args, op, m, n, ceiling)
            print(f"  {op} {m}x{n} done in {time.time() - t0:.0f} s", flush=True)
            torch.cuda.empty_cache()
            # Written after every shape: a run cut short keeps what it measured.
            with open(args.out, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **info, "copy_tbs": ceiling,
                           "peers": args.peers, "rows": rows}, f, indent=1)

    print(f"\nbf16 norms on {torch.cuda.get_device_name()}; copy ceiling in this run {ceiling:.2f} TB/s "
          f"(%ceil uses {COPY_REF_TBS}); CUDA-graph replay, median per call; TB/s by fewest bytes")
    peer_hdr = " ".join(f"{p:>10}" for p in args.peers)
    hdr = f"{'op':<13} {'M x N':>13} {'ktune config':<32} {'us':>7} {'TB/s':>5} {'%ceil':>5} | {peer_hdr} | {'vs best':>7} | tune s"
    print(hdr)
    print("-" * len(hdr))
    geo = {"fwd": [], "bwd": []}
    for r in rows:
        peers = " ".join(f"{r[p + '_tbs']:10.2f}" for p in args.peers)
        vs = f"{r['vs_best_peer']:6.3f}x" if "vs_best_peer" in r else "   -   "
        if "vs_best_peer" in r:
            geo[r["pass"]].append(r["vs_best_peer"])
        print(f"{r['op'] + '.' + r['pass']:<13} {r['M']:>6} x {r['N']:<5} {cfg_text(r['config']):<32} "
              f"{r['ktune_us']:7.1f} {r['ktune_tbs']:5.2f} {r['pct_ceiling']:5.1f} | {peers} | "
              f"{vs} | {r['tune_s']:5.1f}")
    for pas, v in geo.items():
        if v:
            print(f"geomean vs best peer, {pas}: {math.exp(sum(math.log(x) for x in v) / len(v)):.3f}x "
                  f"(min {min(v):.3f}x over {len(v)} rows)")
    for line in like_for_like_lines(rows, args.peers):
        print(line)
    for line in ordinary_launch_lines(rows):
        print(line)
    for line in cliff_lines(rows):
        print(line)


def like_for_like_lines(rows, peers):
    """The forward both ways a framework runs it: for training, ours writing
    mean/rstd against the peers' forward on tensors that need grad (which save
    what their backward needs); for inference, ours without them against the
    peers' forward on plain tensors (the main table's peer columns)."""
    fwd = [r for r in rows if r["pass"] == "fwd" and "ktune_nostats_tbs" in r]
    if not fwd or not peers:
        return []
    lines = ["", "forward, like for like (TB/s, % of the 4.27 ceiling; vs the best peer of the same kind)",
             f"{'op':<13} {'M x N':>13} | {'training: ours':>14} {'%ceil':>5} {'peer':>5} {'vs':>7} | "
             f"{'inference: ours':>15} {'%ceil':>5} {'peer':>5} {'vs':>7}"]
    for r in fwd:
        train_peer = max(r[f"{p}_train_tbs"] for p in peers)
        infer_peer = max(r[f"{p}_tbs"] for p in peers)
        ours_t, ours_i = r["ktune_tbs"], r["ktune_nostats_tbs"]
        lines.append(f"{r['op'] + '.fwd':<13} {r['M']:>6} x {r['N']:<5} | {ours_t:14.2f} "
                     f"{100 * ours_t / COPY_REF_TBS:5.1f} {train_peer:5.2f} {ours_t / train_peer:6.3f}x | "
                     f"{ours_i:15.2f} {100 * ours_i / COPY_REF_TBS:5.1f} {infer_peer:5.2f} {ours_i / infer_peer:6.3f}x")
    return lines


def ordinary_launch_lines(rows):
    """Ours as the recipe allows (programmatic dependent launches: each call's
    launch overlaps the tail of the kernel before it, here the previous call's)
    against the same kernels launched the ordinary way, as the peers are."""
    both = [r for r in rows if "ktune_ordinary_us" in r]
    if not both:
        return []
    lines = ["", "programmatic dependent launches (the main table) against ordinary launches of the same kernels",
             f"{'op':<13} {'M x N':>13} | {'ordinary us':>11} {'TB/s':>5} {'%ceil':>5} | {'programmatic us':>15} | gain"]
    for r in both:
        tbs = r["bytes"] / (r["ktune_ordinary_us"] * 1e-6) / 1e12
        lines.append(f"{r['op'] + '.' + r['pass']:<13} {r['M']:>6} x {r['N']:<5} | {r['ktune_ordinary_us']:11.1f} "
                     f"{tbs:5.2f} {100 * tbs / COPY_REF_TBS:5.1f} | {r['ktune_us']:15.1f} | "
                     f"{r['ktune_ordinary_us'] / r['ktune_us']:5.3f}x")
    return lines


def cliff_lines(rows):
    """For every row whose N is not a power of two, its TB/s against the rows
    of the same op, pass and M at the neighbouring powers of two, when the run
    has them: a cliff is a row far below the slower neighbour."""
    by_key = {(r["op"], r["pass"], r["M"], r["N"]): r["ktune_tbs"] for r in rows}
    lines = []
    for (op, pas, m, n), tbs in sorted(by_key.items()):
        if n & (n - 1) == 0:
            continue
        lower = 1 << (n.bit_length() - 1)
        lo, hi = by_key.get((op, pas, m, lower)), by_key.get((op, pas, m, 2 * lower))
        if lo is None or hi is None:
            continue
        if not lines:
            lines.append("\nnon-power-of-two N against its neighbouring powers of two (TB/s; ratio to the slower)")
        lines.append(f"{op + '.' + pas:<13} {m:>6} x {n:<5} {tbs:5.2f} | N={lower}: {lo:5.2f}  N={2 * lower}: {hi:5.2f}"
                     f" | {tbs / min(lo, hi):5.3f}x")
    return lines


if __name__ == "__main__":
    sys.exit(main())
