#!/usr/bin/env python3
"""GEMM on the GPU machine (issue 5): ktune's answer, cuBLASLt's default choice
and the best own template (all from ktune_gemm_bench, one measurement inside
ktune), beside torch.matmul (bf16) or torch._scaled_mm (fp8), timed the way
ktune's protocol times candidates (tuner/run/measure.h, tuner/gemm/gemm_tuner.h): the
GPU kept busy for 200 ms first (a large GEMM pulls the clocks down under the
power limit within tens of ms, so a peer timed from idle would be flattered),
then a pair of CUDA events around each call, input sets rotated past the L2,
the median. Operands for torch are drawn as ktune draws its own (uniform in
[-1, 1)); runs before 00757fe (2026-11-29) gave torch N(0, 1) operands
instead.
TFLOP/s = 2*M*N*K / time.

Pairing (--rounds R, default 5, since 0a61686): ktune_gemm_bench tunes
each shape and then, in the same GPU state, times its answer on request
(--paired); this driver alternates R timings of ktune's answer with R of
torch's, the order swapped every round (ours first in even rounds), and
compares the medians of the two sides. Both run under the same clocks and
thermal history, which the earlier protocols did not give: they timed torch
after every tune ("batched"), then right after each shape's tune, then after
2 s of idle on both sides ("settled", 6e8ce73), and at 4ecdf53 that settled
figure of one unchanged cuBLASLt algorithm moved by -12% to +2% against the
tune's own, more than any gap it was meant to measure
(bench/results/2026-11-30-gemm-paired-263d781.md, "The GEMM bench against
torch: from "settled" to "paired""; why the bench works this way:
bench/results/decisions/gemm-bench-protocol.md).
--rounds 0 compares the tune's own figure with one torch timing instead.

The tune's own three figures (cuBLASLt, template, ktune) are, since 1dcdd72,
those of its sustained finals where they ran (problems of 100 us and
more, tuner/gemm/gemm_tuner.h): each candidate timed after 200 ms of its own heat,
as the block column times ktune's answer. The JSON keeps every finalist's
interleaved figure too ("median_us"; "sustained_us" beside it).

Blocks (since 1e8044e): after the alternated rounds, each side is timed
R + 1 times in a row, the first discarded, and the medians compared ("block"
column, "block_*_us" in the JSON); the side that goes first alternates from
shape to shape. Alternating two processes on one GPU is not neutral: two
identical torch._scaled_mm processes at fp8 8192 x 4096 x 14336 read
766-807 us each timed in a row, but taking turns the one started first read
789-825 us and the other 768-789 us (bench/results/2026-11-30-norms-gemm-6cf1718.md,
"The alternation control"). It does not follow context order: with the driver's
context created first (it starts CUDA before the bench, since 1e8044e),
ktune's side was still the slower one alternated. Why is not known. The
block figure times each side after its own kind, as each would run in a
real program, and is the one "vs torch" reports; "alt" is the alternated
ratio (torch's median time over ours).

Head to head (since a266442, the "h2h" column): where the sustained
finals ran, ktune_gemm_bench times the best template against cuBLASLt's
default in 8 rounds, the two windows of a round back to back, and reports
the median of the rounds' ratios (above 1: the template is faster); see its
header. The tune's own template/default ratio compares windows seconds
apart, which the wandering clocks move by several percent.

  python3 bench/gemm_bench.py --ktune-gemm-bench .gpu/bin/ktune_gemm_bench --out OUT.json [--dtype bf16|fp8] [--rounds 5]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import statistics

import torch

from run_info import run_info

L2_BYTES = 60 << 20
SHAPES = [(8192, 8192, 8192)] + [(m, n, k) for m in (8192, 2048, 128, 16, 1)
                                 for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))]


def event_time_us(call, sets, heat_ms=200, repetitions=100):
    """ktune's protocol: busy for heat_ms, then events around each call, set = repetition % sets, median."""
    torch.cuda.synchronize()
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


def same_kernel_as_torch(row, dtype):
    """' =torch' where ktune's answer is the cuBLASLt kernel torch._scaled_mm runs (ktune_gemm_bench's JSON)."""
    return " =torch" if dtype == "fp8" and row.get("answer_is_cublaslt_1mib_pick") else ""


def torch_timer(m, n, k, dtype):
    """A function timing torch.matmul (bf16) or torch._scaled_mm (fp8, per-tensor scales, bf16 out) in us, B [N, K]."""
    per_set = (m * k + n * k) * (1 if dtype == "fp8" else 2) + 2 * m * n
    sets = max(1, math.ceil(3 * L2_BYTES / per_set))
    # The distribution ktune times its candidates on (tuner/gemm/gemm_runner.cc:
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
    return lambda: event_time_us(call, sets)


class PairedBench:
    """ktune_gemm_bench --paired over every shape, driven line by line (see its header)."""

    def __init__(self, binary, shapes, dtype, json_path, paired):
        self.json_path = json_path
        cmd = [binary, "--shapes", ",".join(shapes), "--dtype", dtype, "--json", json_path]
        self.proc = subprocess.Popen(cmd + (["--paired"] if paired else []), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def next_ready(self):
        """Reads up to the next "paired: ready MxNxK" (its shape), or to the end (None); echoes the table rows."""
        for line in self.proc.stdout:
            if line.startswith("paired: ready "):
                return line.split()[2]
            sys.stderr.write(line)
        return None

    def rows(self):
        return json.load(open(self.json_path)) if os.path.exists(self.json_path) else []

    def time_answer_us(self):
        self.proc.stdin.write("time\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("paired: us "):
            raise RuntimeError(f"ktune_gemm_bench: expected 'paired: us', got {line.strip()!r}")
        return float(line.split()[2])

    def next(self):
        self.proc.stdin.write("next\n")
        self.proc.stdin.flush()

    def close(self):
        self.proc.stdin.close()
        for line in self.proc.stdout:
            sys.stderr.write(line)
        return self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktune-gemm-bench", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp8"])
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}x{k}" for m, n, k in SHAPES))
    ap.add_argument("--rounds", type=int, default=5,
                    help="timings of each side, alternated (0: the tune's own figure against one torch timing)")
    ap.add_argument("--commit", help="the commit measured, for the JSON (default: git rev-parse --short HEAD)")
    args = ap.parse_args()
    if not 0 <= args.rounds <= 50:
        ap.error(f"--rounds: {args.rounds} is not in [0, 50]")
    if not (os.path.isfile(args.ktune_gemm_bench) and os.access(args.ktune_gemm_bench, os.X_OK)):
        ap.error(f"--ktune-gemm-bench: {args.ktune_gemm_bench!r} is not an executable file")
    shapes = [x.strip() for x in args.shapes.split(",") if x.strip()]
    for shape in shapes:
        if not re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*", shape):
            ap.error(f"--shapes: {shape!r} is not MxNxK (positive integers)")
    if not shapes:
        ap.error("--shapes: no shape given")
    info = run_info(args.commit)
    ours_json = args.out + ".ktune.json"  # ktune_gemm_bench's rows, rewritten after each shape
    if os.path.exists(ours_json):
        os.remove(ours_json)

    peer = "_scaled_mm" if args.dtype == "fp8" else "matmul"
    print(f"{args.dtype} GEMM, D = A x B^T (B [N, K]), TFLOP/s; torch.{peer} and ktune's candidates timed alike "
          f"(events per call, L2 rotation, median)" +
          (f"; 'block': ktune's answer and torch each timed {args.rounds} times in a row (after one discarded), "
           f"medians; 'alt': the same, alternated" if args.rounds else "") +
          ("; '=torch': the answer has the settings of cuBLASLt's pick under PyTorch's 1 MiB workspace, "
           "the kernel torch._scaled_mm runs" if args.dtype == "fp8" else "") +
          "; 'h2h': the best template against cuBLASLt's default, median of their round-by-round ratios "
          "after their sustained finals (ktune_gemm_bench --head-to-head-rounds)")
    print(f"{'M x N x K':<22} | {'torch':>7} | {'cuBLASLt':>8} | {'template':>8} | {'ktune':>7} | "
          f"{'block':>7} | {'vs cuBLASLt':>11} | {'vs torch':>8} | {'alt':>6} | {'h2h':>6} | answer")
    torch.zeros(1, device="cuda")  # this process's CUDA context first (see "Blocks" in the header)
    bench = PairedBench(args.ktune_gemm_bench, shapes, args.dtype, ours_json, args.rounds > 0)
    key = lambda r: f"{r['m']}x{r['n']}x{r['k']}"  # noqa: E731

    def tuned_rows():
        """Each tuned shape's row: as the bench gets ready to pair it, or all at its end (--rounds 0)."""
        if args.rounds == 0:
            bench.close()
            yield from bench.rows()
            return
        while (ready := bench.next_ready()) is not None:
            yield next(r for r in bench.rows() if key(r) == ready)

    rows = []
    for index, row in enumerate(tuned_rows()):
        flops = 2 * row["m"] * row["n"] * row["k"]
        time_torch = torch_timer(row["m"], row["n"], row["k"], args.dtype)
        if args.rounds > 0:
            timers = {"ktune": bench.time_answer_us, "torch": time_torch}
            # The alternated rounds ("paired_*_us" in the JSON, as before 1e8044e).
            for side in timers:
                row[f"paired_{side}_us"] = []
            for r in range(args.rounds):
                for side in (("ktune", "torch") if r % 2 == 0 else ("torch", "ktune")):
                    row[f"paired_{side}_us"].append(timers[side]())
            row["alt_ratio"] = statistics.median(row["paired_torch_us"]) / statistics.median(row["paired_ktune_us"])
            # Then the blocks: each side after its own kind (see the header).
            for side in (("ktune", "torch") if index % 2 == 0 else ("torch", "ktune")):
                row[f"block_{side}_us"] = [timers[side]() for _ in range(args.rounds + 1)][1:]
            bench.next()
            block = flops / statistics.median(row["block_ktune_us"]) / 1e6
            row["ktune_block_tflops"] = block
            row["torch_tflops"] = flops / statistics.median(row["block_torch_us"]) / 1e6
        else:
            block = 0.0
            row["torch_tflops"] = flops / time_torch() / 1e6
        del time_torch
        torch.cuda.empty_cache()
        rows.append(row)
        row["rounds"] = args.rounds
        ours, dflt = row["ktune_tflops"], row["cublaslt_default_tflops"]
        versus = block if args.rounds > 0 else ours  # like with like
        alt = row["alt_ratio"] if args.rounds > 0 else 0.0
        # The best template against cuBLASLt's default, round by round (ktune_gemm_bench's header).
        h2h = f"{row['head_to_head']['median_ratio']:5.3f}x" if "head_to_head" in row else f"{'-':>6}"
        print(f"{row['m']} x {row['n']} x {row['k']:<10} | {row['torch_tflops']:7.1f} | {dflt:8.1f} | "
              f"{row['best_template_tflops']:8.1f} | {ours:7.1f} | {block:7.1f} | "
              f"{ours / dflt if dflt else 0:10.3f}x | {versus / row['torch_tflops']:7.3f}x | {alt:5.3f}x | "
              f"{h2h} | {row['ktune_answer']}{same_kernel_as_torch(row, args.dtype)}",
              flush=True)
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **info, "rows": rows}, f,
                      indent=1)
    if args.rounds > 0 and bench.close() != 0:
        print("ktune_gemm_bench failed (see its output above)", flush=True)
    for shape in sorted(set(shapes) - {key(r) for r in rows}):
        print(f"{shape}: ktune_gemm_bench gave no row (see its output above)", flush=True)


if __name__ == "__main__":
    main()
