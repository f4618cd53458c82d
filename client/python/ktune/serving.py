"""Whether ktune serves a call, decided without torch.

The torch ops (ktune.torch) describe each call in plain values (dtype names,
shape and stride tuples, the device type) and ask:

  decide_norm / decide_linear   pure functions: the problem key ktune would be
                                asked for, or the reason it is not served
  Planner.plan                  the answer, the recipe's binding and its loaded
                                module for a key, or why not (daemon
                                unreachable, problem refused, no launcher, a
                                recipe this op cannot bind), remembered per key
  warn_once                     one warning per distinct reason

Every "no" is a reason string, and the op falls back to torch with it: a call
ktune does not serve is never an error.

Thread-safety: Planner's lookups are lock-free; building a plan takes its lock.
"""
import functools
import math
import threading
import time
import warnings

from . import errors
from .problems import gemm_key, norm_key
from .recipe import BindingError, contiguous_strides, plan_binding
from .v1 import ktune_pb2 as pb

# torch dtype names (str(torch.bfloat16) without "torch.") -> the wire's.
NORM_DTYPES = {"bfloat16": pb.BF16, "float16": pb.FP16, "float32": pb.FP32}
GEMM_DTYPES = {"bfloat16": pb.BF16}
ACTIVATIONS = (None, "gelu", "silu")
# An unreachable daemon is asked again after this long (others are final).
RETRY_UNAVAILABLE_S = 30.0


class KtuneFallbackWarning(UserWarning):
    """A call ran torch's own op instead of ktune's; the message says why."""


_warned = set()
_warned_lock = threading.Lock()


def warn_once(reason, stacklevel=3):
    """warnings.warn(reason) the first time this process sees it; True when it warned."""
    if reason in _warned:
        return False
    with _warned_lock:
        if reason in _warned:
            return False
        _warned.add(reason)
    warnings.warn(f"ktune: falling back to torch: {reason}", KtuneFallbackWarning, stacklevel=stacklevel)
    return True


def reset_warnings():
    with _warned_lock:
        _warned.clear()


class Decision(tuple):
    """(key, reason): exactly one is None."""

    __slots__ = ()

    def __new__(cls, key=None, reason=None):
        return tuple.__new__(cls, (key, reason))

    key = property(lambda self: self[0])
    reason = property(lambda self: self[1])
    served = property(lambda self: self[1] is None)


def _rows(shape):
    m = 1
    for d in shape[:-1]:
        m *= d
    return m


# Memoised: a model calls a few shapes over and over, and a hit is one hash
# of the arguments instead of the checks (the torch ops call these per call).
@functools.lru_cache(maxsize=4096)
def decide_norm(op, norm_pass, device_type, x_dtype, x_shape, x_strides, w_dtype=None, w_shape=None,
                b_dtype=None, b_shape=None, eps=1e-6, dy_dtype=None, r_dtype=None, r_shape=None, r_strides=None,
                weight_offset=False, fp8_out=False, s_dtype=None, s_shape=None):
    """The norm problem key for one call over x's last dimension, or why ktune does not serve it.

    op "rmsnorm" or "layernorm"; norm_pass "fwd" or "bwd"; w_*/b_* None when
    absent; dy_dtype the incoming gradient's dtype (backward). The variants:
    r_* the residual (forward) or dresidual (backward) of the fused residual
    add, None without one; weight_offset for (1 + w); fp8_out for an e4m3 y
    divided by the scale tensor s_* (forward).
    """
    if device_type != "cuda":
        return Decision(reason=f"{op}: tensors on {device_type}; ktune serves CUDA tensors")
    dtype = NORM_DTYPES.get(x_dtype)
    if dtype is None:
        return Decision(reason=f"{op}: input dtype {x_dtype}; ktune serves bfloat16, float16 and float32")
    if len(x_shape) == 0 or any(d == 0 for d in x_shape):
        return Decision(reason=f"{op}: empty or 0-d input")
    if tuple(x_strides) != contiguous_strides(tuple(x_shape)):
        return Decision(reason=f"{op}: a non-contiguous input; ktune's kernels take dense rows")
    n = x_shape[-1]
    weight_dtype = dtype
    if w_dtype is not None:
        if tuple(w_shape) != (n,):
            return Decision(reason=f"{op}: weight of shape {tuple(w_shape)} for rows of {n}")
        if w_dtype != x_dtype and w_dtype != "float32":
            return Decision(reason=f"{op}: weight dtype {w_dtype} with input {x_dtype}; "
                                   "ktune takes the input's dtype or float32")
        weight_dtype = NORM_DTYPES[w_dtype]
    if b_dtype is not None:
        if op != "layernorm":
            return Decision(reason=f"{op}: a bias (LayerNorm only)")
        if w_dtype is None:
            return Decision(reason=f"{op}: a bias without a weight")
        if b_dtype != w_dtype or tuple(b_shape) != (n,):
            return Decision(reason=f"{op}: bias of dtype {b_dtype}, shape {tuple(b_shape)}; "
                                   "ktune takes the weight's dtype and shape")
    if not eps > 0.0:
        return Decision(reason=f"{op}: eps {eps}; ktune reads 0 as its default 1e-6")
    reason = _variant_reason(op, norm_pass, x_dtype, x_shape, w_dtype, r_dtype, r_shape, r_strides, weight_offset,
                             fp8_out, s_dtype, s_shape)
    if reason is not None:
        return Decision(reason=reason)
    # torch promotes: a float32 weight makes y float32; dx keeps x's dtype,
    # and the backward kernels read dy in x's dtype.
    output_dtype = pb.FP8_E4M3 if fp8_out else weight_dtype if norm_pass == "fwd" else dtype
    if norm_pass == "bwd" and dy_dtype is not None and dy_dtype != x_dtype:
        return Decision(reason=f"{op} backward: gradient dtype {dy_dtype} with input {x_dtype}; "
                               "ktune reads the gradient in the input's dtype")
    return Decision(key=norm_key(op, norm_pass, _rows(x_shape), n, dtype, output_dtype, weight_dtype,
                                 w_dtype is not None, b_dtype is not None, float(eps), r_dtype is not None,
                                 bool(weight_offset)))


def _variant_reason(op, norm_pass, x_dtype, x_shape, w_dtype, r_dtype, r_shape, r_strides, weight_offset, fp8_out,
                    s_dtype, s_shape):
    """Why ktune does not serve this call's variant (as the daemon validates NormProblem), or None."""
    name = "dresidual" if norm_pass == "bwd" else "residual"
    if r_dtype is not None:
        if op != "rmsnorm":
            return f"{op}: a fused residual add (RMSNorm only)"
        # The kernel reads (and, forward, rewrites) the residual as dense rows of x's dtype.
        if r_dtype != x_dtype or tuple(r_shape) != tuple(x_shape) or \
                tuple(r_strides) != contiguous_strides(tuple(x_shape)):
            return (f"{op}: a {name} of dtype {r_dtype}, shape {tuple(r_shape)}, strides {tuple(r_strides)}; "
                    "ktune takes a contiguous one of the input's dtype and shape")
    if weight_offset and w_dtype is None:
        return f"{op}: a weight offset (1 + w) without a weight"
    if fp8_out:
        if op != "rmsnorm" or norm_pass != "fwd":
            return f"{op} {norm_pass}: an fp8 output (the RMSNorm forward only)"
        if s_dtype != "float32" or math.prod(s_shape) != 1:
            return f"{op}: an fp8 scale of dtype {s_dtype}, shape {s_shape}; ktune reads one float32"
    return None


@functools.lru_cache(maxsize=4096)
def decide_linear(device_type, x_dtype, x_shape, x_strides, w_dtype, w_shape, w_strides, b_dtype=None,
                  b_shape=None, activation=None):
    """The GEMM key for y = act(x @ w.T + b), or why not. An activation needs the bias (ktune's
    epilogues are bias, bias+gelu, bias+silu); without one the caller applies it after the GEMM."""
    if device_type != "cuda":
        return Decision(reason=f"linear: tensors on {device_type}; ktune serves CUDA tensors")
    if activation not in ACTIVATIONS:
        return Decision(reason=f"linear: activation {activation!r}; ktune fuses {ACTIVATIONS[1:]}")
    if x_dtype not in GEMM_DTYPES or w_dtype != x_dtype or (b_dtype is not None and b_dtype != x_dtype):
        return Decision(reason=f"linear: dtypes x {x_dtype}, weight {w_dtype}, bias {b_dtype}; "
                               "ktune serves bfloat16 throughout")
    if len(x_shape) == 0 or len(w_shape) != 2 or any(d == 0 for d in x_shape):
        return Decision(reason="linear: an empty input or a weight that is not 2-D")
    n, k = w_shape
    if x_shape[-1] != k:
        return Decision(reason=f"linear: input width {x_shape[-1]} for a weight of {tuple(w_shape)}")
    if tuple(x_strides) != contiguous_strides(tuple(x_shape)) or tuple(w_strides) != (k, 1):
        return Decision(reason="linear: a non-contiguous input or weight")
    if b_dtype is not None and tuple(b_shape) != (n,):
        return Decision(reason=f"linear: bias of shape {tuple(b_shape)} for {n} outputs")
    if b_dtype is None:
        epilogue = pb.EPILOGUE_NONE
    else:
        epilogue = {None: pb.EPILOGUE_BIAS, "gelu": pb.EPILOGUE_BIAS_GELU, "silu": pb.EPILOGUE_BIAS_SILU}[activation]
    return Decision(key=gemm_key(_rows(x_shape), n, k, pb.BF16, pb.BF16, pb.BF16, 0, pb.COL_MAJOR, epilogue))


def norm_layouts(key):
    """What the norm ops bind for a decide_norm key: name -> (dtype, shape, strides), None if unbound.

    The fused residual add binds `residual` (forward, updated in place) or
    `dresidual` (backward); an fp8 output binds the one-element `scale`.
    """
    _, op, norm_pass, m, n, dtype, output_dtype, weight_dtype, has_weight, has_bias, _, residual, _ = key
    vec = (weight_dtype, (n,), (1,)) if has_weight else None
    stat = (pb.FP32, (m,), (1,))
    full = (dtype, (m, n), (n, 1))
    layernorm = op == pb.LAYERNORM
    if norm_pass == pb.FWD:
        out = {"x": full, "w": vec, "y": (output_dtype or dtype, (m, n), (n, 1)), "rstd": stat}
        if layernorm:
            out.update(mean=stat, b=vec if has_bias else None)
        else:
            out.update(residual=full if residual else None,
                       scale=(pb.FP32, (1,), (1,)) if output_dtype == pb.FP8_E4M3 else None)
        return out
    out = {"x": full, "dy": full, "dx": full, "rstd": stat, "w": vec, "dw": vec}
    if layernorm:
        out.update(mean=stat, db=vec if has_bias else None)
    else:
        out.update(dresidual=full if residual else None)
    return out


def linear_layouts(key):
    """What linear binds for a decide_linear key (A = x, B = the [N, K] weight, D = y)."""
    _, m, n, k, _, _, _, _, _, epilogue, _ = key
    return {"a": (pb.BF16, (m, k), (k, 1)), "b": (pb.BF16, (n, k), (k, 1)), "d": (pb.BF16, (m, n), (n, 1)),
            "bias": (pb.BF16, (n,), (1,)) if epilogue != pb.EPILOGUE_NONE else None}


class Plan:
    """What a served call launches: the answer, its loaded recipe and the binding order."""

    __slots__ = ("answer", "recipe", "binding", "workspace", "streams")

    def __init__(self, answer, recipe, binding):
        self.answer = answer
        self.recipe = recipe
        self.binding = binding
        self.workspace = answer.recipe.workspace_bytes > 0
        self.streams = set()  # streams launched on: the launcher's workspace exists for them


class Planner:
    """Plans per (key, device ordinal), from one AnswerCache and one Launcher per device.

    answers: an AnswerCache; policy: the GetConfig policy; launcher_factory:
    device ordinal -> a ktune.Launcher (raises LauncherUnavailable/NoDriver).
    """

    def __init__(self, answers, policy=pb.HEURISTIC_ON_MISS, launcher_factory=None, clock=time.monotonic):
        self.answers = answers
        self.policy = policy
        self._launcher_factory = launcher_factory
        self._launchers = {}
        self._plans = {}  # (key, device) -> Plan, or (reason, retry_at)
        self._lock = threading.Lock()
        self._clock = clock

    def plan(self, key, device, layouts_fn):
        """(Plan, None) or (None, reason). layouts_fn() gives plan_binding's layouts (called on a miss only)."""
        entry = self._plans.get((key, device))
        if entry.__class__ is Plan:
            return entry, None
        if entry is not None and self._clock() < entry[1]:
            return None, entry[0]
        with self._lock:
            entry = self._build(key, device, layouts_fn)
            self._plans[(key, device)] = entry
        return (entry, None) if entry.__class__ is Plan else (None, entry[0])

    def cached(self, key, device):
        """What plan() would answer without asking anyone: (Plan, None), (None, reason) or None."""
        entry = self._plans.get((key, device))
        if entry is None:
            return None
        if entry.__class__ is Plan:
            return entry, None
        return None, entry[0]

    def _build(self, key, device, layouts_fn):
        final = float("inf")
        try:
            answer = self.answers.get(key, self.policy)
        except errors.Unavailable as e:
            return (f"the ktune daemon is unreachable ({e.message})", self._clock() + RETRY_UNAVAILABLE_S)
        except errors.InvalidProblem as e:
            return (f"ktune refuses the problem: {e.message}", final)
        except errors.NotFound as e:
            return (f"no answer under policy {pb.Policy.Name(self.policy)}: {e.message}", final)
        except errors.Error as e:
            return (f"ktune could not answer ({type(e).__name__}: {e.message})", final)
        if answer.recipe.template_id != "cublaslt" and not answer.recipe.cubin:
            return (f"the answer for {answer.recipe.template_id} carries no cubin", final)
        try:
            binding = plan_binding(answer.recipe, layouts_fn())
        except BindingError as e:
            return (f"{answer.recipe.template_id}: {e}", final)
        try:
            launcher = self._launcher(device)
            recipe = launcher.load(answer.recipe)
        except errors.Error as e:
            return (f"no launcher ({type(e).__name__}: {e.message})", final)
        return Plan(answer, recipe, binding)

    def _launcher(self, device):
        launcher = self._launchers.get(device)
        if launcher is None:
            if self._launcher_factory is None:
                from .launch import Launcher
                self._launcher_factory = Launcher
            try:
                launcher = self._launcher_factory(device)
            except errors.Error as e:
                launcher = e  # no library or no driver: the same answer for every later key
            self._launchers[device] = launcher
        if isinstance(launcher, errors.Error):
            raise launcher
        return launcher

    def entries(self):
        """{(key, device): Plan or (reason, retry_at)}: what was planned so far (a copy)."""
        return dict(self._plans)

    def clear(self):
        with self._lock:
            self._plans.clear()
