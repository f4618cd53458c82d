#!/usr/bin/env python3
"""GEMM on the GPU machine (issue 5): ktune's answer, cuBLASLt's default choice
and the best own template (all from ktune_gemm_bench, one measurement inside
ktune), beside torch.matmul (bf16) or torch._scaled_mm (fp8), timed the way
ktune's protocol times candidates (tuner/measure.h, tuner/gemm_tuner.h): the
GPU kept busy for 200 ms first (a large GEMM pulls the clocks down under the
power limit within tens of ms, so a peer timed from idle would be flattered),
then a pair of CUDA events around each call, input sets rotated past the L2,
the median. Operands for torch are drawn as ktune draws its own (uniform in
[-1, 1)); runs before session 4 gave torch N(0, 1) operands instead.
TFLOP/s = 2*M*N*K / time.

Order (--order): "interleaved" (the default since session 7) tunes one shape
in ktune_gemm_bench and times torch on that shape right after it, so both
are timed on a GPU equally hot from that shape's work; "batched" (sessions
4-6) tuned every shape first and timed torch afterwards, so torch's large
shapes ran on a chip cooled by the small shapes' tail, and under the power
limit a cooler chip holds higher clocks (suspected, not yet measured, of the
1-3% torch led cuBLASLt's default by at large shapes). Interleaved is not
symmetric either: torch always runs second, on the chip the tune left hot,
as ktune's own final passes do.

Settling (--settle-ms, default 2000 since session 8): ktune's figures come
from the end of its tune, which kept the GPU busy for seconds, while torch
is timed after a process start. So ktune_gemm_bench also times its answer
once more after idling for S ms, heating 200 ms and timing 100 calls, and
torch gets the same S ms of idle before its own 200 ms and 100 calls
("ktune settled"; "vs torch" compares the two settled figures, and the
tune's figure stays in the table and the JSON). At fp8 8192^3, session 8
found ktune's answer and torch._scaled_mm running the same cuBLASLt
algorithm, 2.7% apart.

  python3 bench/gemm_bench.py --ktune-gemm-bench .gpu/bin/ktune_gemm_bench --out OUT.json [--dtype bf16|fp8]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import statistics

import torch

L2_BYTES = 60 << 20
SHAPES = [(8192, 8192, 8192)] + [(m, n, k) for m in (8192, 2048, 128, 16, 1)
                                 for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))]


def event_time_us(call, sets, heat_ms=200, repetitions=100, settle_ms=0):
    """ktune's protocol: idle settle_ms, busy for heat_ms, then events around each call, set = repetition % sets,
    median."""
    torch.cuda.synchronize()
    time.sleep(settle_ms / 1000)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(10):
        call(i % sets)
    e.record()
    torch.cuda.synchronize()
    for i in range(max(20, min(5000, int(heat_ms / (s.elapsed_time(e) / 10))))):
        call(i % sets)
    torch.cuda.synchronize()
    pairs = []
    for i in range(repetitions):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call(i % sets)
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)


def torch_tflops(m, n, k, dtype, settle_ms=0):
    """torch.matmul (bf16) or torch._scaled_mm (fp8, per-tensor scales, bf16 out); B is [N, K]."""
    per_set = (m * k + n * k) * (1 if dtype == "fp8" else 2) + 2 * m * n
    sets = max(1, math.ceil(3 * L2_BYTES / per_set))
    # The distribution ktune times its candidates on (tuner/gemm_runner.cc:
    # uniform in [-1, 1)): on a power-limited H200 the clocks a large GEMM
    # holds can depend on its operands' bits (METHOD: never time zeros), so
    # the peers get the same kind of data.
    a = [torch.rand(m, k, device="cuda") * 2 - 1 for _ in range(sets)]
    b = [torch.rand(n, k, device="cuda") * 2 - 1 for _ in range(sets)]
    d = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    if dtype == "fp8":
        a = [x.to(torch.float8_e4m3fn) for x in a]
        b = [x.to(torch.float8_e4m3fn) for x in b]
        sa = torch.tensor(0.5, device="cuda")
        sb = torch.tensor(0.25, device="cuda")

        def call(i):
            # _scaled_mm wants B column-major: b[i].t() of a row-major [N, K] is.
            torch._scaled_mm(a[i], b[i].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=d[i])
    else:
        a = [x.to(torch.bfloat16) for x in a]
        b = [x.to(torch.bfloat16) for x in b]

        def call(i):
            torch.matmul(a[i], b[i].t(), out=d[i])
    us = event_time_us(call, sets, settle_ms=settle_ms)
    return 2 * m * n * k / us / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktune-gemm-bench", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp8"])
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}x{k}" for m, n, k in SHAPES))
    ap.add_argument("--order", default="interleaved", choices=["interleaved", "batched"],
                    help="interleaved: torch right after each shape's tune; batched: every tune first")
    ap.add_argument("--settle-ms", type=int, default=2000,
                    help="idle before timing ktune's answer again and before timing torch (0: compare the tune's figure)")
    args = ap.parse_args()
    if not 0 <= args.settle_ms <= 60000:
        ap.error(f"--settle-ms: {args.settle_ms} is not in [0, 60000]")
    ours_json = args.out + ".ktune.json"  # one call's rows, read back at once

    def tune(shapes):
        """ktune_gemm_bench over `shapes` (comma-separated MxNxK): its rows ([] if it failed)."""
        if os.path.exists(ours_json):
            os.remove(ours_json)
        r = subprocess.run([args.ktune_gemm_bench, "--shapes", shapes, "--dtype", args.dtype, "--json", ours_json,
                            "--settle-ms", str(args.settle_ms)],
                           capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0 or not os.path.exists(ours_json):
            print(f"{shapes}: ktune_gemm_bench failed ({r.returncode}):\n{r.stdout}", flush=True)
            return []
        return json.load(open(ours_json))

    shapes = [x.strip() for x in args.shapes.split(",") if x.strip()]
    for shape in shapes:
        if not re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*", shape):
            ap.error(f"--shapes: {shape!r} is not MxNxK (positive integers)")
    if not shapes:
        ap.error("--shapes: no shape given")
    # Batched: every shape tuned now. Interleaved: each just before its torch timing.
    key = lambda r: f"{r['m']}x{r['n']}x{r['k']}"  # noqa: E731
    batched = {key(r): r for r in tune(",".join(shapes))} if args.order == "batched" else None
    peer = "_scaled_mm" if args.dtype == "fp8" else "matmul"
    print(f"{args.dtype} GEMM, D = A x B^T (B [N, K]), TFLOP/s; torch.{peer} and ktune's candidates timed alike "
          f"(events per call, L2 rotation, median)")
    print(f"{'M x N x K':<22} | {'torch':>7} | {'cuBLASLt':>8} | {'template':>8} | {'ktune':>7} | "
          f"{'settled':>7} | {'vs cuBLASLt':>11} | {'vs torch':>8} | answer")
    rows = []
    for shape in shapes:
        if batched is None:
            tuned = tune(shape)
        else:
            tuned = [batched[shape]] if shape in batched else []
        if not tuned:
            print(f"{shape}: ktune_gemm_bench gave no row (see its output above)", flush=True)
            continue
        row = tuned[0]
        rows.append(row)
        row["order"] = args.order
        row["torch_tflops"] = torch_tflops(row["m"], row["n"], row["k"], args.dtype, args.settle_ms)
        torch.cuda.empty_cache()
        ours, dflt = row["ktune_tflops"], row["cublaslt_default_tflops"]
        # Against torch: like with like (settled against settled), unless settling is off.
        settled = row.get("ktune_settled_tflops", 0)
        versus = settled if args.settle_ms > 0 else ours
        print(f"{row['m']} x {row['n']} x {row['k']:<10} | {row['torch_tflops']:7.1f} | {dflt:8.1f} | "
              f"{row['best_template_tflops']:8.1f} | {ours:7.1f} | {settled:7.1f} | "
              f"{ours / dflt if dflt else 0:10.3f}x | {versus / row['torch_tflops']:7.3f}x | {row['ktune_answer']}",
              flush=True)
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
