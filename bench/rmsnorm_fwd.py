#!/usr/bin/env python3
"""RMSNorm forward (bf16) on the GPU: ktune's tuned kernel against PyTorch eager
and torch.compile, on the same inputs, timed the same way, in one run.

For each shape it asks a running ktuned to tune (the cold tune is timed), then
fetches the winner's launch recipe and cubin through `ktune get --policy cached`
and launches exactly that, as a compiler frontend would (CuPy loads the cubin).
Every implementation is verified against an fp32 reference on poisoned outputs
before it is timed. Timing (same for all three): inputs rotated past the 60 MB
L2, CUDA graph of K launches replayed, median per-launch time over many replays;
per-launch CUDA events are reported too.

Bytes per call (fewest): read x (M*N*2) and w (N*2), write y (M*N*2).
Usage: rmsnorm_fwd.py --ktune PATH --server ADDR --out results.json
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import cupy as cp
import torch
import torch.nn.functional as F

SHAPES = [(32768, 1024), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 2048), (4096, 4096)]
L2_BYTES = 60 << 20
EPS = 1e-6


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def median_us(samples_ms):
    return statistics.median(samples_ms) * 1e3


def time_events(launch, sets, reps=200, warmup=20):
    for i in range(warmup):
        launch(i % sets)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        launch(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return median_us([s.elapsed_time(e) for s, e in zip(starts, ends)])


def time_graph(launch, sets, per_graph=None, replays=50):
    """K launches (rotating input sets) captured in one graph; median per launch."""
    per_graph = per_graph or max(2 * sets, 20)
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
        samples.append(s.elapsed_time(e) / per_graph)
    return median_us(samples)


def copy_ceiling_tbs():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    t = time_events(lambda i: b.copy_(a), 1, reps=50, warmup=5)
    return 2 * n / (t * 1e-6) / 1e12


class KtuneKernel:
    """A tuned winner, launched from its recipe alone."""

    def __init__(self, answer, cubin_path):
        recipe = answer["recipe"]
        (kernel,) = recipe["kernels"]
        self.module = cp.RawModule(path=cubin_path)
        self.function = self.module.get_function(kernel["lowered_name"])
        self.grid = tuple(int(g) for g in kernel["grid"])
        self.block = tuple(int(b) for b in kernel["block"])
        self.smem = int(kernel["dynamic_smem_bytes"])
        assert kernel["params"] == ["x", "w", "y", "rstd", "M", "N", "eps"], kernel["params"]

    def __call__(self, x, w, y, m, n):
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            self.function(self.grid, self.block,
                          (cp.uint64(x.data_ptr()), cp.uint64(w.data_ptr()), cp.uint64(y.data_ptr()),
                           cp.uint64(0), cp.int32(m), cp.int32(n), cp.float32(EPS)),
                          shared_mem=self.smem)


def reference(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def check(name, y, ref):
    if torch.isnan(y).any():
        raise RuntimeError(f"{name}: output has NaN (unwritten or wrong)")
    err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    if err > 1e-2:
        raise RuntimeError(f"{name}: relative error {err:.3g} too large")
    return err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktune", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    torch.manual_seed(0)
    ceiling = copy_ceiling_tbs()
    rows = []
    for m, n in SHAPES:
        # A fresh static-shape compile per shape, as torch.compile gives a model
        # with fixed shapes (no dynamic-shape kernel after the first shape).
        torch._dynamo.reset()
        compiled = torch.compile(F.rms_norm, dynamic=False)
        nbytes = 2 * m * n * 2 + n * 2
        sets = max(1, math.ceil(3 * L2_BYTES / (2 * m * n * 2)))
        xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.5 + 1
        ys = [torch.empty_like(xs[0]) for _ in range(sets)]

        base = [args.ktune, "--server", args.server]
        shape = ["rmsnorm.fwd", "--m", str(m), "--n", str(n), "--dtype", "bf16"]
        t0 = time.time()
        sh(base + ["tune"] + shape + ["--json", "--force"])
        tune_s = time.time() - t0
        cubin = f"{args.workdir}/rmsnorm_{m}x{n}.cubin"
        answer = json.loads(sh(base + ["get"] + shape + ["--policy", "cached", "--json", "--cubin-out", cubin]))
        assert answer["source"] == "TUNED", answer["source"]
        ours = KtuneKernel(answer, cubin)

        ref = reference(xs[0], w)
        ys[0].fill_(float("nan"))
        ours(xs[0], w, ys[0], m, n)
        torch.cuda.synchronize()
        errs = {"ktune": check("ktune", ys[0], ref),
                "eager": check("eager", F.rms_norm(xs[0], (n,), w, EPS), ref),
                "compile": check("compile", compiled(xs[0], (n,), w, EPS), ref)}

        impls = {
            "ktune": lambda i: ours(xs[i], w, ys[i], m, n),
            "eager": lambda i: F.rms_norm(xs[i], (n,), w, EPS),
            "compile": lambda i: compiled(xs[i], (n,), w, EPS),
        }
        row = {"M": m, "N": n, "bytes": nbytes, "sets": sets, "tune_s": tune_s,
               "config": answer["config"]["norm"], "tuner_time_us": answer["measurement"]["time_us"],
               "rel_err": errs}
        for name, fn in impls.items():
            g = time_graph(fn, sets)
            e = time_events(fn, sets)
            row[name] = {"graph_us": g, "events_us": e, "graph_tbs": nbytes / (g * 1e-6) / 1e12,
                         "events_tbs": nbytes / (e * 1e-6) / 1e12}
        rows.append(row)
        del xs, ys
        torch.cuda.empty_cache()

    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "copy_tbs": ceiling, "rows": rows}, f, indent=1)

    print(f"\nRMSNorm forward bf16, {torch.cuda.get_device_name()}, copy ceiling {ceiling:.2f} TB/s "
          f"(measured in this run); CUDA-graph replay, median per launch")
    hdr = (f"{'M x N':>13} {'ktune config':<30} {'us':>7} {'TB/s':>5} {'%ceil':>5} | {'eager':>5} {'compile':>7}"
           f" | {'vs best':>7} | {'events: ktune/eager/compile TB/s':>32} | tune s")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        c = r["config"]
        cfg = (f"xb{c['x_block']} rb{c['r_block']} w{c['num_warps']} v{c['vec']} pd{c['pipeline_depth']}"
               f" {'pers' if c['persistent'] else 'loop'}")
        k, e, co = r["ktune"], r["eager"], r["compile"]
        best = max(e["graph_tbs"], co["graph_tbs"])
        print(f"{r['M']:>6} x {r['N']:<5} {cfg:<30} {k['graph_us']:7.1f} {k['graph_tbs']:5.2f} "
              f"{100 * k['graph_tbs'] / ceiling:5.1f} | {e['graph_tbs']:5.2f} {co['graph_tbs']:7.2f} | "
              f"{k['graph_tbs'] / best:6.3f}x | {k['events_tbs']:9.2f} {e['events_tbs']:9.2f} {co['events_tbs']:9.2f}"
              f"    | {r['tune_s']:5.1f}")


if __name__ == "__main__":
    sys.exit(main())
