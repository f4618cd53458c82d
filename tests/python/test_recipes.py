"""Recipe interpretation: the served recipes of every family describe their tensors and
arguments, and the torch ops' bindings (ktune.serving's layouts) meet them."""
import pytest

import ktune
from ktune import recipe as rc
from ktune import serving
from ktune.v1 import ktune_pb2 as pb

X_STRIDES = {2: lambda s: (s[1], 1)}


def norm_key(op, norm_pass, dtype, has_bias=False, m=512, n=2048):
    x = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    d = serving.decide_norm(op, norm_pass, "cuda", x, (m, n), (n, 1), x, (n,), x if has_bias else None,
                            (n,) if has_bias else None, 1e-5, dy_dtype=x)
    assert d.served, d.reason
    return d.key


def variant_key(norm_pass="fwd", op="rmsnorm", residual=False, weight_offset=False, fp8=False, w="bfloat16",
                m=512, n=2048):
    r = dict(r_dtype="bfloat16", r_shape=(m, n), r_strides=(n, 1)) if residual else {}
    s = dict(fp8_out=True, s_dtype="float32", s_shape=(1,)) if fp8 else {}
    d = serving.decide_norm(op, norm_pass, "cuda", "bfloat16", (m, n), (n, 1), w, (n,), eps=1e-5,
                            dy_dtype="bfloat16", weight_offset=weight_offset, **r, **s)
    assert d.served, d.reason
    return d.key


VARIANTS = {"rmsnorm.fwd residual": variant_key(residual=True),
            "rmsnorm.bwd residual": variant_key("bwd", residual=True),
            "rmsnorm.fwd 1+w": variant_key(weight_offset=True),
            "rmsnorm.bwd 1+w": variant_key("bwd", weight_offset=True),
            "layernorm.fwd 1+w": variant_key(op="layernorm", weight_offset=True),
            "layernorm.bwd 1+w": variant_key("bwd", op="layernorm", weight_offset=True),
            "rmsnorm.fwd fp8": variant_key(fp8=True),
            "rmsnorm.fwd fp8 fp32 weight": variant_key(fp8=True, w="float32"),
            "rmsnorm.fwd residual 1+w fp8": variant_key(residual=True, weight_offset=True, fp8=True)}


def linear_key(m, n, k, bias, activation=None):
    d = serving.decide_linear("cuda", "bfloat16", (m, k), (k, 1), "bfloat16", (n, k), (k, 1),
                              "bfloat16" if bias else None, (n,) if bias else None, activation)
    assert d.served, d.reason
    return d.key


CASES = [(f"{op}.{p} {dt}{' bias' if b else ''}", norm_key(op, p, dt, b), serving.norm_layouts)
         for op, b in (("rmsnorm", False), ("layernorm", True)) for p in ("fwd", "bwd")
         for dt in ("bf16", "fp16", "fp32")]
CASES += [(f"gemm {m}x{n}x{k} {epi or 'none'}", linear_key(m, n, k, epi is not None, act), serving.linear_layouts)
          for m, n, k, epi, act in ((2048, 1024, 512, None, None), (2048, 1024, 512, "bias", "gelu"),
                                    (8, 4096, 1024, "bias", "silu"), (256, 512, 256, "bias", None))]
CASES += [(name, key, serving.norm_layouts) for name, key in VARIANTS.items()]


@pytest.fixture(scope="module")
def answers(daemon_address):
    with ktune.Client(daemon_address, timeout_s=120) as c:
        yield ktune.AnswerCache(c)


def _tensors_or_skip(answer):
    if not answer.recipe.tensors:
        pytest.skip("the daemon's recipes carry no tensors/args yet (LaunchRecipe.tensors and KernelLaunch.args "
                    "are empty: this ktuned predates self-describing recipes)")
    return answer.recipe


@pytest.mark.parametrize("name, key, layouts", CASES, ids=[c[0] for c in CASES])
def test_served_recipe_describes_itself_and_binds(answers, name, key, layouts):
    answer = answers.get(key)
    recipe = _tensors_or_skip(answer)
    names = [t.name for t in recipe.tensors]
    assert len(set(names)) == len(names), f"tensor names repeat: {names}"
    for t in recipe.tensors:
        assert t.role != pb.ROLE_UNSPECIFIED, f"{t.name} has no role"
        absent = t.optional and list(t.shape) == [0]  # the kernel takes a null pointer (e.g. no split-K workspace)
        if t.role != pb.ROLE_WORKSPACE and not absent:
            assert t.dtype != pb.DTYPE_UNSPECIFIED, f"{t.name} has no dtype"
            assert len(t.shape) == len(t.strides), f"{t.name}: shape {list(t.shape)}, strides {list(t.strides)}"
    if recipe.template_id != "cublaslt":
        assert recipe.cubin
        for k in recipe.kernels:
            assert [a.name for a in k.args] == list(k.params), f"{k.lowered_name}: args not in params order"
            for a in k.args:
                kind = a.WhichOneof("value")
                assert kind is not None, f"argument {a.name} has no value"
                if kind == "tensor":
                    assert a.tensor in names, f"argument {a.name} names tensor {a.tensor}, not in {names}"
                if kind == "tma":
                    assert a.tma.tensor in names and len(a.tma.dims) == len(a.tma.box)
    binding = rc.plan_binding(recipe, layouts(key))
    addresses = binding.addresses({n: 0x10000 * (i + 1) for i, n in enumerate(layouts(key))})
    assert len(addresses) == len(recipe.tensors)
    for spec, address in zip(recipe.tensors, addresses):
        if spec.role == pb.ROLE_WORKSPACE:
            assert address == 0, "the launcher owns the workspace: nothing is bound to it"


def test_scalars_carry_this_problems_values(answers):
    key = norm_key("rmsnorm", "fwd", "bf16", m=512, n=2048)
    recipe = _tensors_or_skip(answers.get(key))
    args = {a.name: a for a in recipe.kernels[0].args}
    assert args["M"].WhichOneof("value") in ("i32", "i64") and getattr(args["M"], args["M"].WhichOneof("value")) == 512
    assert getattr(args["N"], args["N"].WhichOneof("value")) == 2048
    assert args["eps"].f32 == pytest.approx(1e-5)


def test_binding_refuses_what_the_recipe_does_not_take():
    r = pb.LaunchRecipe(tensors=[pb.TensorSpec(name="x", role=pb.ROLE_INPUT, dtype=pb.BF16, shape=[4, 8],
                                               strides=[8, 1], alignment_bytes=16),
                                 pb.TensorSpec(name="ws", role=pb.ROLE_WORKSPACE),
                                 pb.TensorSpec(name="w", role=pb.ROLE_INPUT, dtype=pb.BF16, shape=[8], strides=[1],
                                               optional=True)])
    b = rc.plan_binding(r, {"x": (pb.BF16, (4, 8), (8, 1))})
    assert b.addresses({"x": 0x100}) == [0x100, 0, 0]
    # Left unbound (None): fine for an optional tensor, and for one the recipe does not have.
    b = rc.plan_binding(r, {"x": (pb.BF16, (4, 8), (8, 1)), "w": None, "dw": None})
    assert b.addresses({"x": 0x100}) == [0x100, 0, 0]
    with pytest.raises(rc.BindingError, match="16-byte aligned"):
        b.addresses({"x": 0x102})
    with pytest.raises(rc.BindingError, match="fp16, the recipe takes bf16"):
        rc.plan_binding(r, {"x": (pb.FP16, (4, 8), (8, 1))})
    with pytest.raises(rc.BindingError, match="strides"):
        rc.plan_binding(r, {"x": (pb.BF16, (4, 8), (1, 4))})
    with pytest.raises(rc.BindingError, match="no tensor named 'y'"):
        rc.plan_binding(r, {"x": (pb.BF16, (4, 8), (8, 1)), "y": (pb.BF16, (4, 8), (8, 1))})
    with pytest.raises(rc.BindingError, match="needs tensor 'x'"):
        rc.plan_binding(r, {})
    with pytest.raises(rc.BindingError, match="lists no tensors"):
        rc.plan_binding(pb.LaunchRecipe(), {})
    assert rc.describe(r)["tensors"][0] == {"name": "x", "role": "input", "dtype": "bf16", "shape": (4, 8),
                                           "strides": (8, 1), "alignment_bytes": 16, "optional": False, "bytes": 0}


def _elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_layouts_are_exactly_the_tensors_the_recipe_binds(answers, name):
    """Every tensor this problem uses (not the workspace, nor an optional one the daemon sized 0) is one
    norm_layouts binds, of its dtype and element count, and nothing else is bound: a misnamed residual,
    dresidual or scale fails here, not at launch."""
    key = VARIANTS[name]
    recipe = _tensors_or_skip(answers.get(key))
    used = {t.name: t for t in recipe.tensors
            if t.role != pb.ROLE_WORKSPACE and not (t.optional and list(t.shape) == [0])}
    bound = {n: layout for n, layout in serving.norm_layouts(key).items() if layout is not None}
    assert set(bound) == set(used), f"binds {sorted(bound)}, the recipe uses {sorted(used)}"
    for n, (dtype, shape, _) in bound.items():
        assert used[n].dtype == dtype, f"{n}: {rc.DTYPE_NAMES.get(dtype)}, the recipe's is {rc.DTYPE_NAMES.get(used[n].dtype)}"
        assert _elements(used[n].shape) == _elements(shape), f"{n}: {shape}, the recipe's is {tuple(used[n].shape)}"
    roles = {"residual": pb.ROLE_INPUT_OUTPUT, "dresidual": pb.ROLE_INPUT, "scale": pb.ROLE_SCALE}
    for n, role in roles.items():
        if n in used:
            assert used[n].role == role, f"{n}: role {rc.ROLE_NAMES.get(used[n].role)}"
