"""ktune.torch on the GPU: every family launched from Python against torch's reference, autograd
against torch's gradients, torch.compile(fullgraph=True) and CUDA-graph capture. Each test also
proves the call was served by ktune (a plan exists, no fallback warning), not by the fallback."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the device has it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import ktune  # noqa: E402
import ktune.torch as kt  # noqa: E402
from ktune import launch, serving  # noqa: E402

pytestmark = pytest.mark.gpu

TOL = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3), torch.float32: (1e-4, 1e-4)}


@pytest.fixture(scope="module", autouse=True)
def ktune_ready(daemon_address):
    try:
        launch.load_library()
    except ktune.LauncherUnavailable as e:
        pytest.skip(str(e))
    with ktune.Client(daemon_address) as c:
        if c.status().compile_only:
            pytest.skip("the daemon is compile-only: recipes are for sm_90, the launcher needs this GPU's")
    kt.configure(address=daemon_address, policy="heuristic")
    yield


def served(fn):
    """Runs fn and fails on any fallback warning: the call must be ktune's."""
    serving.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
        torch.cuda.synchronize()
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, serving.KtuneFallbackWarning)]
    assert not fallbacks, fallbacks
    return out


def ref_rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float())


def close(got, want, dtype):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(4, 512, 4096), (1, 4096), (64, 1024)])
def test_rms_norm_forward_and_backward(dtype, shape):
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(shape[-1], device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    y = served(lambda: kt.rms_norm(x, w, 1e-5))
    close(y, ref_rms(x, w, 1e-5), dtype)
    dx, dw = served(lambda: torch.autograd.grad(y, (x, w), dy))
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    rx, rw = torch.autograd.grad(ref_rms(xr, wr, 1e-5), (xr, wr), dy.float())
    close(dx, rx, dtype)
    rows = x.numel() // shape[-1]
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(dw.float(), rw, atol=atol * rows ** 0.5 * 4, rtol=rtol * 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_layer_norm_forward_and_backward(dtype):
    n = 2048
    x = torch.randn(8, 256, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    y = served(lambda: kt.layer_norm(x, w, b, 1e-5))
    ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    close(y, ref, dtype)
    grads = served(lambda: torch.autograd.grad(y, (x, w, b), dy))
    leaves = [t.detach().float().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(torch.nn.functional.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5), leaves,
                               dy.float())
    close(grads[0], want[0], dtype)
    atol, rtol = TOL[dtype]
    for g, r in zip(grads[1:], want[1:]):
        torch.testing.assert_close(g.float(), r, atol=atol * 2048 ** 0.5 * 4, rtol=rtol * 4)


@pytest.mark.parametrize("activation, bias", [(None, False), (None, True), ("gelu", True), ("silu", True),
                                              ("gelu", False)])
@pytest.mark.parametrize("m", [8, 512, 4096])
def test_linear_with_each_epilogue(m, activation, bias):
    k, n = 1024, 2048
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    y = served(lambda: kt.linear(x, w, b, activation))
    z = x.float() @ w.float().t() + (b.float() if bias else 0.0)
    want = {None: z, "gelu": torch.nn.functional.gelu(z), "silu": torch.nn.functional.silu(z)}[activation]
    torch.testing.assert_close(y.float(), want, atol=3e-2, rtol=3e-2)


def test_linear_gradients_match_torch():
    x = (torch.randn(256, 512, device="cuda", dtype=torch.bfloat16) / 16).requires_grad_()
    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    got = served(lambda: torch.autograd.grad(kt.linear(x, w, b, "gelu"), (x, w, b), dy))
    want = torch.autograd.grad(torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)), (x, w, b), dy)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.float(), r.float(), atol=5e-2 * max(1.0, r.float().abs().max().item() / 10),
                                   rtol=5e-2)


class Block(torch.nn.Module):
    def __init__(self, n=1024):
        super().__init__()
        self.norm = torch.nn.RMSNorm(n, eps=1e-5, device="cuda", dtype=torch.bfloat16)
        self.ln = torch.nn.LayerNorm(n, device="cuda", dtype=torch.bfloat16)
        self.proj = torch.nn.Linear(n, n, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        return self.proj(self.ln(self.norm(x)))


def test_patch_swaps_and_matches():
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(4, 128, 1024, device="cuda", dtype=torch.bfloat16)
    want = block(x)
    swapped = kt.patch(block, linears=True)
    assert swapped == {"norm": "RMSNorm", "ln": "LayerNorm", "proj": "Linear"}
    assert isinstance(block.norm, kt.RMSNorm) and block.norm.weight is not None
    got = served(lambda: block(x))
    torch.testing.assert_close(got.float(), want.float(), atol=5e-2, rtol=5e-2)


def test_torch_compile_fullgraph_traces_the_ops():
    torch.manual_seed(0)
    block = Block()
    kt.patch(block, linears=True)
    x = torch.randn(2, 64, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)
    got = served(lambda: compiled(x))
    torch.testing.assert_close(got.float(), eager.float(), atol=2e-2, rtol=2e-2)
    got.float().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_cuda_graph_capture_and_replay():
    n = 4096
    x = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the answer and the module load happen here
        for _ in range(2):
            served(lambda: kt.rms_norm(x, w, 1e-5))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = kt.rms_norm(x, w, 1e-5)
    key = serving.decide_norm("rmsnorm", "fwd", "cuda", "bfloat16", (16, n), (n, 1), "bfloat16", (n,), eps=1e-5).key
    plan, reason = kt.planner().cached(key, torch.cuda.current_device())
    assert reason is None, reason
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        close(y, ref_rms(x, w, 1e-5), torch.bfloat16)


def test_unserved_dtype_falls_back_with_one_warning():
    x = torch.randn(8, 256, device="cuda", dtype=torch.float64)
    w = torch.ones(256, device="cuda", dtype=torch.float64)
    serving.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            y = kt.rms_norm(x, w, 1e-6)
    assert len([w for w in caught if issubclass(w.category, serving.KtuneFallbackWarning)]) == 1
    torch.testing.assert_close(y, ref_rms(x, w, 1e-6).double())


def test_inference_calls_skip_the_dispatcher_and_autograd_calls_do_not(monkeypatch):
    """An eager call that needs no autograd launches directly; one that needs it (or a compiled
    graph) goes through the custom op, whose backward is ktune's."""
    from ktune.torch import _ops
    n = 1024
    x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    wl = torch.randn(512, n, device="cuda", dtype=torch.bfloat16)
    through_op = []
    for name in ("_rms_norm_fwd", "_layer_norm_fwd", "_linear"):
        op = getattr(_ops, name)
        monkeypatch.setattr(_ops, name, lambda *a, op=op, name=name: (through_op.append(name), op(*a))[1])
    with torch.no_grad():
        close(served(lambda: kt.rms_norm(x, w, 1e-5)), ref_rms(x, w, 1e-5), torch.bfloat16)
        served(lambda: kt.layer_norm(x, w, None, 1e-5))
        close(served(lambda: kt.linear(x, wl)), x.float() @ wl.float().t(), torch.bfloat16)
    assert through_op == []
    served(lambda: kt.rms_norm(x, w, 1e-5))  # w requires grad: the autograd op
    assert through_op == ["_rms_norm_fwd"]


def test_dispatch_modes_still_see_the_ops():
    """A dispatch mode (FakeTensorMode, make_fx, FlopCounterMode) must see ktune's op, so even a
    call needing no autograd goes through the dispatcher under one."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(4, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad(), Record() as mode:
        y = kt.rms_norm(x, w, 1e-5)
    assert any(op.startswith("ktune.rms_norm_fwd") for op in mode.ops), mode.ops
    close(y, ref_rms(x, w, 1e-5), torch.bfloat16)


# ---------------------------------------------------------------- the variants


def ref_add(x, residual):
    """h = x + residual in fp32, rounded to x's dtype (the kernel's and vLLM's order)."""
    return (x.float() + residual.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_add_rms_norm_updates_the_residual_in_place(dtype):
    n = 4096
    x = torch.randn(8, 64, n, device="cuda", dtype=dtype)
    residual = torch.randn_like(x)
    w = torch.randn(n, device="cuda", dtype=dtype)
    h = ref_add(x, residual)
    with torch.no_grad():
        y, out = served(lambda: kt.fused_add_rms_norm(x, residual, w, 1e-5))
    assert out is residual
    torch.testing.assert_close(residual, h, atol=0, rtol=0)
    close(y, ref_rms(h, w, 1e-5), dtype)
    module = kt.FusedAddRMSNorm(w, 1e-5)
    with torch.no_grad():
        y2, _ = served(lambda: module(x, residual))
    close(y2, ref_rms(ref_add(x, h), w, 1e-5), dtype)


def test_fused_add_rms_norm_gradients_reach_x_the_old_residual_and_w():
    n, dtype = 2048, torch.bfloat16
    x = torch.randn(4, 128, n, device="cuda", dtype=dtype, requires_grad=True)
    r0 = torch.randn(4, 128, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy, dres = torch.randn_like(x), torch.randn_like(x)

    def run():
        residual = r0 * 1  # the residual stream: not a leaf, so it may be updated in place
        y, out = kt.fused_add_rms_norm(x, residual, w, 1e-5)
        assert out is residual
        return y, out, torch.autograd.grad((y, out), (x, r0, w), (dy, dres))

    y, out, grads = served(run)
    leaves = [t.detach().float().requires_grad_() for t in (x, r0, w)]
    h = leaves[0] + leaves[1]
    want = torch.autograd.grad((ref_rms(h, leaves[2], 1e-5), h), leaves, (dy.float(), dres.float()))
    close(out, h, dtype)
    close(y, ref_rms(h, leaves[2], 1e-5), dtype)
    close(grads[0], want[0], dtype)
    close(grads[1], want[1], dtype)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(grads[2].float(), want[2], atol=atol * 512 ** 0.5 * 4, rtol=rtol * 4)


def test_fused_add_rms_norm_compiles_fullgraph():
    n = 1024
    x = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    h = ref_add(x, residual)
    fn = torch.compile(lambda a, r, b: kt.fused_add_rms_norm(a, r, b, 1e-5), fullgraph=True)
    with torch.no_grad():
        y, _ = served(lambda: fn(x, residual, w))
    torch.testing.assert_close(residual, h, atol=0, rtol=0)
    close(y, ref_rms(h, w, 1e-5), torch.bfloat16)


def ref_offset(x, w, eps, layernorm=False):
    xf = x.float()
    if layernorm:
        return torch.nn.functional.layer_norm(xf, xf.shape[-1:], 1.0 + w.float(), None, eps)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())


@pytest.mark.parametrize("layernorm", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_weight_offset_forward_and_backward(dtype, layernorm):
    n = 2048
    x = torch.randn(4, 256, n, device="cuda", dtype=dtype, requires_grad=True)
    w = (0.1 * torch.randn(n, device="cuda", dtype=dtype)).requires_grad_()
    dy = torch.randn_like(x)
    op = (lambda: kt.layer_norm(x, w, None, 1e-5, weight_offset=True)) if layernorm else \
        (lambda: kt.rms_norm(x, w, 1e-5, weight_offset=True))
    y = served(op)
    close(y, ref_offset(x, w, 1e-5, layernorm), dtype)
    dx, dw = served(lambda: torch.autograd.grad(y, (x, w), dy))
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    rx, rw = torch.autograd.grad(ref_offset(xr, wr, 1e-5, layernorm), (xr, wr), dy.float())
    close(dx, rx, dtype)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(dw.float(), rw, atol=atol * 1024 ** 0.5 * 4, rtol=rtol * 4)


def e4m3_ulp(v):
    """One e4m3 ulp at |v|: 3 mantissa bits, subnormals below 2^-6 (spacing 2^-9)."""
    exponent = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** -6)))
    return torch.exp2(exponent - 3)


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32])
def test_rms_norm_fp8_matches_the_dequantized_reference(w_dtype):
    n = 4096
    x = torch.randn(64, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=w_dtype)
    scale = torch.tensor([0.01], device="cuda", dtype=torch.float32)  # some values saturate at 448
    with torch.no_grad():
        q = served(lambda: kt.rms_norm_fp8(x, w, scale, 1e-5))
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    want = (ref_rms(x, w, 1e-5) / scale).clamp(-448.0, 448.0)
    assert (want.abs() == 448.0).any(), "the test means to cover saturation"
    err = (q.float() - want).abs()
    assert (err <= e4m3_ulp(want)).all(), f"max error {err.max().item()} beyond one e4m3 ulp"
    # The scale is read at launch: a new value needs no new plan.
    scale.fill_(1.0)
    with torch.no_grad():
        q1 = served(lambda: kt.rms_norm_fp8(x, w, scale, 1e-5))
    want1 = ref_rms(x, w, 1e-5).clamp(-448.0, 448.0)
    assert ((q1.float() - want1).abs() <= e4m3_ulp(want1)).all()


def _gemma_rmsnorm_class():
    try:
        from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
        return GemmaRMSNorm
    except ImportError:
        pass

    class GemmaRMSNorm(torch.nn.Module):  # transformers' code, for a machine without it
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = torch.nn.Parameter(torch.zeros(hidden_size))

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            output = self._norm(x.float())
            output = output * (1.0 + self.weight.float())
            return output.type_as(x)

    return GemmaRMSNorm


class MoshiRMSNorm(torch.nn.Module):
    """`weight` and `eps` like Gemma's, but x * w: patch must leave it alone."""

    def __init__(self, n):
        super().__init__()
        self.eps = 1e-6
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
                * self.weight.float()).type_as(x)


def test_patch_swaps_a_gemma_norm_for_the_weight_offset():
    n = 2048
    model = torch.nn.Sequential()
    model.add_module("norm", _gemma_rmsnorm_class()(n, eps=1e-6))
    model.add_module("other", MoshiRMSNorm(n))
    model = model.to(device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        model.norm.weight.normal_(0.0, 0.2)
    x = torch.randn(4, 64, n, device="cuda", dtype=torch.bfloat16)
    want = model.norm(x)
    assert kt.patch(model) == {"norm": "GemmaRMSNorm"}
    assert isinstance(model.norm, kt.GemmaRMSNorm) and isinstance(model.other, MoshiRMSNorm)
    got = served(lambda: model.norm(x))
    assert got.dtype == x.dtype
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
