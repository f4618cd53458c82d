#!/usr/bin/env python3
"""What a cached answer costs from Python: ktune.AnswerCache.get on a hit (one dict
lookup, no RPC), next to a GetConfig RPC and to what ktune.torch pays per call before
launching (the decision and the plan lookup). Needs a ktuned (compile-only is enough).

  python3 bench/python_cache_bench.py [--server unix:/path] [--calls 200000]

Run with ktune importable (pip install ./client/python, or PYTHONPATH at a built copy).
"""
import argparse
import json
import sys
import time

import ktune
from ktune import serving


def per_call_us(fn, calls):
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1000.0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=None, help="daemon address (default: KTUNE_ADDRESS or the default socket)")
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    client = ktune.Client(args.server)
    cache = ktune.AnswerCache(client)
    key = ktune.norm_key("rmsnorm", "fwd", 4096, 4096, "bf16", eps=1e-5)
    cache.get(key)
    rpcs = client.rpc_count
    hit = per_call_us(lambda: cache.get(key), args.calls)
    assert client.rpc_count == rpcs, "a hit made an RPC"
    rpc = per_call_us(lambda: client.get_config(ktune.problem_from_key(key)), max(args.calls // 1000, 50))

    class NoLaunch:  # the plan lookup without a GPU: a launcher that loads nothing
        def __init__(self, device):
            pass

        def load(self, recipe):
            return None

    planner = serving.Planner(cache, launcher_factory=NoLaunch)
    shape, strides = (8, 512, 4096), (2097152, 4096, 1)
    d = serving.decide_norm("rmsnorm", "fwd", "cuda", "bfloat16", shape, strides, "bfloat16", (4096,), eps=1e-5)
    layouts = serving.norm_layouts(d.key)
    plan, reason = planner.plan(d.key, 0, lambda: layouts)

    def op_overhead():
        d = serving.decide_norm("rmsnorm", "fwd", "cuda", "bfloat16", shape, strides, "bfloat16", (4096,), eps=1e-5)
        return planner.plan(d.key, 0, None)

    overhead = per_call_us(op_overhead, args.calls // 4)
    result = {"answer_cache_hit_us": round(hit, 4), "get_config_rpc_us": round(rpc, 1),
              "torch_op_decision_and_plan_us": round(overhead, 3),
              "plan_built": plan is not None, "plan_reason": reason,
              "python": sys.version.split()[0], "calls": args.calls}
    print(f"AnswerCache.get hit          {hit:8.3f} us   (target < 1 us)")
    print(f"GetConfig RPC                {rpc:8.1f} us")
    print(f"ktune.torch decision + plan  {overhead:8.3f} us   "
          f"({'plan built' if plan else 'no plan: ' + str(reason)})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
