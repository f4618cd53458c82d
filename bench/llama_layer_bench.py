#!/usr/bin/env python3
"""One Llama-3-8B-shaped decoder layer, timed as torch runs it and with ktune.torch.patch.

  python3 bench/llama_layer_bench.py --out results.json [--modes eager,compile,ktune+compile]
      [--decode-batches 1,8,64] [--train 1x8192] [--kv 2048] [--tune wait|heuristic] [--graphs 0|1]

The layer is plain torch (random bf16 weights, shapes from a Hugging Face
config.json): Hugging Face style RMSNorm modules (weight, variance_epsilon),
q/k/v/o and gate/up/down nn.Linear without bias, RoPE, SDPA attention with
grouped KV heads, a SiLU-gated MLP. Workloads: a training step (forward and
backward over B x S tokens) and decode steps (one new token per sequence for
batch 1, 8, 64 against a KV cache of --kv tokens). With --graphs 1 (the
default) each decode step is also timed as a CUDA graph replay, as serving
engines run decode: that removes every mode's host cost (Python, Dynamo's
guards, Inductor's launches, ktune's custom ops) and leaves the kernels.

Modes (each a fresh copy of one layer, so every mode computes the same function):
  eager, compile (torch.compile default), max-autotune (mode
  max-autotune-no-cudagraphs), ktune (ktune.torch.patch of the norms),
  ktune+compile, ktune+max-autotune, ktune-gemm (the norms and the nn.Linears:
  patch(layer, linears=True)) and its +compile and +max-autotune, liger and
  liger+compile (Liger-Kernel's RMSNorm and SwiGLU, when `import liger_kernel` works).

Before timing, the ktune answers for every problem the patched layer asks are made
(--tune wait: the policy that tunes on a miss and waits; heuristic: the cache or a
heuristic config), the patched layer's outputs and gradients are checked against
the unpatched layer's, then each mode is timed with CUDA events (median of many
steps) and profiled once (the share of kernel time in norms, GEMMs, attention).
Results are written to --out after every measurement, so a run cut short keeps
what it measured; --budget-s skips what would start after that many seconds.
"""
import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_MODES = ["eager", "compile", "max-autotune", "ktune", "ktune+compile", "ktune+max-autotune", "ktune-gemm",
             "ktune-gemm+compile", "ktune-gemm+max-autotune", "liger", "liger+compile"]


# ---------------------------------------------------------------- the layer, in plain torch


class LlamaRMSNorm(nn.Module):
    """Hugging Face's formula and attribute names (what ktune.torch.patch recognises)."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.o_proj = nn.Linear(heads * self.dim, hidden, bias=False)

    def forward(self, x, cos, sin, cache=None):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        q, k = rope(q, k, cos, sin)
        if cache is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode: the new token goes to the cache's last slot, attending to all of it
            k_cache, v_cache = cache
            k_all = torch.cat((k_cache[:, :, 1:], k), dim=2)
            v_all = torch.cat((v_cache[:, :, 1:], v), dim=2)
            out = F.scaled_dot_product_attention(q, k_all, v_all, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.dim))


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.input_layernorm = LlamaRMSNorm(h, cfg["rms_norm_eps"])
        self.self_attn = Attention(h, cfg["num_attention_heads"], cfg["num_key_value_heads"])
        self.post_attention_layernorm = LlamaRMSNorm(h, cfg["rms_norm_eps"])
        self.mlp = MLP(h, cfg["intermediate_size"])

    def forward(self, x, cos, sin, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


def rope_tables(cfg, positions, device):
    dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, device=device).float() / dim))
    freqs = torch.outer(positions.float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


# ---------------------------------------------------------------- modes


def liger_patch(layer):
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    for name in ("input_layernorm", "post_attention_layernorm"):
        old = getattr(layer, name)
        new = LigerRMSNorm(old.weight.shape[0], eps=old.variance_epsilon).to(old.weight.device, old.weight.dtype)
        new.weight = old.weight
        setattr(layer, name, new)
    mlp = layer.mlp
    mlp.forward = lambda x: mlp.down_proj(LigerSiLUMulFunction.apply(mlp.gate_proj(x), mlp.up_proj(x)))
    return layer


def build_mode(mode, base):
    # Every mode's layer runs the same forward code object, and Dynamo keeps its
    # compiled entries per code object: without a reset each mode adds one (a
    # guard failure on the module types or grad mode), every call checks the
    # earlier ones first, and past torch._dynamo.config.recompile_limit (8)
    # Dynamo silently runs the frame eagerly.
    torch._dynamo.reset()
    layer = copy.deepcopy(base)
    if mode.startswith("ktune"):
        import ktune.torch as kt
        kt.patch(layer, linears=mode.startswith("ktune-gemm"))
    if mode.startswith("liger"):
        liger_patch(layer)
    if mode.endswith("compile"):
        return torch.compile(layer, dynamic=False)
    if mode.endswith("max-autotune"):
        return torch.compile(layer, mode="max-autotune-no-cudagraphs", dynamic=False)
    return layer


# ---------------------------------------------------------------- workloads


class Train:
    def __init__(self, cfg, batch, seq, device):
        self.name = f"train {batch}x{seq}"
        torch.manual_seed(1)
        self.x = torch.randn(batch, seq, cfg["hidden_size"], device=device, dtype=torch.bfloat16)
        self.dy = torch.randn_like(self.x) * 0.01
        self.cos, self.sin = rope_tables(cfg, torch.arange(seq, device=device), device)

    def step(self, layer):
        x = self.x.detach().requires_grad_()
        for p in layer.parameters():
            p.grad = None
        out = layer(x, self.cos, self.sin)
        out.backward(self.dy)
        return out, x.grad

    def outputs(self, layer):
        out, dx = self.step(layer)
        grads = [p.grad for p in layer.parameters()]
        return [out, dx] + grads


class Decode:
    def __init__(self, cfg, batch, kv, device):
        self.name = f"decode b{batch} kv{kv}"
        torch.manual_seed(2)
        heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        dim = cfg["hidden_size"] // heads
        self.x = torch.randn(batch, 1, cfg["hidden_size"], device=device, dtype=torch.bfloat16)
        shape = (batch, kv_heads, kv, dim)
        self.cache = (torch.randn(shape, device=device, dtype=torch.bfloat16),
                      torch.randn(shape, device=device, dtype=torch.bfloat16))
        self.cos, self.sin = rope_tables(cfg, torch.tensor([kv - 1], device=device), device)

    def step(self, layer):
        with torch.no_grad():
            return layer(self.x, self.cos, self.sin, self.cache)

    def outputs(self, layer):
        return [self.step(layer)]


class GraphedDecode:
    """A decode step captured once per layer as a CUDA graph; a step is its replay.

    Warm-up runs on the capture's side stream first (torch's CUDA graph rules):
    it compiles, and makes every ktune answer and module load, before capture.
    """

    def __init__(self, decode):
        self.decode = decode
        self.name = decode.name + " graph"
        self.graphs = {}  # id(layer) -> (graph, static output)

    def capture(self, layer):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.decode.step(layer)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            out = self.decode.step(layer)
        self.graphs[id(layer)] = (graph, out)
        return graph, out

    def step(self, layer):
        entry = self.graphs.get(id(layer)) or self.capture(layer)
        entry[0].replay()
        return entry[1]

    def outputs(self, layer):
        return [self.step(layer).clone()]

    def release(self, layer):
        self.graphs.pop(id(layer), None)


def time_steps(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return {"median_ms": statistics.median(ms), "p10_ms": ms[len(ms) // 10], "p90_ms": ms[(9 * len(ms)) // 10],
            "reps": reps}


def category(name):
    n = name.lower()
    if "rmsnorm" in n or "layernorm" in n or "layer_norm" in n or "rms_norm" in n or "norm_bwd" in n \
            or "rsqrt" in n:
        return "norm"
    if any(t in n for t in ("flash", "fmha", "attention", "sdpa", "efficient_attention")):
        return "attention"
    if any(t in n for t in ("gemm", "gemv", "xmma", "cutlass", "nvjet", "cublas", "wgmma", "mm_", "_mm",
                            "matmul", "sm90_", "triton_tem")):
        return "gemm"
    return "other"


def kernel_shares(fn):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    totals, names = {}, {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us <= 0:
            continue
        c = category(e.key)
        totals[c] = totals.get(c, 0.0) + us
        names.setdefault(c, []).append((us, e.key[:90]))
    whole = sum(totals.values()) or 1.0
    return {"share": {c: round(v / whole, 4) for c, v in sorted(totals.items())},
            "kernel_us": round(whole, 1),
            "top": {c: [n for _, n in sorted(v, reverse=True)[:3]] for c, v in names.items()}}


def max_rel_error(got, want):
    worst = 0.0
    for g, w in zip(got, want):
        if g is None or w is None:
            continue
        g, w = g.float(), w.float()
        worst = max(worst, ((g - w).norm() / (w.norm() + 1e-12)).item())
    return worst


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(HERE, "..", "tests", "data", "llama-3-8b.config.json"))
    ap.add_argument("--modes", default="eager,compile,max-autotune,ktune,ktune+compile,liger+compile",
                    help=f"comma-separated, of {ALL_MODES}")
    ap.add_argument("--decode-modes", default=None,
                    help="modes for the decode steps (default: --modes without the max-autotune ones)")
    ap.add_argument("--train", default="1x8192", help="BATCHxSEQ of the training step ('' skips it)")
    ap.add_argument("--decode-batches", default="1,8,64", help="'' skips decode")
    ap.add_argument("--kv", type=int, default=2048, help="KV cache tokens in decode")
    ap.add_argument("--tune", choices=["wait", "heuristic"], default="wait",
                    help="wait: tune each ktune problem on its first call (TUNE_ON_MISS); heuristic: do not tune")
    ap.add_argument("--graphs", type=int, choices=[0, 1], default=1,
                    help="1: time each decode step also as a CUDA graph replay")
    ap.add_argument("--server", default=None, help="ktuned address (default: KTUNE_ADDRESS)")
    ap.add_argument("--train-reps", type=int, default=20)
    ap.add_argument("--decode-reps", type=int, default=200)
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip measurements that would start later")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    began = time.monotonic()
    cfg = json.load(open(args.config))
    device = torch.device("cuda")
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        sys.exit(f"unknown modes {bad}: expected {ALL_MODES}")
    decode_modes = ([m for m in args.decode_modes.split(",") if m] if args.decode_modes is not None
                    else [m for m in modes if "max-autotune" not in m])
    notes = []
    try:
        import liger_kernel  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure makes Liger absent
        if any(m.startswith("liger") for m in modes + decode_modes):
            notes.append(f"liger modes skipped: import liger_kernel failed ({e})")
        modes = [m for m in modes if not m.startswith("liger")]
        decode_modes = [m for m in decode_modes if not m.startswith("liger")]
    uses_ktune = any(m.startswith("ktune") for m in modes + decode_modes)
    if uses_ktune:
        import ktune.torch as kt
        kt.configure(address=args.server, policy="tune" if args.tune == "wait" else "heuristic", timeout_s=600)

    torch.manual_seed(0)
    base = DecoderLayer(cfg).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in base.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
            else:
                p.uniform_(0.5, 1.5)

    workloads = []
    if args.train:
        b, s = (int(v) for v in args.train.lower().split("x"))
        workloads.append((Train(cfg, b, s, device), modes, args.train_reps))
    for b in [int(v) for v in args.decode_batches.split(",") if v]:
        workloads.append((Decode(cfg, b, args.kv, device), decode_modes, args.decode_reps))
    if args.graphs:
        workloads += [(GraphedDecode(w), m, r) for w, m, r in workloads if isinstance(w, Decode)]

    result = {"config": os.path.basename(args.config), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(), "args": vars(args), "notes": notes, "workloads": {}}

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)

    eager = base
    for work, work_modes, reps in workloads:
        entry = result["workloads"].setdefault(work.name, {"modes": {}})
        reference = work.outputs(eager)
        for mode in work_modes:
            if time.monotonic() - began > args.budget_s:
                entry["modes"][mode] = {"skipped": f"past --budget-s {args.budget_s}"}
                save()
                continue
            t0 = time.monotonic()
            layer = build_mode(mode, base)
            step = (lambda layer=layer: work.step(layer))
            got = work.outputs(layer)  # compiles; for ktune modes, makes (tunes) every answer
            rec = {"prepare_s": round(time.monotonic() - t0, 1), "max_rel_error_vs_eager": max_rel_error(got, reference)}
            rec["verified"] = rec["max_rel_error_vs_eager"] < 2e-2
            rec.update(time_steps(step, 3, reps))
            if not args.no_profile:
                try:
                    rec["kernels"] = kernel_shares(step)
                except Exception as e:  # noqa: BLE001 - a profiler failure must not lose the timing
                    rec["kernels"] = {"error": str(e)}
            entry["modes"][mode] = rec
            if hasattr(work, "release"):
                work.release(layer)
            del layer, got
            save()
        base_ms = entry["modes"].get("compile", {}).get("median_ms")
        for rec in entry["modes"].values():
            if base_ms and "median_ms" in rec:
                rec["speedup_vs_compile"] = round(base_ms / rec["median_ms"], 4)
        save()

    if uses_ktune:
        import ktune.torch as kt
        from ktune.v1 import ktune_pb2 as pb
        answers = []
        for (key, _), plan in kt.planner().entries().items():
            if hasattr(plan, "answer"):
                answers.append({"key": list(key), "source": pb.Source.Name(plan.answer.source),
                                "template": plan.answer.recipe.template_id})
            else:
                answers.append({"key": list(key), "fallback": plan[0]})
        result["ktune_answers"] = answers
    result["wall_s"] = round(time.monotonic() - began, 1)
    save()

    print(f"\n{'workload':22} {'mode':20} {'median ms':>10} {'vs compile':>10} {'norm':>6} {'gemm':>6} "
          f"{'attn':>6} {'ok':>3}")
    for name, entry in result["workloads"].items():
        for mode, rec in entry["modes"].items():
            if "median_ms" not in rec:
                print(f"{name:22} {mode:20} {rec.get('skipped', '')}")
                continue
            share = rec.get("kernels", {}).get("share", {})
            print(f"{name:22} {mode:20} {rec['median_ms']:10.3f} {rec.get('speedup_vs_compile', math.nan):10.3f} "
                  f"{share.get('norm', 0):6.1%} {share.get('gemm', 0):6.1%} {share.get('attention', 0):6.1%} "
                  f"{'y' if rec['verified'] else 'NO':>3}")
    for n in notes:
        print("note:", n)
    print(f"wall {result['wall_s']} s; JSON: {args.out}")


if __name__ == "__main__":
    main()
