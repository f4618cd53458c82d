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

E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max: the kernel saturates there


def _gain(weight, weight_offset):
    """The factor the norm multiplies by, in fp32: w, or Gemma's (1 + w)."""
    return weight.float() + 1.0 if weight_offset else weight.float()


def _ref_norm_fwd(x, weight, bias, eps, layernorm, out_dtype, weight_offset=False):
    xf = x.float()
    if layernorm:
        mean = xf.mean(-1, keepdim=True)
        xc = xf - mean
    else:
        mean, xc = None, xf
    rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    y = xc * rstd
    if weight is not None:
        y = y * _gain(weight, weight_offset)
    if bias is not None:
        y = y + bias.float()
    rows = x.numel() // x.shape[-1]
    mean = mean.reshape(rows) if mean is not None else x.new_empty((rows,), dtype=torch.float32)
    return y.to(out_dtype), mean, rstd.reshape(rows)


def _ref_add_residual(x, residual):
    """h = x + residual in fp32, rounded to x's dtype, written into residual (as the kernel does)."""
    residual.copy_((x.float() + residual.float()).to(x.dtype))
    return residual


def _ref_quantize(yf, scale):
    # The kernel multiplies by 1 / scale (vLLM's convention) and saturates.
    return (yf * scale.float().reciprocal()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _ref_norm_bwd(dy, x, weight, mean, rstd, layernorm, has_bias, weight_offset=False, dresidual=None):
    n = x.shape[-1]
    xf = x.float().reshape(-1, n)
    dyf = dy.float().reshape(-1, n)
    r = rstd.reshape(-1, 1)
    xhat = ((xf - mean.reshape(-1, 1)) if layernorm else xf) * r
    g = dyf * _gain(weight, weight_offset) if weight is not None else dyf
    inner = (g * xhat).mean(-1, keepdim=True)
    dx = r * (g - xhat * inner - (g.mean(-1, keepdim=True) if layernorm else 0.0))
    if dresidual is not None:
        dx = dx + dresidual.float().reshape(-1, n)
    dw = (dyf * xhat).sum(0).to(weight.dtype) if weight is not None else x.new_empty((0,))
    db = dyf.sum(0).to(weight.dtype) if has_bias else x.new_empty((0,))
    return dx.reshape(x.shape).to(x.dtype), dw, db


def _out_dtype(x, weight):
    return torch.promote_types(x.dtype, weight.dtype) if weight is not None else x.dtype


def _shares_memory(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ---------------------------------------------------------------- norms


def _norm_fwd(op, x, weight, bias, eps, weight_offset=False, residual=None, scale=None):
    """(y, mean, rstd). residual: updated in place to h = x + residual, and normalized instead of x.
    scale: y is e4m3, divided by it."""
    layernorm = op == "layernorm"
    out_dtype = torch.float8_e4m3fn if scale is not None else _out_dtype(x, weight)
    # Positional: decide_norm is memoised on its arguments, and this is every call's path.
    d = decide_norm(op, "fwd", x.device.type, _name(x), tuple(x.shape), x.stride(), _name(weight),
                    _shape(weight), _name(bias), _shape(bias), eps, None, _name(residual), _shape(residual),
                    residual.stride() if residual is not None else None, weight_offset, scale is not None,
                    _name(scale), _shape(scale))
    reason = d.reason
    if reason is None and residual is not None and _shares_memory(residual, x):
        reason = f"{op}: the residual shares memory with x; the kernel rewrites it while reading x"
    if reason is None and scale is not None and scale.device != x.device:
        reason = f"{op}: the fp8 scale is on {scale.device}, x on {x.device}"
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
            if residual is not None:
                out["residual"] = residual.data_ptr()
            if scale is not None:
                out["scale"] = scale.data_ptr()
            return out

        reason = _run(key, x, buffers, lambda: norm_layouts(key))
        if reason is None:
            return y, mean, rstd
    warn_once(reason)
    if residual is not None:
        x = _ref_add_residual(x, residual)
    y, mean, rstd = _ref_norm_fwd(x, weight, bias, eps, layernorm, torch.float32 if scale is not None else out_dtype,
                                  weight_offset)
    return (_ref_quantize(y, scale) if scale is not None else y), mean, rstd


def _norm_bwd(op, dy, x, weight, has_bias, mean, rstd, eps, weight_offset=False, dresidual=None):
    """(dx, dw, db). dresidual: the fused residual add's backward, x being its h; dx includes dresidual."""
    layernorm = op == "layernorm"
    dy = dy.contiguous()
    dresidual = dresidual.contiguous() if dresidual is not None else None
    d = decide_norm(op, "bwd", x.device.type, _name(x), tuple(x.shape), x.stride(), _name(weight),
                    _shape(weight), _name(weight) if has_bias else None, _shape(weight) if has_bias else None, eps,
                    _name(dy), _name(dresidual), _shape(dresidual),
                    dresidual.stride() if dresidual is not None else None, weight_offset)
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
            if dresidual is not None:
                out["dresidual"] = dresidual.data_ptr()
            return out

        reason = _run(key, x, buffers, lambda: norm_layouts(key))
        if reason is None:
            return dx, dw, db
    warn_once(reason)
    return _ref_norm_bwd(dy, x, weight, mean, rstd, layernorm, has_bias, weight_offset, dresidual)


@torch.library.custom_op("ktune::rms_norm_fwd", mutates_args=())
def _rms_norm_fwd(x: Tensor, weight: Optional[Tensor], eps: float,
                  weight_offset: bool = False) -> Tuple[Tensor, Tensor]:
    y, _, rstd = _norm_fwd("rmsnorm", x, weight, None, eps, weight_offset)
    return y, rstd


@_rms_norm_fwd.register_fake
def _(x, weight, eps, weight_offset=False):
    rows = x.shape[:-1].numel()
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight)), x.new_empty((rows,), dtype=torch.float32)


@torch.library.custom_op("ktune::rms_norm_bwd", mutates_args=())
def _rms_norm_bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor, eps: float,
                  weight_offset: bool = False) -> Tuple[Tensor, Tensor]:
    dx, dw, _ = _norm_bwd("rmsnorm", dy, x, weight, False, rstd, rstd, eps, weight_offset)
    return dx, dw


@_rms_norm_bwd.register_fake
def _(dy, x, weight, rstd, eps, weight_offset=False):
    dw = weight.new_empty(weight.shape) if weight is not None else x.new_empty((0,))
    return x.new_empty(x.shape), dw


def _rms_setup(ctx, inputs, output):
    x, weight, eps, weight_offset = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.eps = eps
    ctx.weight_offset = weight_offset


def _rms_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _rms_norm_bwd(dy, x, weight, rstd, ctx.eps, ctx.weight_offset)
    return dx, (dw if weight is not None else None), None, None


_rms_norm_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


@torch.library.custom_op("ktune::layer_norm_fwd", mutates_args=())
def _layer_norm_fwd(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                    weight_offset: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    return _norm_fwd("layernorm", x, weight, bias, eps, weight_offset)


@_layer_norm_fwd.register_fake
def _(x, weight, bias, eps, weight_offset=False):
    rows = x.shape[:-1].numel()
    stat = x.new_empty((rows,), dtype=torch.float32)
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight)), stat, stat.new_empty((rows,))


@torch.library.custom_op("ktune::layer_norm_bwd", mutates_args=())
def _layer_norm_bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], has_bias: bool, mean: Tensor, rstd: Tensor,
                    eps: float, weight_offset: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    return _norm_bwd("layernorm", dy, x, weight, has_bias, mean, rstd, eps, weight_offset)


@_layer_norm_bwd.register_fake
def _(dy, x, weight, has_bias, mean, rstd, eps, weight_offset=False):
    dw = weight.new_empty(weight.shape) if weight is not None else x.new_empty((0,))
    db = weight.new_empty(weight.shape) if (weight is not None and has_bias) else x.new_empty((0,))
    return x.new_empty(x.shape), dw, db


def _ln_setup(ctx, inputs, output):
    x, weight, bias, eps, weight_offset = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.eps = eps
    ctx.has_bias = bias is not None
    ctx.weight_offset = weight_offset


def _ln_backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_bwd(dy, x, weight, ctx.has_bias, mean, rstd, ctx.eps, ctx.weight_offset)
    return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None, None


_layer_norm_fwd.register_autograd(_ln_backward, setup_context=_ln_setup)


def rms_norm(x, weight=None, eps=1e-6, weight_offset=False):
    """RMSNorm over x's last dimension: x * rsqrt(mean(x^2) + eps) * weight, or * (1 + weight) with
    weight_offset (Gemma), computed in fp32; y takes torch's promotion of x's and weight's dtypes."""
    if _direct(x, weight):
        return _norm_fwd("rmsnorm", x, weight, None, float(eps), bool(weight_offset))[0]
    return _rms_norm_fwd(x, weight, float(eps), bool(weight_offset))[0]


def layer_norm(x, weight=None, bias=None, eps=1e-5, weight_offset=False):
    """LayerNorm over x's last dimension, as torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps);
    weight_offset multiplies by (1 + weight) instead."""
    if _direct(x, weight, bias):
        return _norm_fwd("layernorm", x, weight, bias, float(eps), bool(weight_offset))[0]
    return _layer_norm_fwd(x, weight, bias, float(eps), bool(weight_offset))[0]


# ---------------------------------------------------------------- fused residual add

# Two ops, because torch.library registers autograd only for functional ops:
# ktune::fused_add_rms_norm updates the residual in place (inference, and
# torch.compile, which functionalizes it); ktune::add_rms_norm_fwd writes h
# into a new tensor and has the variant's backward.


@torch.library.custom_op("ktune::fused_add_rms_norm", mutates_args=("residual",))
def _fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float,
                        weight_offset: bool = False) -> Tensor:
    return _norm_fwd("rmsnorm", x, weight, None, eps, weight_offset, residual=residual)[0]


@_fused_add_rms_norm.register_fake
def _(x, residual, weight, eps, weight_offset=False):
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight))


@torch.library.custom_op("ktune::add_rms_norm_fwd", mutates_args=())
def _add_rms_norm_fwd(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float,
                      weight_offset: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    h = residual.clone(memory_format=torch.contiguous_format)  # the kernel rewrites it into h
    y, _, rstd = _norm_fwd("rmsnorm", x, weight, None, eps, weight_offset, residual=h)
    return y, h, rstd


@_add_rms_norm_fwd.register_fake
def _(x, residual, weight, eps, weight_offset=False):
    rows = x.shape[:-1].numel()
    return (x.new_empty(x.shape, dtype=_out_dtype(x, weight)), x.new_empty(x.shape),
            x.new_empty((rows,), dtype=torch.float32))


@torch.library.custom_op("ktune::add_rms_norm_bwd", mutates_args=())
def _add_rms_norm_bwd(dy: Tensor, dresidual: Tensor, h: Tensor, weight: Optional[Tensor], rstd: Tensor,
                      eps: float, weight_offset: bool = False) -> Tuple[Tensor, Tensor]:
    dx, dw, _ = _norm_bwd("rmsnorm", dy, h, weight, False, rstd, rstd, eps, weight_offset, dresidual)
    return dx, dw


@_add_rms_norm_bwd.register_fake
def _(dy, dresidual, h, weight, rstd, eps, weight_offset=False):
    dw = weight.new_empty(weight.shape) if weight is not None else h.new_empty((0,))
    return h.new_empty(h.shape), dw


def _add_setup(ctx, inputs, output):
    _, _, weight, eps, weight_offset = inputs
    ctx.save_for_backward(output[1], weight, output[2])
    ctx.eps = eps
    ctx.weight_offset = weight_offset


def _add_backward(ctx, dy, dh, _drstd):
    h, weight, rstd = ctx.saved_tensors
    dx, dw = _add_rms_norm_bwd(dy, dh, h, weight, rstd, ctx.eps, ctx.weight_offset)
    # h = x + residual: both receive h's whole gradient.
    return dx, dx, (dw if weight is not None else None), None, None


_add_rms_norm_fwd.register_autograd(_add_backward, setup_context=_add_setup)


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, weight_offset=False):
    """vLLM's fused_add_rms_norm (FlashInfer's fused_add_rmsnorm): residual += x (in fp32, rounded to
    x's dtype) in place, then y = rms_norm(residual, weight, eps, weight_offset). Returns (y, residual).

    With autograd the op writes h into a new tensor, then copies it into residual (torch's copy_, so
    the returned residual's gradient reaches the fused backward, and x and the old residual get
    dx = norm_bwd(h, dy) + d(residual)): that costs two extra passes over the residual, and a residual
    that is a leaf requiring grad cannot be updated in place (torch's error, as for any in-place op).
    """
    eps, weight_offset = float(eps), bool(weight_offset)
    if _direct(x, residual, weight):
        return _norm_fwd("rmsnorm", x, weight, None, eps, weight_offset, residual=residual)[0], residual
    if not _needs_grad(x, residual, weight):
        return _fused_add_rms_norm(x, residual, weight, eps, weight_offset), residual
    y, h, _ = _add_rms_norm_fwd(x, residual, weight, eps, weight_offset)
    residual.copy_(h)
    return y, residual


# ---------------------------------------------------------------- fp8 output


@torch.library.custom_op("ktune::rms_norm_fp8", mutates_args=())
def _rms_norm_fp8(x: Tensor, weight: Optional[Tensor], scale: Tensor, eps: float) -> Tensor:
    return _norm_fwd("rmsnorm", x, weight, None, eps, scale=scale)[0]


@_rms_norm_fp8.register_fake
def _(x, weight, scale, eps):
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn)


def rms_norm_fp8(x, weight, scale, eps=1e-6):
    """vLLM's rms_norm_static_fp8_quant: saturate_e4m3(rms_norm(x, weight, eps) * (1 / scale)), computed in
    fp32, as a torch.float8_e4m3fn tensor; scale is a one-element float32 tensor on x's device, read at
    launch (so a CUDA graph replays with its current value). Inference only: no autograd."""
    if _direct(x, weight, scale):
        return _norm_fwd("rmsnorm", x, weight, None, float(eps), scale=scale)[0]
    return _rms_norm_fp8(x, weight, scale, float(eps))


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

