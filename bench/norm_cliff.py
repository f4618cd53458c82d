#!/usr/bin/env python3
"""Performance cliffs over the row length N (issue 34): RMSNorm (forward, and
backward with --passes fwd,bwd) at every N = 8..1024 in steps of 8, then up to
16384 in steps of --wide-step (256), at two M, for the heuristic config and
the tuned one.

Per case: the config comes from a running ktuned (`ktune get --policy
heuristic`, no tune, fetched for every N up front on several threads so the
daemon's compiles overlap; then `ktune tune` for a subset), is launched from
its recipe (norm_bench.Recipe), verified against the fp32 reference
(norm_bench.NormInputs, verify_ours) and timed by CUDA-graph replay
(norm_bench.graph_time_us), outputs from the allocator as in norm_bench.py.
Inputs rotate past L2 up to --max-sets sets (64): the smallest rows stay in L2,
where they are latency-bound anyway.

A cliff is an N whose time per byte is far above its neighbours': the ratio
printed is time/byte at N over the mean of time/byte at the N before and after
it in the sweep (N - 8 and N + 8 in the dense part). The 10 worst N per M and
pass are listed.

Tuning every N is too slow for one device call, so only a subset is tuned:
every --tune-every-small-th N (64) up to 1024, every --tune-every-large-th
(1024) after, and each N the heuristic sweep flags (ratio above --flag, or
among the 10 worst) with its two neighbours, so the tuned ratio is taken over
the same neighbours. The output says which N were tuned. Run it on a fresh
store: `--policy heuristic` answers a tuned entry (or the nearest M's) when the
store holds one, and such rows are reported as not heuristic.
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import norm_bench as nb
from run_info import run_info


def sweep_ns(dense_max, wide_step, wide_max):
    return list(range(8, dense_max + 1, 8)) + list(range(dense_max + wide_step, wide_max + 1, wide_step))


def cliff_ratios(times):
    """{N: time/byte at N over the mean of its neighbours'} over a sorted sweep {N: us per byte}."""
    ns = sorted(times)
    out = {}
    for i in range(1, len(ns) - 1):
        out[ns[i]] = times[ns[i]] / ((times[ns[i - 1]] + times[ns[i + 1]]) / 2)
    return out


def measure(args, m, n, pas, answer, cubin):
    """A row for one config: verified, timed, and its time per byte."""
    inp = nb.NormInputs("rmsnorm", m, n, args.dtype, backward=pas == "bwd", max_sets=args.max_sets)
    recipe = nb.Recipe(answer, cubin)
    inp.ws = torch.empty(max(recipe.workspace_bytes, 4), device="cuda", dtype=torch.uint8)
    errs = nb.verify_ours(inp, recipe, answer, pas)
    us = nb.time_ours(inp, recipe, answer, pas)
    nbytes = inp.fwd_bytes if pas == "fwd" else inp.bwd_bytes
    return {"M": m, "N": n, "pass": pas, "source": answer.get("source"), "config": answer["config"]["norm"],
            "us": us, "bytes": nbytes, "tbs": nbytes / (us * 1e-6) / 1e12, "us_per_mb": us / (nbytes / 1e6),
            "rel_err": errs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ktune", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--ms", default="4096,256")
    ap.add_argument("--passes", default="fwd", help="fwd or fwd,bwd")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--dense-max", type=int, default=1024, help="every multiple of 8 up to here")
    ap.add_argument("--wide-step", type=int, default=256)
    ap.add_argument("--wide-max", type=int, default=16384)
    ap.add_argument("--tune-every-small", type=int, default=64, help="tune every N divisible by this up to --dense-max")
    ap.add_argument("--tune-every-large", type=int, default=1024, help="and every N divisible by this above it")
    ap.add_argument("--flag", type=float, default=1.10, help="a heuristic ratio above this is a cliff to tune")
    ap.add_argument("--no-tune", action="store_true", help="the heuristic sweep alone")
    ap.add_argument("--max-sets", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=8, help="concurrent `ktune get` calls for the heuristic sweep")
    ap.add_argument("--tune-repetitions", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=380, help="stop starting work after this many seconds")
    ap.add_argument("--commit")
    args = ap.parse_args()
    t_start = time.time()
    ms = [int(v) for v in args.ms.split(",") if v]
    passes = [p for p in args.passes.split(",") if p]
    ns = sweep_ns(args.dense_max, args.wide_step, args.wide_max)
    torch.manual_seed(0)
    info = run_info(args.commit)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **info, "dtype": args.dtype,
              "max_sets": args.max_sets, "heuristic": [], "tuned": [], "tuned_ns": {}, "failed": {},
              "budget_stopped": None}

    def save():
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    def over_budget(what):
        if time.time() - t_start > args.budget_s:
            result["budget_stopped"] = what
            print(f"  budget of {args.budget_s:.0f} s reached at {what}", flush=True)
            return True
        return False

    # 1. Heuristic configs for every (pass, M, N), fetched concurrently before anything is tuned.
    keys = [(pas, m, n) for pas in passes for m in ms for n in ns]

    def get_heuristic(key):
        pas, m, n = key
        cubin = f"{args.workdir}/cliff_h_{pas}_{m}x{n}.cubin"
        return nb.fetch_answer(args, nb.problem_flags("rmsnorm", pas, m, n, args.dtype), cubin, "heuristic"), cubin

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {k: pool.submit(get_heuristic, k) for k in keys}
        heur = {}
        stopped = False
        for k in keys:
            if stopped or over_budget(f"heuristic {k}"):
                stopped = True
                futures[k].cancel()
                continue
            try:
                answer, cubin = futures[k].result()
                heur[k] = measure(args, k[1], k[2], k[0], answer, cubin)
                result["heuristic"].append(heur[k])
            except Exception as e:
                result["failed"][f"heuristic {k}"] = nb.short_reason(e)
                print(f"  heuristic {k} FAILED: {nb.short_reason(e)}", flush=True)
            if len(result["heuristic"]) % 50 == 0:
                save()
    print(f"  heuristic sweep: {len(heur)} cases in {time.time() - t0:.0f} s", flush=True)
    save()

    # 2. The tuned subset: the regular grid, plus each flagged N and its neighbours.
    tuned = {}
    if not args.no_tune and not result["budget_stopped"]:
        for pas in passes:
            for m in ms:
                times = {n: heur[(pas, m, n)]["us_per_mb"] for n in ns if (pas, m, n) in heur}
                ratios = cliff_ratios(times)
                worst = sorted(ratios, key=ratios.get, reverse=True)[:10]
                flagged = {n for n in ratios if ratios[n] > args.flag} | set(worst)
                grid = {n for n in ns if (n <= args.dense_max and n % args.tune_every_small == 0)
                        or (n > args.dense_max and n % args.tune_every_large == 0)}
                sweep = sorted(times)
                around = set()
                for n in flagged:
                    i = sweep.index(n)
                    around |= set(sweep[max(i - 1, 0):i + 2])
                subset = sorted(grid | around)
                result["tuned_ns"][f"{pas} {m}"] = {"grid": sorted(grid), "flagged": sorted(flagged),
                                                    "tuned": subset}
                # Flagged N first: they are what the tuned pass is for.
                order = sorted(around) + [n for n in sorted(grid) if n not in around]
                for n in order:
                    if over_budget(f"tune {pas} {m}x{n}"):
                        break
                    cubin = f"{args.workdir}/cliff_t_{pas}_{m}x{n}.cubin"
                    try:
                        answer, tune_s = nb.tuned_answer(args, nb.problem_flags("rmsnorm", pas, m, n, args.dtype),
                                                         cubin)
                        row = measure(args, m, n, pas, answer, cubin)
                        row["tune_s"] = tune_s
                        h = heur.get((pas, m, n))
                        if h:
                            row["vs_heuristic"] = h["us"] / row["us"]
                        tuned[(pas, m, n)] = row
                        result["tuned"].append(row)
                    except Exception as e:
                        result["failed"][f"tuned {pas} {m}x{n}"] = nb.short_reason(e)
                        print(f"  tuned {pas} {m}x{n} FAILED: {nb.short_reason(e)}", flush=True)
                    save()
                if result["budget_stopped"]:
                    break
            if result["budget_stopped"]:
                break
    save()

    # 3. The report.
    lines = [f"RMSNorm {args.dtype} cliff check on {torch.cuda.get_device_name()}: time per byte at N over the "
             f"mean of its sweep neighbours' (dense: N-8, N+8); ours launched from the recipe, CUDA-graph replay"]
    for pas in passes:
        for m in ms:
            times = {n: heur[(pas, m, n)]["us_per_mb"] for n in ns if (pas, m, n) in heur}
            not_heur = [n for n in times if heur[(pas, m, n)]["source"] != "HEURISTIC"]
            ratios = cliff_ratios(times)
            if not ratios:
                continue
            worst = sorted(ratios, key=ratios.get, reverse=True)[:10]
            lines.append("")
            lines.append(f"rmsnorm.{pas} M={m}, heuristic config: {len(times)} N, worst ratio "
                         f"{ratios[worst[0]]:.3f}x at N={worst[0]}; "
                         f"{sum(1 for r in ratios.values() if r > args.flag)} N above {args.flag:g}x")
            if not_heur:
                lines.append(f"  (not heuristic answers, the store held entries: N={not_heur[:12]})")
            lines.append(f"  {'N':>6} {'ratio':>6} {'us':>8} {'TB/s':>5} | {'tuned us':>8} {'TB/s':>5} "
                         f"{'ratio':>6} {'vs heur':>7} | heuristic config")
            tuned_times = {n: tuned[(pas, m, n)]["us_per_mb"] for n in ns if (pas, m, n) in tuned}
            tuned_ratios = {}
            for n in worst:  # the tuned ratio over the same neighbours, when all three were tuned
                i = sorted(times).index(n)
                lo, hi = sorted(times)[i - 1], sorted(times)[i + 1]
                if all(k in tuned_times for k in (lo, n, hi)):
                    tuned_ratios[n] = tuned_times[n] / ((tuned_times[lo] + tuned_times[hi]) / 2)
            for n in worst:
                h = heur[(pas, m, n)]
                t = tuned.get((pas, m, n))
                if t:
                    tr_txt = f"{tuned_ratios[n]:6.3f}" if n in tuned_ratios else f"{'-':>6}"
                    tt = f"{t['us']:8.2f} {t['tbs']:5.2f} {tr_txt}"
                else:
                    tt = f"{'-':>8} {'-':>5} {'-':>6}"
                vs = f"{t['vs_heuristic']:6.3f}x" if t and "vs_heuristic" in t else f"{'-':>7}"
                lines.append(f"  {n:>6} {ratios[n]:6.3f} {h['us']:8.2f} {h['tbs']:5.2f} | {tt} {vs} | "
                             f"{nb.cfg_text(h['config'])}")
            if tuned_times:
                tr = cliff_ratios(tuned_times)
                tworst = sorted(tr, key=tr.get, reverse=True)[:5]
                sub = result["tuned_ns"].get(f"{pas} {m}", {})
                lines.append(f"  tuned subset ({len(tuned_times)} of {len(sub.get('tuned', []))} planned N: every "
                             f"{args.tune_every_small}th to {args.dense_max}, every {args.tune_every_large}th after, "
                             f"flagged {sub.get('flagged', [])} and their neighbours); worst tuned-to-tuned-neighbour "
                             f"ratio: " + ", ".join(f"N={n} {tr[n]:.3f}x" for n in tworst))
                gains = [r["vs_heuristic"] for (p, mm, _), r in tuned.items() if p == pas and mm == m
                         and "vs_heuristic" in r]
                if gains:
                    lines.append(f"  tuned over heuristic: min {min(gains):.3f}x, max {max(gains):.3f}x, "
                                 f"median {sorted(gains)[len(gains) // 2]:.3f}x")
    if result["budget_stopped"]:
        lines.append(f"\nstopped by the {args.budget_s:.0f} s budget at {result['budget_stopped']}")
    for k, why in result["failed"].items():
        lines.append(f"FAILED {k}: {why}")
    result["report"] = lines
    save()
    print("\n".join(lines))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
