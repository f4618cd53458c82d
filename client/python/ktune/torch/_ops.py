"""The custom ops: each call is decided (ktune.serving), then launched through
the recipe of its answer or computed by torch's own ops.

CUDA graphs: a call's answer and module load happen at its first call with
that shape, outside capture; a call first seen while a stream is capturing
falls back (so does a recipe needing the launcher's workspace on a stream it
has never launched on, since the workspace is allocated at first launch).
Warm up on the capture's stream, as torch's CUDA graph documentation asks.

Direct calls: an eager call that needs no autograd (inference, decode) skips
torch's dispatcher and goes straight to the decision and the launch. The
dispatcher's custom-op layers (autograd wrapper, redispatch, the aliasing
check, the dynamo-disable wrapper) cost about 12 us a call on the host, 60%
more than the rest of the call (bench/torch_op_overhead.py;
bench/results/2026-12-04-llama-layer-4b78840.md), and decode steps without
CUDA graphs are host-bound.
Anything the dispatcher must see still goes through it: Dynamo tracing
(torch.compile), a dispatch mode (FakeTensorMode, make_fx, FlopCounterMode),
tensor subclasses and functorch transforms, and autograd.

Thread-safety: as ktune.serving.Planner; configure() is not meant to race calls.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .. import errors
from ..cache import AnswerCache
from ..client import Client
from ..problems import POLICIES
from ..recipe import BindingError
from ..serving import Planner, decide_linear, decide_norm, linear_layouts, norm_layouts, warn_once
from ..v1 import ktune_pb2 as pb

Tensor = torch.Tensor
_PLAIN = (torch.Tensor, torch.nn.Parameter)

try:  # private torch APIs, each with a public (slower or coarser) stand-in
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # pragma: no cover - older torch
    def _get_current_dispatch_mode():
        return True  # unknown: never skip the dispatcher
try:
    from torch._C._functorch import is_functorch_wrapped_tensor as _functorch_wrapped
except ImportError:  # pragma: no cover
    def _functorch_wrapped(t):
        return True
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

_NAMES = {}

_settings = {"address": None, "policy": pb.HEURISTIC_ON_MISS, "token": None, "timeout_s": 30.0}
_planner = None


def configure(address=None, policy=None, token=None, timeout_s=None):
    """Where answers come from, and how: policy "heuristic" (default: the cache
    or at once a heuristic config, never blocking on a tune), "tune" (tune on a
    miss and wait) or "cached". Forgets every answer and plan made so far."""
    global _planner
    if address is not None:
        _settings["address"] = address
    if policy is not None:
        _settings["policy"] = POLICIES[policy] if isinstance(policy, str) else policy
    if token is not None:
        _settings["token"] = token
    if timeout_s is not None:
        _settings["timeout_s"] = timeout_s
    _planner = None


def planner():
    """The process's Planner (made from configure()'s settings at first use)."""
    global _planner
    if _planner is None:
        client = Client(_settings["address"], token=_settings["token"], timeout_s=_settings["timeout_s"])
        _planner = Planner(AnswerCache(client, include_cubin=True), _settings["policy"])
    return _planner


def _name(t):
    if t is None:
        return None
    name = _NAMES.get(t.dtype)
    if name is None:
        name = _NAMES[t.dtype] = str(t.dtype).replace("torch.", "")
    return name


def _shape(t):
    return None if t is None else tuple(t.shape)


def _device(x):
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


def _direct(*tensors):
    """True when a call may skip torch's dispatcher (see the module's docstring)."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or (grad and t.requires_grad) or _functorch_wrapped(t)):
            return False
    return True


def _stream(x, device):
    """x's device's current stream, as a raw cudaStream_t."""
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(x.device).cuda_stream


def _run(key, x, buffers_fn, layouts_fn):
    """Launches key's recipe on x's device and current stream; None, or the reason it did not."""
    p = planner()
    device = _device(x)
    capturing = torch.cuda.is_current_stream_capturing()
    got = p.cached(key, device) if capturing else p.plan(key, device, layouts_fn)
    if got is None:
        return "first call of this shape during CUDA graph capture: run it once before capturing"
    plan, reason = got
    if reason is not None:
        return reason
    stream = _stream(x, device)
    if plan.workspace and stream not in plan.streams:
        if capturing:
            return "a recipe with a workspace, on a stream first used during CUDA graph capture"
        plan.streams.add(stream)
    try:
        plan.recipe.launch(plan.binding.addresses(buffers_fn()), stream)
    except (errors.Error, BindingError) as e:
        return f"the launch failed: {e}"
    return None


# ---------------------------------------------------------------- torch's own computations


def _ref_norm_fwd(x, weight, bias, eps, layernorm, out_dtype):
    xf = x.float()
    if layernorm:
        mean = xf.mean(-1, keepdim=True)
        xc = xf - mean
    else:
        mean, xc = None, xf
    rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    y = xc * rstd
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    rows = x.numel() // x.shape[-1]
    mean = mean.reshape(rows) if mean is not None else x.new_empty((rows,), dtype=torch.float32)
    return y.to(out_dtype), mean, rstd.reshape(rows)


def _ref_norm_bwd(dy, x, weight, mean, rstd, layernorm, has_bias):
    n = x.shape[-1]
    xf = x.float().reshape(-1, n)
    dyf = dy.float().reshape(-1, n)
    r = rstd.reshape(-1, 1)
    xhat = ((xf - mean.reshape(-1, 1)) if layernorm else xf) * r
    g = dyf * weight.float() if weight is not None else dyf
    inner = (g * xhat).mean(-1, keepdim=True)
    dx = r * (g - xhat * inner - (g.mean(-1, keepdim=True) if layernorm else 0.0))
    dw = (dyf * xhat).sum(0).to(weight.dtype) if weight is not None else x.new_empty((0,))
    db = dyf.sum(0).to(weight.dtype) if has_bias else x.new_empty((0,))
    return dx.reshape(x.shape).to(x.dtype), dw, db


def _out_dtype(x, weight):
    return torch.promote_types(x.dtype, weight.dtype) if weight is not None else x.dtype


# ---------------------------------------------------------------- norms


def _norm_fwd(op, x, weight, bias, eps):
    layernorm = op == "layernorm"
    out_dtype = _out_dtype(x, weight)
    d = decide_norm(op, "fwd", x.device.type, _name(x), tuple(x.shape), x.stride(), _name(weight),
                    _shape(weight), _name(bias), _shape(bias), eps)
    reason = d.reason
    if reason is None:
        key = d.key
        m, n = key[3], key[4]
        y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
        mean = torch.empty((m,), dtype=torch.float32, device=x.device) if layernorm else None
        rstd = torch.empty((m,), dtype=torch.float32, device=x.device)

        def buffers():
            out = {"x": x.data_ptr(), "y": y.data_ptr(), "rstd": rstd.data_ptr()}
            if layernorm:
                out["mean"] = mean.data_ptr()
                if bias is not None:
                    out["b"] = bias.data_ptr()
            if weight is not None:
                out["w"] = weight.data_ptr()
            return out

        reason = _run(key, x, buffers, lambda: norm_layouts(key))
        if reason is None:
            return y, mean, rstd
    warn_once(reason)
    return _ref_norm_fwd(x, weight, bias, eps, layernorm, out_dtype)


def _norm_bwd(op, dy, x, weight, has_bias, mean, rstd, eps):
    layernorm = op == "layernorm"
    dy = dy.contiguous()
    d = decide_norm(op, "bwd", x.device.type, _name(x), tuple(x.shape), x.stride(), _name(weight),
                    _shape(weight), _name(weight) if has_bias else None, _shape(weight) if has_bias else None, eps,
                    dy_dtype=_name(dy))
    reason = d.reason
    if reason is None:
        key = d.key
        m, n = key[3], key[4]
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        wdtype = weight.dtype if weight is not None else x.dtype
        dw = torch.empty((n,) if weight is not None else (0,), dtype=wdtype, device=x.device)
        db = torch.empty((n,) if has_bias else (0,), dtype=wdtype, device=x.device)

        def buffers():
            out = {"x": x.data_ptr(), "dy": dy.data_ptr(), "rstd": rstd.data_ptr(), "dx": dx.data_ptr()}
            if weight is not None:
                out["w"] = weight.data_ptr()
                out["dw"] = dw.data_ptr()
            if layernorm:
                out["mean"] = mean.data_ptr()
            if has_bias:
                out["db"] = db.data_ptr()
            return out

        reason = _run(key, x, buffers, lambda: norm_layouts(key))
        if reason is None:
            return dx, dw, db
    warn_once(reason)
    return _ref_norm_bwd(dy, x, weight, mean, rstd, layernorm, has_bias)


@torch.library.custom_op("ktune::rms_norm_fwd", mutates_args=())
def _rms_norm_fwd(x: Tensor, weight: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    y, _, rstd = _norm_fwd("rmsnorm", x, weight, None, eps)
    return y, rstd


@_rms_norm_fwd.register_fake
def _(x, weight, eps):
    rows = x.shape[:-1].numel()
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight)), x.new_empty((rows,), dtype=torch.float32)


@torch.library.custom_op("ktune::rms_norm_bwd", mutates_args=())
def _rms_norm_bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    dx, dw, _ = _norm_bwd("rmsnorm", dy, x, weight, False, rstd, rstd, eps)
    return dx, dw


@_rms_norm_bwd.register_fake
def _(dy, x, weight, rstd, eps):
    dw = weight.new_empty(weight.shape) if weight is not None else x.new_empty((0,))
    return x.new_empty(x.shape), dw


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.eps = eps


def _rms_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _rms_norm_bwd(dy, x, weight, rstd, ctx.eps)
    return dx, (dw if weight is not None else None), None


_rms_norm_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


@torch.library.custom_op("ktune::layer_norm_fwd", mutates_args=())
def _layer_norm_fwd(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                    eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    return _norm_fwd("layernorm", x, weight, bias, eps)


@_layer_norm_fwd.register_fake
def _(x, weight, bias, eps):
    rows = x.shape[:-1].numel()
    stat = x.new_empty((rows,), dtype=torch.float32)
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight)), stat, stat.new_empty((rows,))


@torch.library.custom_op("ktune::layer_norm_bwd", mutates_args=())
def _layer_norm_bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], has_bias: bool, mean: Tensor, rstd: Tensor,
                    eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    return _norm_bwd("layernorm", dy, x, weight, has_bias, mean, rstd, eps)


@_layer_norm_bwd.register_fake
def _(dy, x, weight, has_bias, mean, rstd, eps):
    dw = weight.new_empty(weight.shape) if weight is not None else x.new_empty((0,))
    db = weight.new_empty(weight.shape) if (weight is not None and has_bias) else x.new_empty((0,))
    return x.new_empty(x.shape), dw, db


def _ln_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.eps = eps
    ctx.has_bias = bias is not None


def _ln_backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_bwd(dy, x, weight, ctx.has_bias, mean, rstd, ctx.eps)
    return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None


_layer_norm_fwd.register_autograd(_ln_backward, setup_context=_ln_setup)


def rms_norm(x, weight=None, eps=1e-6):
    """RMSNorm over x's last dimension: x * rsqrt(mean(x^2) + eps) * weight (computed in fp32)."""
    if _direct(x, weight):
        return _norm_fwd("rmsnorm", x, weight, None, float(eps))[0]
    return _rms_norm_fwd(x, weight, float(eps))[0]


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """LayerNorm over x's last dimension, as torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)."""
    if _direct(x, weight, bias):
        return _norm_fwd("layernorm", x, weight, bias, float(eps))[0]
    return _layer_norm_fwd(x, weight, bias, float(eps))[0]


# ---------------------------------------------------------------- linear

_ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu}


def _activate(z, activation):
    return _ACTIVATIONS[activation](z) if activation else z


def _linear_impl(x, weight, bias, activation):
    act = activation or None
    d = decide_linear(x.device.type, _name(x), tuple(x.shape), x.stride(), _name(weight), tuple(weight.shape),
                      weight.stride(), _name(bias), _shape(bias), act)
    reason = d.reason
    if reason is None:
        key = d.key
        n = key[2]
        y = torch.empty(x.shape[:-1] + (n,), dtype=x.dtype, device=x.device)

        def buffers():
            out = {"a": x.data_ptr(), "b": weight.data_ptr(), "d": y.data_ptr()}
            if bias is not None:
                out["bias"] = bias.data_ptr()
            return out

        reason = _run(key, x, buffers, lambda: linear_layouts(key))
        if reason is None:
            # Without a bias ktune's epilogues have no activation: it follows the GEMM.
            return y if bias is not None or act is None else _activate(y, act)
    warn_once(reason)
    return _activate(F.linear(x, weight, bias), act)


@torch.library.custom_op("ktune::linear", mutates_args=())
def _linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    return _linear_impl(x, weight, bias, activation)


@_linear.register_fake
def _(x, weight, bias, activation):
    return x.new_empty(x.shape[:-1] + (weight.shape[0],))


def _linear_setup(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.activation = activation or None


def _activation_grad(z, activation):
    """d act(z) / dz, in fp32: silu and gelu's erf form, as torch differentiates them."""
    z = z.float()
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
    return cdf + z * torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))


def _linear_backward(ctx, dy):
    # torch's matmuls; with an activation the pre-activation is recomputed
    # (ktune's fused epilogue does not keep it).
    x, weight, bias = ctx.saved_tensors
    if ctx.activation:
        z = F.linear(x, weight, bias)
        dz = (dy.float() * _activation_grad(z, ctx.activation)).to(dy.dtype)
    else:
        dz = dy
    dz2 = dz.reshape(-1, dz.shape[-1])
    dx = dz @ weight if ctx.needs_input_grad[0] else None
    dw = dz2.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
    db = dz2.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
    return dx, dw, db, None


_linear.register_autograd(_linear_backward, setup_context=_linear_setup)


def linear(x, weight, bias=None, activation=None):
    """act(x @ weight.T + bias), act None, "gelu" (erf form) or "silu", over ktune's GEMM recipes."""
    if _direct(x, weight, bias):
        return _linear_impl(x, weight, bias, activation or "")
    return _linear(x, weight, bias, activation or "")

