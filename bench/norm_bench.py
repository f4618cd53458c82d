#!/usr/bin/env python3
"""Norm kernels on the GPU: ktune's tuned answers against PyTorch eager,
torch.compile (default) and torch.compile(mode='max-autotune-no-cudagraphs'),
Liger-Kernel and Quack, on the same inputs, timed the same way, in one run.

For each case (op, dtype, shape) a running ktuned tunes the problem (the cold
tune is timed; an entry the daemon already holds, from an earlier call on the
same store, is reused unless --force-tune), then the winner is fetched with
`ktune get --policy cached --cubin-out` and launched from its recipe alone
(CuPy loads the cubin; lowered names, grids, blocks, params and workspace size
come from the recipe), as a compiler frontend would. Every implementation is
checked against an fp32 reference before it is timed; outputs are poisoned
with NaN first. A peer that cannot run a case (its package does not import,
the dtype or shape is refused, its output is wrong) is reported "n/a" with the
reason in the JSON (row["na"]), and the run goes on.

Ops: rmsnorm and layernorm (forward and backward), and rmsnorm_add, the fused
residual add (ktune's NormProblem residual: h = x + r written to r in place,
y = rmsnorm(h) * w; forward only, as vLLM's fused_add_rms_norm), against eager
and torch.compile of the same expression, Liger's fused-add RMSNorm and
Quack's rmsnorm_fwd with a residual (both write the new residual to a fresh
tensor: the same bytes).

Timing, the same for everyone: a CUDA graph of K calls rotating input sets that
together exceed 3x the 60 MB L2 (--max-sets caps them; the JSON records the
count), replayed many times; median per call. PyTorch backward cannot be
captured apart from its forward, so a peer's backward time is graph(forward +
backward) - graph(forward), both captured the same way. Outputs, the same for
everyone since 4bddd4b: each timed call of ours takes what it writes (y, mean,
rstd; dx, dw, db and the workspace) from PyTorch's caching allocator, as a
peer's call does (bench/results/2026-11-30-norms-gemm-4bddd4b.md, "What
max-autotune runs at RMSNorm 4096 x 4096, and where the outputs go").

Launch floor: the same number of empty kernels, with our recipe's grids,
blocks and launch path (CuPy RawModule, programmatic dependent where the
recipe's kernel is), timed in the same graph replay: "floor us" and ours over
it. Latency-bound rows (M * N <= 2M elements: decode, small q/k) are judged
by it (issue 34: within 1.3x).

Bytes (fewest): forward reads x, w(, b) and writes y; backward reads x, dy, w
and writes dx, dw(, db); rmsnorm_add reads x, r, w and writes r, y. TB/s =
bytes / time.

The main table's forward is ours writing mean/rstd (for the backward) against
the peers' forward on tensors that need no grad, which write neither. A second
table compares like with like both ways: ours writing them against the peers'
training forward (tensors that need grad), and ours with null mean/rstd (the
recipe's inference form) against the peers' plain forward. rmsnorm_add's main
figure is ours without rstd (its inference form; with rstd in the JSON).

Splitting a long run (each device call <= 600 s): --ops, --shapes, --dtypes
pick the cases; the JSON is written after every case; --resume skips the cases
already in --out; --budget-s starts no case past that many seconds and prints
the table of what it has.
"""
import argparse
import json
import math
import os
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
# Issue 34's fp16 rows: three of the training shapes (one per size class).
FP16_SHAPES = [(32768, 4096), (16384, 8192), (4096, 4096)]
SHAPE_SETS = {"all": SHAPES, "cliff": CLIFF_SHAPES, "decode": DECODE_SHAPES, "qk": QK_SHAPES,
              "issue34": SHAPES + DECODE_SHAPES + QK_SHAPES, "fp16": FP16_SHAPES,
              "inference": DECODE_SHAPES + QK_SHAPES}
L2_BYTES = 60 << 20
EPS = 1e-6
COPY_REF_TBS = 4.27
OPS = ("rmsnorm", "layernorm", "rmsnorm_add")
# torch dtype attribute names, resolved at run time (the CPU test stubs torch).
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
PEERS = ("eager", "compile", "compile_ma")
# Optional peers, timed when --peers names them and their package imports
# (carried as wheels, bench/run_norm_issue34_h200.sh): Liger-Kernel's Triton norms
# and Quack's CuTe-DSL norms. A peer that does not import is "n/a" with its
# reason, so a run without the wheels still times the others.
OPTIONAL_PEERS = ("liger", "quack")
# Issue 34's targets. Bandwidth, % of COPY_REF_TBS: (at M*N >= 32M, at the
# 4096x4096 class 16M <= M*N < 32M); rows under 16M elements have none.
BW_TARGETS = {"fwd": (97.0, 90.0), "bwd": (92.0, 85.0)}
LATENCY_ELEMS = 256 * 8192  # at or under: latency-bound, judged against the launch floor
FLOOR_TARGET = 1.3


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


def torch_dtype(name):
    return getattr(torch, DTYPES[name])


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
    """(fn, None) for an optional peer, or (None, why) when it cannot run.
    rmsnorm, layernorm: fn(x, w, b) -> y, with a backward. rmsnorm_add:
    fn(x, r, w) -> (y, h), h the updated residual (a fresh tensor for both)."""
    try:
        if name == "liger":
            if op == "rmsnorm":
                from liger_kernel.ops.rms_norm import LigerRMSNormFunction
                # in_place=False: Liger's default writes dx into dy, which
                # would change the dy every later peer is verified on.
                return (lambda x, w, b: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)), None
            if op == "rmsnorm_add":
                from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
                return (lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)), None
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            return (lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, EPS)), None
        if name == "quack":
            if op == "rmsnorm":
                from quack.rmsnorm import rmsnorm
                return (lambda x, w, b: rmsnorm(x, w, eps=EPS)), None
            if op == "rmsnorm_add":
                # rmsnorm_fwd(x, w, residual=r) -> (y, x + r, rstd or None).
                from quack.rmsnorm import rmsnorm_fwd
                return (lambda x, r, w: rmsnorm_fwd(x, w, residual=r, eps=EPS)[:2]), None
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


def graph_time_us(launch, sets, per_graph=None, replays=None):
    """Median per-call time of `launch(i)` captured K times in one CUDA graph.
    Replays: 40, fewer (down to 8) when one graph holds many calls (tiny
    shapes rotate thousands of sets), each replay's figure already being a
    mean over them."""
    per_graph = per_graph or max(2 * sets, 16)
    replays = replays or max(8, min(40, 1280 // per_graph))
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


# A streaming copy with 16-byte accesses and four loads in flight per
# thread, one wave of CTAs: the ceiling's second measure beside torch's copy_,
# which on an H100 ran below our norms (2.91-2.99 TB/s against 3.03,
# bench/results/2026-12-07-norm-issue34-h100-03cafc9.md).
_COPY16 = r"""
extern "C" __global__ void copy16(const uint4* __restrict__ a, uint4* __restrict__ b, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v0 = a[i], v1 = a[i + stride], v2 = a[i + 2 * stride], v3 = a[i + 3 * stride];
    b[i] = v0; b[i + stride] = v1; b[i + 2 * stride] = v2; b[i + 3 * stride] = v3;
  }
  for (; i < n; i += stride) b[i] = a[i];
}
"""

COPY_METHODS = {}  # name -> TB/s of the last copy_ceiling_tbs()


def _time_copy(run, nbytes):
    for _ in range(3):
        run()
    samples = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        e.synchronize()
        samples.append(s.elapsed_time(e) * 1e3)
    return 2 * nbytes / (statistics.median(samples) * 1e-6) / 1e12


def copy_ceiling_tbs():
    """The fastest device copy of 1 GiB this run measures, bytes read +
    written: torch's copy_ and our 16-byte streaming kernel. Per-copy events (a
    copy takes ~0.5 ms, far above event resolution): replaying ten 1 GiB
    copies in a graph measured 2.76 TB/s on 2026-11-29, against 4.22-4.27 by
    events."""
    n = 1 << 30
    a = torch.empty(n // 4, dtype=torch.float32, device="cuda").uniform_()
    b = torch.empty_like(a)
    COPY_METHODS.clear()
    COPY_METHODS["torch copy_"] = _time_copy(lambda: b.copy_(a), n)
    kernel = cp.RawKernel(_COPY16, "copy16")
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    vectors = n // 16

    def run16():
        with stream:
            kernel((sms * 4,), (512,), (cp.uint64(a.data_ptr()), cp.uint64(b.data_ptr()), cp.int64(vectors)))

    COPY_METHODS["16-byte copy kernel"] = _time_copy(run16, n)
    if not torch.equal(a, b):
        raise RuntimeError("the 16-byte copy kernel did not copy")
    return max(COPY_METHODS.values())


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


_EMPTY_KERNEL = None


class LaunchFloor:
    """The launch floor of a recipe: one empty kernel per recipe kernel, with
    its grid and block, launched the way Recipe launches that kernel (CuPy
    RawKernel, or cuLaunchKernelEx with programmatic stream serialization),
    no shared memory and no arguments."""

    def __init__(self, recipe):
        global _EMPTY_KERNEL
        if _EMPTY_KERNEL is None:
            module = cp.RawModule(code='extern "C" __global__ void ktune_bench_empty() {}')
            _EMPTY_KERNEL = module.get_function("ktune_bench_empty")
        self.kernels = [(grid, block, dependent) for _, grid, block, _, _, dependent in recipe.kernels]

    def __call__(self, _values=None):
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            for grid, block, dependent in self.kernels:
                if dependent:
                    launch_programmatic_dependent(_EMPTY_KERNEL, grid, block, 0, [], stream.ptr)
                else:
                    _EMPTY_KERNEL(grid, block, ())


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
    (err,) = cu.cuLaunchKernelEx(config, cu.CUfunction(handle), (values, types) if args else None, 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent): {err}")


def rel_err(got, want):
    if torch.isnan(got).any():
        raise RuntimeError("output has NaN (unwritten or wrong)")
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def torch_fn(op):
    if op == "rmsnorm":
        return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, EPS)
    if op == "rmsnorm_add":
        def fused_add(x, r, w):
            r.add_(x)  # in place, as ours: the residual stream's new value
            return F.rms_norm(r, (r.shape[-1],), w, EPS), r
        return fused_add
    return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS)


class NormInputs:
    """One case's inputs, rotated past L2 (`sets` of them), the outputs ours
    writes, and fp32 references on set 0. `backward` adds dy, dx, dw(, db)
    and the forward's mean/rstd of every set; op rmsnorm_add adds the
    residuals (set 0's starting value kept in r_init: every check restores it)."""

    def __init__(self, op, m, n, dtype_name, backward=True, max_sets=0):
        dt = torch_dtype(dtype_name)
        es = torch.empty((), dtype=dt).element_size()
        self.op, self.m, self.n, self.dtype_name, self.dtype = op, m, n, dtype_name, dt
        self.has_bias = op == "layernorm"
        self.residual = op == "rmsnorm_add"
        # x, y (and dy or r) per set: 3 tensors of M x N, together >= 3x L2.
        self.sets = max(1, math.ceil(L2_BYTES / (m * n * es)))
        if max_sets:
            self.sets = min(self.sets, max_sets)
        sets = self.sets
        self.xs = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)]
        self.w = torch.randn(n, device="cuda", dtype=dt) * 0.5 + 1
        self.b = torch.randn(n, device="cuda", dtype=dt) * 0.1 if self.has_bias else None
        self.ys = [torch.empty_like(self.xs[0]) for _ in range(sets)]
        self.rs = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)] if self.residual else None
        self.r_init = self.rs[0].clone() if self.residual else None
        self.mean = [torch.empty(m, device="cuda", dtype=torch.float32) for _ in range(sets)]
        self.rstd = [torch.empty(m, device="cuda", dtype=torch.float32) for _ in range(sets)]
        self.dys = self.dxs = self.dw = self.db = None
        self.fwd_bytes = 2 * m * n * es + n * es * (2 if self.has_bias else 1)
        if self.residual:
            self.fwd_bytes = 4 * m * n * es + n * es  # reads x, r, w; writes r, y
        self.bwd_bytes = 3 * m * n * es + 2 * n * es + (n * es if self.has_bias else 0)

        xf = self.xs[0].float()
        if self.residual:  # h = x + r, added in fp32 and rounded to the dtype, as the kernel does
            xf = (xf + self.r_init.float()).to(dt).float()
            self.h_ref = xf
        if op == "layernorm":
            mu = xf.mean(-1)
            r = torch.rsqrt(xf.var(-1, unbiased=False) + EPS)
            xhat = (xf - mu[:, None]) * r[:, None]
        else:
            r = torch.rsqrt(xf.pow(2).mean(-1) + EPS)
            xhat = xf * r[:, None]
        self.y_ref = xhat * self.w.float() + (self.b.float() if self.has_bias else 0)
        if not backward:
            return
        self.dys = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)]
        self.dxs = [torch.empty_like(self.xs[0]) for _ in range(sets)]
        self.dw = torch.empty(n, device="cuda", dtype=dt)
        self.db = torch.empty(n, device="cuda", dtype=dt) if self.has_bias else None
        for i in range(sets):
            xi = self.xs[i].float()
            if op == "rmsnorm":
                self.rstd[i].copy_(torch.rsqrt(xi.pow(2).mean(-1) + EPS))
            else:
                self.mean[i].copy_(xi.mean(-1))
                self.rstd[i].copy_(torch.rsqrt(xi.var(-1, unbiased=False) + EPS))
        g = self.dys[0].float() * self.w.float()
        if op == "rmsnorm":
            self.dx_ref = r[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        else:
            self.dx_ref = r[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        self.dw_ref = (self.dys[0].float() * xhat).sum(0)
        self.db_ref = self.dys[0].float().sum(0) if self.has_bias else None


def problem_flags(op, pas, m, n, dtype_name):
    """The ktune CLI's problem arguments for a case."""
    base_op = "rmsnorm" if op == "rmsnorm_add" else op
    flags = [f"{base_op}.{pas}", "--m", str(m), "--n", str(n), "--dtype", dtype_name]
    if op == "layernorm":
        flags.append("--bias")
    if op == "rmsnorm_add":
        flags.append("--residual")
    return flags


def fetch_answer(args, shape, cubin, policy="cached"):
    """`ktune get` with the cubin written to `cubin`: the parsed JSON answer."""
    return json.loads(sh([args.ktune, "--server", args.server, "get"] + shape +
                         ["--policy", policy, "--json", "--cubin-out", cubin]))


def tuned_answer(args, shape, cubin):
    """(answer, tune seconds or None when the daemon already held a tuned
    entry, from an earlier call on the same store). --force-tune re-tunes."""
    if not getattr(args, "force_tune", False):
        try:
            answer = fetch_answer(args, shape, cubin)
            if answer.get("source") == "TUNED":
                return answer, None
        except RuntimeError:
            pass  # a miss: tune it
    cmd = [args.ktune, "--server", args.server, "tune"] + shape + ["--json", "--force"]
    if getattr(args, "tune_repetitions", 0):
        cmd += ["--repetitions", str(args.tune_repetitions)]
    t0 = time.time()
    sh(cmd)
    tune_s = time.time() - t0
    answer = fetch_answer(args, shape, cubin)
    assert answer["source"] == "TUNED", answer["source"]
    return answer, tune_s


def recipe_values(inp, answer, pas, i, stats=True):
    """The recipe's parameters for set i (Recipe's `values`)."""
    m = inp.m
    split = int(answer["config"]["norm"].get("split_size", 0))
    cluster = max(int(answer["config"]["norm"].get("cluster", 1)), 1)
    # The reduce kernel's P: workspace rows, one per CTA of the fused kernel or per cluster of them.
    partial_rows = ((m + split - 1) // split + cluster - 1) // cluster if split > 0 else 0
    v = {"x": inp.xs[i], "w": inp.w, "b": inp.b, "y": inp.ys[i],
         "mean": inp.mean[i] if inp.op == "layernorm" and stats else None,
         "rstd": inp.rstd[i] if stats else None, "residual": inp.rs[i] if inp.residual else None,
         "dresidual": None, "scale": None, "M": m, "N": inp.n, "P": partial_rows, "eps": EPS}
    v["ws"] = getattr(inp, "ws", None)
    if pas == "bwd":
        v.update({"dy": inp.dys[i], "dx": inp.dxs[i], "dw": inp.dw, "db": inp.db})
    else:
        v.update({"dy": None, "dx": None, "dw": None, "db": None})
    return v


def allocated(v, pas):
    """v with every buffer a call writes taken from the allocator, as a peer's
    outputs are (an in-place residual stays where it is)."""
    written = ("y", "mean", "rstd") if pas == "fwd" else ("dx", "dw", "db", "ws")
    return {k: torch.empty_like(t) if k in written and t is not None else t for k, t in v.items()}


def verify_ours(inp, recipe, answer, pas, stats=True, what="ktune"):
    """Runs the recipe once on set 0 with its outputs poisoned; the relative
    errors against the fp32 references, or RuntimeError past 2e-2."""
    v = recipe_values(inp, answer, pas, 0, stats)
    if pas == "fwd":
        inp.ys[0].fill_(float("nan"))
        if inp.residual:
            inp.rs[0].copy_(inp.r_init)
        recipe(v)
        torch.cuda.synchronize()
        errs = {"y": rel_err(inp.ys[0], inp.y_ref)}
        if inp.residual:
            errs["residual"] = rel_err(inp.rs[0], inp.h_ref)
    else:
        for t in (inp.dxs[0], inp.dw) + ((inp.db,) if inp.has_bias else ()):
            t.fill_(float("nan"))
        inp.ws.fill_(255)
        recipe(v)
        torch.cuda.synchronize()
        errs = {"dx": rel_err(inp.dxs[0], inp.dx_ref), "dw": rel_err(inp.dw, inp.dw_ref)}
        if inp.has_bias:
            errs["db"] = rel_err(inp.db, inp.db_ref)
    if max(errs.values()) > 2e-2:
        raise RuntimeError(f"{what} {inp.op}.{pas} {inp.dtype_name} {inp.m}x{inp.n}"
                           f"{'' if stats else ' without mean/rstd'}: relative errors {errs}")
    return errs


def time_ours(inp, recipe, answer, pas, stats=True):
    return graph_time_us(lambda i: recipe(allocated(recipe_values(inp, answer, pas, i, stats), pas)), inp.sets)


def floor_us(inp, recipe):
    """The launch floor of `recipe` (LaunchFloor), or None when it cannot be launched."""
    try:
        floor = LaunchFloor(recipe)
        return graph_time_us(lambda i: floor(), inp.sets)
    except Exception as e:  # the floor is a reference, not the measurement: report, go on
        print(f"  launch floor failed: {type(e).__name__}: {e}", flush=True)
        return None


def short_reason(e):
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:297] + "..."


def peer_variants(args, op):
    """{name: fn} for the peers --peers names, and {name: why} for those that cannot run at all."""
    fn = torch_fn(op)
    variants, na = {}, {}
    torch._dynamo.reset()
    for name in args.peers:
        if name == "eager":
            variants[name] = fn
        elif name == "compile":
            variants[name] = torch.compile(fn, dynamic=False)
        elif name == "compile_ma":
            variants[name] = torch.compile(fn, dynamic=False, mode="max-autotune-no-cudagraphs")
        else:
            f, why = optional_peer_fn(name, op)
            if f is None:
                na[name] = why
            else:
                variants[name] = f
    return variants, na


def time_peer_norm(inp, f, row_f, row_b, name):
    """A peer of rmsnorm/layernorm: verified, then its forward (no grad and
    training) and backward timed; figures go into the two rows."""
    has_bias = inp.has_bias
    xs, w, b, sets = inp.xs, inp.w, inp.b, inp.sets
    with torch.no_grad():
        y0 = f(xs[0], w, b)
    fwd_err = rel_err(y0, inp.y_ref)
    xg = [x.detach().clone().requires_grad_(True) for x in xs]
    wg = w.detach().clone().requires_grad_(True)
    bg = b.detach().clone().requires_grad_(True) if has_bias else None
    leaves = [xg[0], wg] + ([bg] if has_bias else [])
    grads = torch.autograd.grad(f(xg[0], wg, bg), leaves, inp.dys[0])
    bwd_err = max(rel_err(grads[0], inp.dx_ref), rel_err(grads[1], inp.dw_ref))
    if max(fwd_err, bwd_err) > 2e-2:
        raise RuntimeError(f"fails verification: forward rel. error {fwd_err:.3g}, backward {bwd_err:.3g}")
    fwd_us = graph_time_us(lambda i: f(xs[i], w, b), sets)

    def fwd_train(i):
        return f(xg[i], wg, bg)

    def fwd_bwd(i):
        leaves = [xg[i], wg] + ([bg] if has_bias else [])
        torch.autograd.grad(f(xg[i], wg, bg), leaves, inp.dys[i])

    train_fwd_us = graph_time_us(fwd_train, sets)
    both_us = graph_time_us(fwd_bwd, sets)
    row_f[f"{name}_us"] = fwd_us
    row_f[f"{name}_train_us"] = train_fwd_us  # saves what its backward needs
    row_b[f"{name}_us"] = max(both_us - train_fwd_us, 1e-3)
    row_f.setdefault("peer_err", {})[name] = fwd_err
    row_b.setdefault("peer_err", {})[name] = bwd_err


def time_peer_add(inp, f, row, name):
    """A peer of rmsnorm_add: y and the new residual verified, then timed."""
    with torch.no_grad():
        inp.rs[0].copy_(inp.r_init)
        y0, h0 = f(inp.xs[0], inp.rs[0], inp.w)
        errs = {"y": rel_err(y0, inp.y_ref), "residual": rel_err(h0, inp.h_ref)}
        if max(errs.values()) > 2e-2:
            raise RuntimeError(f"fails verification: rel. errors {errs}")
        row[f"{name}_us"] = graph_time_us(lambda i: f(inp.xs[i], inp.rs[i], inp.w), inp.sets)
    row.setdefault("peer_err", {})[name] = max(errs.values())


def run_case(args, op, dtype_name, m, n):
    """The rows of one case: forward and backward (rmsnorm_add: forward only)."""
    passes = ("fwd",) if op == "rmsnorm_add" else ("fwd", "bwd")
    inp = NormInputs(op, m, n, dtype_name, backward="bwd" in passes, max_sets=args.max_sets)
    results = {}
    for pas in passes:
        shape = problem_flags(op, pas, m, n, dtype_name)
        cubin = f"{args.workdir}/{op}_{dtype_name}_{pas}_{m}x{n}.cubin"
        answer, tune_s = tuned_answer(args, shape, cubin)
        recipe = Recipe(answer, cubin)
        inp.ws = torch.empty(max(recipe.workspace_bytes, 4), device="cuda", dtype=torch.uint8)
        errs = verify_ours(inp, recipe, answer, pas)
        ours_us = time_ours(inp, recipe, answer, pas)
        extra = {}
        if any(k[5] for k in recipe.kernels):
            # The same kernels without programmatic dependent launches: what a
            # caller that launches them the ordinary way gets.
            extra["ktune_ordinary_us"] = time_ours(inp, recipe.ordinary(), answer, pas, stats=op != "rmsnorm_add")
        if pas == "fwd":
            # Inference's forward: mean and rstd not written (null pointers),
            # as a peer's forward on tensors that need no grad. Verified too.
            verify_ours(inp, recipe, answer, pas, stats=False)
            extra["ktune_nostats_us"] = time_ours(inp, recipe, answer, pas, stats=False)
        if op == "rmsnorm_add":  # an inference fusion: its main figure is the form without rstd
            extra["ktune_stats_us"], ours_us = ours_us, extra.pop("ktune_nostats_us")
        floor = floor_us(inp, recipe)
        row = {"op": op, "pass": pas, "dtype": dtype_name, "M": m, "N": n,
               "bytes": inp.fwd_bytes if pas == "fwd" else inp.bwd_bytes, "sets": inp.sets,
               "tune_s": tune_s, "config": answer["config"]["norm"],
               "kernels": len(answer["recipe"]["kernels"]), "workspace_bytes": recipe.workspace_bytes,
               "rel_err": errs, "ktune_us": ours_us, **extra, "na": {}}
        if floor is not None:
            row["floor_us"] = floor
            row["floor_ratio"] = ours_us / floor
        results[pas] = row

    # Peers, same inputs, same timing. One that fails is n/a with its reason.
    variants, na = peer_variants(args, op)
    for pas in passes:
        results[pas]["na"].update(na)
    for name, f in variants.items():
        try:
            if op == "rmsnorm_add":
                time_peer_add(inp, f, results["fwd"], name)
            else:
                time_peer_norm(inp, f, results["fwd"], results["bwd"], name)
        except Exception as e:
            why = short_reason(e)
            print(f"  peer {name} n/a for {op} {dtype_name} {m}x{n}: {why}", flush=True)
            torch.cuda.synchronize()
            for pas in passes:
                results[pas]["na"][name] = why
                for k in (f"{name}_us", f"{name}_train_us"):
                    results[pas].pop(k, None)
    for pas in passes:
        finish_row(results[pas], args.peers)
    return [results[p] for p in passes]


def finish_row(r, peers, ceiling=None):
    """Throughputs, the best peer and the targets of a timed row."""
    r["ktune_tbs"] = r["bytes"] / (r["ktune_us"] * 1e-6) / 1e12
    timed = [p for p in peers if f"{p}_us" in r]
    for p in timed:
        r[f"{p}_tbs"] = r["bytes"] / (r[f"{p}_us"] * 1e-6) / 1e12
        if f"{p}_train_us" in r:
            r[f"{p}_train_tbs"] = r["bytes"] / (r[f"{p}_train_us"] * 1e-6) / 1e12
    if timed:  # --peers "" times ktune alone
        r["best_peer"] = max(timed, key=lambda p: r[f"{p}_tbs"])
        r["vs_best_peer"] = r["ktune_tbs"] / r[f"{r['best_peer']}_tbs"]
    r["pct_ceiling"] = 100 * r["ktune_tbs"] / COPY_REF_TBS
    for k in ("ktune_nostats", "ktune_stats", "ktune_ordinary"):
        if f"{k}_us" in r:
            r[f"{k}_tbs"] = r["bytes"] / (r[f"{k}_us"] * 1e-6) / 1e12
    r["target"] = target_text(r)


def target_text(r):
    """Issue 34's targets for a row: "met", or "MISSED" and which; "-" when none applies."""
    elems = r["M"] * r["N"]
    checks, missed = 0, []
    need = None
    if elems >= 32 << 20:
        need = BW_TARGETS[r["pass"]][0]
    elif elems >= 16 << 20:
        need = BW_TARGETS[r["pass"]][1]
    if need is not None:
        checks += 1
        if r["pct_ceiling"] < need:
            missed.append(f"%ceil<{need:g}")
    if "vs_best_peer" in r:
        checks += 1
        if r["vs_best_peer"] < 1.0:
            missed.append("vs best<1.0")
    if elems <= LATENCY_ELEMS and "floor_ratio" in r:
        checks += 1
        if r["floor_ratio"] > FLOOR_TARGET:
            missed.append(f"floor>{FLOOR_TARGET:g}x")
    if not checks:
        return "-"
    return "met" if not missed else "MISSED " + "; ".join(missed)


def cfg_text(c):
    s = f"xb{c['x_block']} rb{c['r_block']} w{c['num_warps']} v{c['vec']} pd{c['pipeline_depth']}"
    s += " pers" if c["persistent"] else " loop"
    if c.get("split_size"):
        s += f" sp{c['split_size']}"
    if int(c.get("cluster", 1)) > 1:
        s += f" cl{c['cluster']}"
    return s


def case_key(op, dtype_name, m, n):
    return f"{op} {dtype_name} {m}x{n}"


def write_json(args, info, ceiling, rows, not_reached, failed):
    with open(args.out + ".tmp", "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **info, "copy_tbs": ceiling,
                   "copy_methods_tbs": COPY_METHODS, "ref_tbs": COPY_REF_TBS,
                   "peers": args.peers, "max_sets": args.max_sets, "rows": rows, "not_reached": not_reached,
                   "failed": failed}, f, indent=1)
    os.replace(args.out + ".tmp", args.out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktune", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--ops", default="rmsnorm,layernorm", help=f"of {', '.join(OPS)}")
    ap.add_argument("--dtypes", default="bf16", help="bf16, fp16 (every shape in each)")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--shapes", default="all",
                    help="all (the training shapes), cliff (non-powers of two and their neighbours), "
                         "decode (M 1-256 x N 4096, 8192), qk (N = 128 per-head norms), issue34 (all three), "
                         "inference (decode and qk), fp16 (three training shapes), or e.g. 32768x1024,4096x5120")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out and skip their cases")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no case once this many seconds have passed (0: no limit); the rest are listed")
    ap.add_argument("--force-tune", action="store_true", help="re-tune problems the daemon already holds")
    ap.add_argument("--tune-repetitions", type=int, default=0, help="ktune tune --repetitions (>= 20; 0: its default)")
    ap.add_argument("--max-sets", type=int, default=0,
                    help="rotate at most this many input sets (0: as many as exceed 3x L2)")
    ap.add_argument("--no-markdown", action="store_true", help="leave out the Markdown table printed last")
    ap.add_argument("--commit", help="the commit measured, for the JSON (default: git rev-parse --short HEAD)")
    args = ap.parse_args()
    t_start = time.time()
    args.peers = [p for p in args.peers.split(",") if p]
    shapes = parse_shapes(args.shapes)
    if shapes is None:
        ap.error(f"--shapes {args.shapes!r}: expected {', '.join(SHAPE_SETS)}, or MxN[,MxN...] with M, N >= 1")
    unknown = [p for p in args.peers if p not in PEERS + OPTIONAL_PEERS]
    if unknown:
        ap.error(f"--peers: unknown {unknown}; known: {', '.join(PEERS + OPTIONAL_PEERS)}")
    ops = [o for o in args.ops.split(",") if o]
    if not ops or any(o not in OPS for o in ops):
        ap.error(f"--ops {args.ops!r}: expected some of {', '.join(OPS)}")
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not dtypes or any(d not in DTYPES for d in dtypes):
        ap.error(f"--dtypes {args.dtypes!r}: expected some of {', '.join(DTYPES)}")
    if args.tune_repetitions and args.tune_repetitions < 20:
        ap.error("--tune-repetitions: ktune tune takes 20 or more")
    torch.manual_seed(0)
    ceiling = copy_ceiling_tbs()
    global COPY_REF_TBS
    if "H200" not in torch.cuda.get_device_name():
        # 4.27 TB/s is the H200's copy; on another GPU the targets are taken against this run's own copy.
        COPY_REF_TBS = ceiling
    info = run_info(args.commit)
    rows, failed = [], {}
    if args.resume and os.path.exists(args.out):
        old = json.load(open(args.out))
        rows = old.get("rows", [])
        print(f"  resuming: {len(rows)} rows already in {args.out}", flush=True)
    done = {case_key(r["op"], r.get("dtype", "bf16"), r["M"], r["N"]) for r in rows}
    cases = [(op, d, m, n) for op in ops for d in dtypes for m, n in shapes if case_key(op, d, m, n) not in done]
    not_reached, longest = [], 0.0
    for idx, (op, d, m, n) in enumerate(cases):
        elapsed = time.time() - t_start
        if args.budget_s and elapsed + longest > args.budget_s:
            not_reached = [case_key(*c) for c in cases[idx:]]
            print(f"  budget: {elapsed:.0f} s spent, {len(not_reached)} cases not started", flush=True)
            break
        t0 = time.time()
        try:
            new = run_case(args, op, d, m, n)
        except Exception as e:  # ours failed (tune, verify): record it, go on with the next case
            failed[case_key(op, d, m, n)] = short_reason(e)
            print(f"  {case_key(op, d, m, n)} FAILED: {short_reason(e)}", flush=True)
            new = []
        for r in new:
            r["pct_inrun_copy"] = 100 * r["ktune_tbs"] / ceiling
        rows += new
        took = time.time() - t0
        longest = max(longest, took)
        print(f"  {case_key(op, d, m, n)} done in {took:.0f} s", flush=True)
        torch.cuda.empty_cache()
        # Written after every case: a run cut short keeps what it measured.
        write_json(args, info, ceiling, rows, not_reached, failed)
    write_json(args, info, ceiling, rows, not_reached, failed)
    for line in table_lines(rows, args.peers, ceiling):
        print(line)
    for line in latency_lines(rows, args.peers):
        print(line)
    for line in like_for_like_lines(rows, args.peers):
        print(line)
    for line in ordinary_launch_lines(rows):
        print(line)
    for line in cliff_lines(rows):
        print(line)
    for key, why in failed.items():
        print(f"FAILED {key}: {why}")
    if not_reached:
        print(f"not reached (budget; run again with --resume): {', '.join(not_reached)}")
    if not args.no_markdown:
        print()
        for line in markdown_lines(rows, args.peers):
            print(line)
    return 1 if failed else 0


def peer_cell(r, p, unit="tbs"):
    if f"{p}_{unit}" in r:
        return f"{r[f'{p}_{unit}']:10.2f}"
    return f"{'n/a':>10}"


def table_lines(rows, peers, ceiling):
    lines = ["", f"norms on {torch.cuda.get_device_name()}; copy ceiling in this run {ceiling:.2f} TB/s ("
                 + ", ".join(f"{k} {v:.2f}" for k, v in COPY_METHODS.items())
                 + f"; %ceil uses {COPY_REF_TBS:.2f}); CUDA-graph replay, median per call; TB/s by fewest bytes; "
                 f"floor: empty kernels launched as ours"]
    peer_hdr = " ".join(f"{p:>10}" for p in peers)
    hdr = (f"{'op':<17} {'dt':<4} {'M x N':>14} {'ktune config':<30} {'us':>7} {'TB/s':>5} {'%ceil':>5} "
           f"{'floor us':>8} {'xfloor':>6} | {peer_hdr} | {'vs best':>7} | {'tune s':>6} | target")
    lines += [hdr, "-" * len(hdr)]
    geo = {}
    for r in rows:
        peer_txt = " ".join(peer_cell(r, p) for p in peers)
        vs = f"{r['vs_best_peer']:6.3f}x" if "vs_best_peer" in r else "   -   "
        if "vs_best_peer" in r:
            geo.setdefault((r["op"], r["pass"]), []).append(r["vs_best_peer"])
        floor = f"{r['floor_us']:8.2f} {r['floor_ratio']:5.2f}x" if "floor_us" in r else f"{'-':>8} {'-':>6}"
        tune = f"{r['tune_s']:6.1f}" if r.get("tune_s") is not None else f"{'cached':>6}"
        lines.append(f"{r['op'] + '.' + r['pass']:<17} {r.get('dtype', 'bf16'):<4} {r['M']:>7} x {r['N']:<5} "
                     f"{cfg_text(r['config']):<30} {r['ktune_us']:7.1f} {r['ktune_tbs']:5.2f} "
                     f"{r['pct_ceiling']:5.1f} {floor} | {peer_txt} | {vs} | {tune} | {r.get('target', '-')}")
    for (op, pas), v in geo.items():
        lines.append(f"geomean vs best peer, {op}.{pas}: {math.exp(sum(math.log(x) for x in v) / len(v)):.3f}x "
                     f"(min {min(v):.3f}x over {len(v)} rows)")
    na = {}
    for r in rows:
        for p, why in r.get("na", {}).items():
            na.setdefault((p, why), []).append(f"{r['op']}.{r['pass']} {r.get('dtype', 'bf16')} {r['M']}x{r['N']}")
    for (p, why), where in na.items():
        lines.append(f"n/a {p} ({len(where)} rows, e.g. {where[0]}): {why}")
    met = sum(1 for r in rows if r.get("target") == "met")
    judged = sum(1 for r in rows if r.get("target", "-") != "-")
    lines.append(f"targets met: {met} of {judged} judged rows")
    return lines


def latency_lines(rows, peers):
    """Latency-bound rows in microseconds: ours, the launch floor, each peer."""
    small = [r for r in rows if r["M"] * r["N"] <= LATENCY_ELEMS]
    if not small:
        return []
    peer_hdr = " ".join(f"{p + ' us':>10}" for p in peers)
    lines = ["", f"latency-bound rows (M*N <= {LATENCY_ELEMS}), microseconds; target: ours <= {FLOOR_TARGET}x floor",
             f"{'op':<17} {'dt':<4} {'M x N':>14} | {'ktune us':>8} {'floor us':>8} {'xfloor':>6} | {peer_hdr}"]
    for r in small:
        floor = f"{r['floor_us']:8.2f} {r['floor_ratio']:5.2f}x" if "floor_us" in r else f"{'-':>8} {'-':>6}"
        lines.append(f"{r['op'] + '.' + r['pass']:<17} {r.get('dtype', 'bf16'):<4} {r['M']:>7} x {r['N']:<5} | "
                     f"{r['ktune_us']:8.2f} {floor} | {' '.join(peer_cell(r, p, 'us') for p in peers)}")
    return lines


def markdown_lines(rows, peers):
    """The short table a run prints last, in Markdown: microseconds for every
    implementation (n/a where a peer could not run), ours in TB/s and % of the
    copy ceiling, the launch floor, and issue 34's targets."""
    lines = ["| op | dt | M x N | ktune us | TB/s | %ceil | floor us | x floor | "
             + " | ".join(f"{p} us" for p in peers) + " | vs best | target |",
             "|" + " --- |" * (10 + len(peers))]
    for r in rows:
        floor = f"{r['floor_us']:.2f} | {r['floor_ratio']:.2f}x" if "floor_us" in r else "- | -"
        peer_us = " | ".join(f"{r[p + '_us']:.1f}" if f"{p}_us" in r else "n/a" for p in peers)
        vs = f"{r['vs_best_peer']:.3f}x ({r['best_peer']})" if "vs_best_peer" in r else "-"
        lines.append(f"| {r['op']}.{r['pass']} | {r.get('dtype', 'bf16')} | {r['M']} x {r['N']} | "
                     f"{r['ktune_us']:.1f} | {r['ktune_tbs']:.2f} | {r['pct_ceiling']:.1f} | {floor} | {peer_us} | "
                     f"{vs} | {r.get('target', '-')} |")
    return lines


def like_for_like_lines(rows, peers):
    """The forward both ways a framework runs it: for training, ours writing
    mean/rstd against the peers' forward on tensors that need grad (which save
    what their backward needs); for inference, ours without them against the
    peers' forward on plain tensors (the main table's peer columns)."""
    fwd = [r for r in rows if r["pass"] == "fwd" and "ktune_nostats_tbs" in r]
    if not fwd or not peers:
        return []
    lines = ["", f"forward, like for like (TB/s, % of the {COPY_REF_TBS:.2f} ceiling; vs the best peer of the same kind)",
             f"{'op':<13} {'dt':<4} {'M x N':>14} | {'training: ours':>14} {'%ceil':>5} {'peer':>5} {'vs':>7} | "
             f"{'inference: ours':>15} {'%ceil':>5} {'peer':>5} {'vs':>7}"]
    for r in fwd:
        train = [r[f"{p}_train_tbs"] for p in peers if f"{p}_train_tbs" in r]
        infer = [r[f"{p}_tbs"] for p in peers if f"{p}_tbs" in r]
        if not train or not infer:
            continue
        train_peer, infer_peer = max(train), max(infer)
        ours_t, ours_i = r["ktune_tbs"], r["ktune_nostats_tbs"]
        lines.append(f"{r['op'] + '.fwd':<13} {r.get('dtype', 'bf16'):<4} {r['M']:>7} x {r['N']:<5} | {ours_t:14.2f} "
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
             f"{'op':<17} {'M x N':>14} | {'ordinary us':>11} {'TB/s':>5} {'%ceil':>5} | {'programmatic us':>15} | gain"]
    for r in both:
        tbs = r["bytes"] / (r["ktune_ordinary_us"] * 1e-6) / 1e12
        lines.append(f"{r['op'] + '.' + r['pass']:<17} {r['M']:>7} x {r['N']:<5} | {r['ktune_ordinary_us']:11.1f} "
                     f"{tbs:5.2f} {100 * tbs / COPY_REF_TBS:5.1f} | {r['ktune_us']:15.1f} | "
                     f"{r['ktune_ordinary_us'] / r['ktune_us']:5.3f}x")
    return lines


def cliff_lines(rows):
    """For every row whose N is not a power of two, its TB/s against the rows
    of the same op, pass and M at the neighbouring powers of two, when the run
    has them: a cliff is a row far below the slower neighbour."""
    by_key = {(r["op"], r["pass"], r.get("dtype", "bf16"), r["M"], r["N"]): r["ktune_tbs"] for r in rows}
    lines = []
    for (op, pas, d, m, n), tbs in sorted(by_key.items()):
        if n & (n - 1) == 0:
            continue
        lower = 1 << (n.bit_length() - 1)
        lo, hi = by_key.get((op, pas, d, m, lower)), by_key.get((op, pas, d, m, 2 * lower))
        if lo is None or hi is None:
            continue
        if not lines:
            lines.append("\nnon-power-of-two N against its neighbouring powers of two (TB/s; ratio to the slower)")
        lines.append(f"{op + '.' + pas:<13} {d:<4} {m:>6} x {n:<5} {tbs:5.2f} | N={lower}: {lo:5.2f}  "
                     f"N={2 * lower}: {hi:5.2f} | {tbs / min(lo, hi):5.3f}x")
    return lines


if __name__ == "__main__":
    sys.exit(main())
