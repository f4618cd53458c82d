#!/usr/bin/env python3
"""Host cost of one ktune.torch call, and where it goes (the device machine).

  python3 bench/torch_op_overhead.py --server unix:/path/ktuned.sock --out overhead.json

Decode steps launch a few kernels of a few microseconds each, so the host time
of every op decides the step unless it runs under a CUDA graph. This measures,
for an RMSNorm over [M, N] bf16 (default M = 1, N = 4096):

  torch          torch.nn.functional.rms_norm (eager; its own fused CUDA kernel)
  ktune          ktune.torch.rms_norm (decide, plan, allocate, launch; no autograd needed,
                 so the call skips torch's dispatcher)
  ktune via torch.ops  the same through the dispatcher (torch.ops.ktune.rms_norm_fwd), as
                 a compiled graph or a call needing autograd makes it
  ktune-launch   the planned recipe's Recipe.launch alone (ctypes into the C ABI)
  compiled-*     torch.compile of y = rms_norm(x + r, w) with torch's op and ktune's
                 (Inductor's generated code calls the custom op)

Host microseconds per call are wall time over many calls with the GPU kept
ahead (the queue never drains: the kernels are microseconds, the calls tens
of microseconds, so the host is what is measured); each row is the median of
--repeats batches. A cProfile of the ktune op names the functions that cost
the most. Results go to --out and a table is printed last.
"""
import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import torch
import torch.nn.functional as F


def host_us(fn, calls, repeats):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return {"median_us": round(statistics.median(per), 2), "min_us": round(min(per), 2), "calls": calls,
            "repeats": repeats}


def profile_top(fn, calls, top):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=None)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import ktune.torch as kt
    from ktune.serving import norm_layouts

    kt.configure(address=args.server, policy="heuristic")
    dev = torch.device("cuda")
    x = torch.randn(args.rows, args.cols, device=dev, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.rand(args.cols, device=dev, dtype=torch.bfloat16) + 0.5
    eps = 1e-5

    # Verify before timing: ktune's answer is served (no fallback) and right.
    with torch.no_grad():
        want = F.rms_norm(x.float(), (args.cols,), w.float(), eps).to(torch.bfloat16)
        got = kt.rms_norm(x, w, eps)
    err = ((got.float() - want.float()).abs().max()).item()
    served = [k for k, p in kt.planner().entries().items() if hasattr(p, "answer")]
    result = {"rows": args.rows, "cols": args.cols, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
              "max_abs_error": err, "served": bool(served), "rows_us": {}}
    if not served or err > 0.05:
        result["error"] = f"ktune's rms_norm not served or wrong (served {bool(served)}, max abs error {err})"
        json.dump(result, open(args.out, "w"), indent=2)
        raise SystemExit(result["error"])
    key, device = served[0]
    plan = kt.planner().entries()[(key, device)]
    stream = torch.cuda.current_stream().cuda_stream
    y = torch.empty_like(x)
    rstd = torch.empty(args.rows, device=dev, dtype=torch.float32)
    addresses = plan.binding.addresses({"x": x.data_ptr(), "w": w.data_ptr(), "y": y.data_ptr(),
                                        "rstd": rstd.data_ptr()})
    del norm_layouts

    # Two functions, so two code objects: Dynamo caches compiled entries per
    # code object, and one shared lambda would make each row guard the other's.
    def torch_step(a, b, c):
        return F.rms_norm(a + b, (args.cols,), c, eps)

    def ktune_step(a, b, c):
        return kt.rms_norm(a + b, c, eps)

    def compiled(step):
        f = torch.compile(step, dynamic=False, fullgraph=True)
        return lambda: f(x, r, w)

    rows = {
        "torch": lambda: F.rms_norm(x, (args.cols,), w, eps),
        "ktune": lambda: kt.rms_norm(x, w, eps),
        "ktune via torch.ops": lambda: torch.ops.ktune.rms_norm_fwd(x, w, eps),
        "ktune-launch": lambda: plan.recipe.launch(addresses, stream),
        "torch.empty x3": lambda: (torch.empty_like(x), torch.empty(args.rows, device=dev),
                                   torch.empty(args.rows, device=dev)),
        "current_stream": lambda: torch.cuda.current_stream(x.device).cuda_stream,
        "compiled-torch": compiled(torch_step),
        "compiled-ktune": compiled(ktune_step),
    }
    with torch.no_grad():
        for name, fn in rows.items():
            result["rows_us"][name] = host_us(fn, args.calls, args.repeats)
            json.dump(result, open(args.out, "w"), indent=2)
        result["profile_ktune"] = profile_top(rows["ktune"], args.calls, 25)
        result["profile_compiled_ktune"] = profile_top(rows["compiled-ktune"], args.calls, 25)
    with torch.enable_grad():
        xg = x.detach().requires_grad_()
        result["rows_us"]["ktune (grad enabled)"] = host_us(lambda: kt.rms_norm(xg, w, eps), args.calls, args.repeats)
    json.dump(result, open(args.out, "w"), indent=2)
    print(result["profile_ktune"][:6000])
    print(result["profile_compiled_ktune"][:6000])
    print(f"\nhost us per call, [{args.rows}, {args.cols}] bf16 ({result['gpu']}, torch {result['torch']})")
    for name, rec in result["rows_us"].items():
        print(f"{name:24} {rec['median_us']:9.2f} us  (min {rec['min_us']:.2f})")


if __name__ == "__main__":
    main()
