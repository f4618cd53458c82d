"""The serve/fallback decision (ktune.serving), without torch: what each call is asked as,
why a call falls back, one warning per reason, and the planner's memory of both."""
import warnings

import pytest

import ktune
from ktune import serving
from ktune.v1 import ktune_pb2 as pb

X = ((4, 8, 4096), (32768, 4096, 1))  # [batch, seq, hidden], contiguous


def norm(**kw):
    args = dict(op="rmsnorm", norm_pass="fwd", device_type="cuda", x_dtype="bfloat16", x_shape=X[0],
                x_strides=X[1], w_dtype="bfloat16", w_shape=(4096,), eps=1e-5)
    args.update(kw)
    return serving.decide_norm(**args)


def test_a_served_norm_is_asked_as_rows_by_width():
    d = norm()
    assert d.served and d.reason is None
    problem = ktune.problem_from_key(d.key).norm
    assert (problem.op, problem.norm_pass, problem.m, problem.n) == (pb.RMSNORM, pb.FWD, 32, 4096)
    assert problem.input_dtype == problem.output_dtype == problem.weight_dtype == pb.BF16
    assert problem.has_weight and not problem.has_bias and problem.eps == pytest.approx(1e-5)


def test_a_float32_weight_makes_a_float32_output_as_torch_promotes():
    problem = ktune.problem_from_key(norm(w_dtype="float32").key).norm
    assert problem.weight_dtype == pb.FP32 and problem.output_dtype == pb.FP32 and problem.input_dtype == pb.BF16


def test_layernorm_backward_with_bias():
    d = norm(op="layernorm", norm_pass="bwd", b_dtype="bfloat16", b_shape=(4096,), dy_dtype="bfloat16")
    problem = ktune.problem_from_key(d.key).norm
    assert problem.op == pb.LAYERNORM and problem.norm_pass == pb.BWD and problem.has_bias


@pytest.mark.parametrize("change, words", [
    (dict(device_type="cpu"), "on cpu"),
    (dict(x_dtype="float64"), "input dtype float64"),
    (dict(x_strides=(4096, 16384, 1)), "non-contiguous"),
    (dict(x_shape=(0, 4096), x_strides=(4096, 1)), "empty"),
    (dict(w_shape=(2048,)), "weight of shape (2048,)"),
    (dict(w_dtype="float16"), "weight dtype float16"),
    (dict(eps=0.0), "eps 0.0"),
    (dict(b_dtype="bfloat16", b_shape=(4096,)), "LayerNorm only"),
    (dict(norm_pass="bwd", dy_dtype="float32"), "gradient dtype float32"),
])
def test_what_ktune_does_not_serve_falls_back_with_a_reason(change, words):
    d = norm(**change)
    assert not d.served and d.key is None
    assert words in d.reason


def linear(**kw):
    args = dict(device_type="cuda", x_dtype="bfloat16", x_shape=(2, 8, 4096), x_strides=(32768, 4096, 1),
                w_dtype="bfloat16", w_shape=(1024, 4096), w_strides=(4096, 1), b_dtype="bfloat16", b_shape=(1024,),
                activation=None)
    args.update(kw)
    return serving.decide_linear(**args)


@pytest.mark.parametrize("activation, bias, epilogue", [
    (None, True, pb.EPILOGUE_BIAS), ("gelu", True, pb.EPILOGUE_BIAS_GELU), ("silu", True, pb.EPILOGUE_BIAS_SILU),
    (None, False, pb.EPILOGUE_NONE), ("gelu", False, pb.EPILOGUE_NONE),
])
def test_linear_is_a_gemm_with_its_epilogue(activation, bias, epilogue):
    d = linear(activation=activation, **({} if bias else dict(b_dtype=None, b_shape=None)))
    gemm = ktune.problem_from_key(d.key).gemm
    assert (gemm.m, gemm.n, gemm.k) == (16, 1024, 4096)
    assert gemm.b_layout == pb.COL_MAJOR and gemm.epilogue == epilogue
    assert serving.linear_layouts(d.key)["bias"] == ((pb.BF16, (1024,), (1,)) if bias else None)


@pytest.mark.parametrize("change, words", [
    (dict(x_dtype="float16", w_dtype="float16", b_dtype="float16"), "bfloat16 throughout"),
    (dict(activation="relu"), "activation 'relu'"),
    (dict(w_strides=(1, 1024)), "non-contiguous"),
    (dict(w_shape=(1024, 2048), w_strides=(2048, 1)), "input width 4096"),
    (dict(device_type="cpu"), "on cpu"),
])
def test_linear_falls_back_with_a_reason(change, words):
    assert words in linear(**change).reason


def test_layouts_follow_the_key():
    lay = serving.norm_layouts(norm(op="layernorm", b_dtype="bfloat16", b_shape=(4096,)).key)
    assert lay["x"] == (pb.BF16, (32, 4096), (4096, 1)) and lay["mean"] == (pb.FP32, (32,), (1,))
    assert lay["b"] == (pb.BF16, (4096,), (1,))
    lay = serving.norm_layouts(norm(norm_pass="bwd", w_dtype=None, w_shape=None).key)
    assert lay["w"] is None and lay["dw"] is None and set(lay) >= {"x", "dy", "dx", "rstd"}


def test_one_warning_per_reason():
    serving.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            serving.warn_once("reason one")
        serving.warn_once("reason two")
    assert [str(w.message) for w in caught] == ["ktune: falling back to torch: reason one",
                                                "ktune: falling back to torch: reason two"]
    assert all(issubclass(w.category, serving.KtuneFallbackWarning) for w in caught)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_an_unreachable_daemon_is_a_fallback_with_one_warning_and_a_later_retry(tmp_path):
    client = ktune.Client(f"unix:{tmp_path}/none.sock", timeout_s=2)
    clock = Clock()
    planner = serving.Planner(ktune.AnswerCache(client), clock=clock)
    key = norm().key
    serving.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            plan, reason = planner.plan(key, 0, lambda: serving.norm_layouts(key))
            assert plan is None and "unreachable" in reason
            serving.warn_once(reason)
    assert len(caught) == 1 and "unreachable" in str(caught[0].message)
    assert client.rpc_count == 1, "an unreachable daemon is asked once, not at every call"
    clock.now += serving.RETRY_UNAVAILABLE_S + 1
    planner.plan(key, 0, lambda: serving.norm_layouts(key))
    assert client.rpc_count == 2, "and asked again after the retry interval"


def test_a_refused_problem_is_remembered_as_final(client):
    planner = serving.Planner(ktune.AnswerCache(client))
    key = ktune.norm_key("rmsnorm", "fwd", 1 << 30, 4096, "bf16")
    for _ in range(3):
        plan, reason = planner.plan(key, 0, lambda: {})
        assert plan is None and "refuses the problem" in reason and "problem.m" in reason
    assert client.rpc_count == 1
    assert planner.cached(key, 0) == (None, reason)
    assert planner.cached(norm().key, 0) is None


def test_plain_norm_keys_ask_the_problem_they_always_did():
    # No variant field set: the daemon's canonical key is the plain norm's.
    problem = ktune.problem_from_key(norm().key).norm
    assert not problem.residual and not problem.weight_offset and problem.out_scale == 0
    assert problem.SerializeToString() == pb.NormProblem(
        op=pb.RMSNORM, norm_pass=pb.FWD, m=32, n=4096, input_dtype=pb.BF16, output_dtype=pb.BF16,
        weight_dtype=pb.BF16, has_weight=True, eps=problem.eps).SerializeToString()


R = dict(r_dtype="bfloat16", r_shape=X[0], r_strides=X[1])
S = dict(fp8_out=True, s_dtype="float32", s_shape=(1,))


@pytest.mark.parametrize("change, fields", [
    (R, dict(residual=True, weight_offset=False, output_dtype=pb.BF16)),
    (dict(norm_pass="bwd", dy_dtype="bfloat16", **R), dict(residual=True, norm_pass=pb.BWD)),
    (dict(weight_offset=True), dict(weight_offset=True, residual=False)),
    (dict(op="layernorm", norm_pass="bwd", weight_offset=True), dict(op=pb.LAYERNORM, weight_offset=True)),
    (S, dict(output_dtype=pb.FP8_E4M3, weight_dtype=pb.BF16)),
    (dict(w_dtype="float32", **S), dict(output_dtype=pb.FP8_E4M3, weight_dtype=pb.FP32)),
    (dict(weight_offset=True, **R, **S), dict(output_dtype=pb.FP8_E4M3, residual=True, weight_offset=True)),
])
def test_variants_reach_the_problem_through_the_key(change, fields):
    d = norm(**change)
    assert d.served, d.reason
    problem = ktune.problem_from_key(d.key).norm
    for name, value in fields.items():
        assert getattr(problem, name) == value, name
    assert ktune.norm_problem(*d.key[1:]).norm == problem  # norm_key's arguments are the key's fields
    assert problem.out_scale == 0  # not in the daemon's key: the op reads the scale tensor at launch


@pytest.mark.parametrize("change, words", [
    (dict(op="layernorm", **R), "RMSNorm only"),
    (dict(r_dtype="float32", r_shape=X[0], r_strides=X[1]), "residual of dtype float32"),
    (dict(r_dtype="bfloat16", r_shape=(32, 4096), r_strides=(4096, 1)), "input's dtype and shape"),
    (dict(r_dtype="bfloat16", r_shape=X[0], r_strides=(4096, 16384, 1)), "contiguous"),
    (dict(norm_pass="bwd", r_dtype="float16", r_shape=X[0], r_strides=X[1]), "dresidual of dtype float16"),
    (dict(w_dtype=None, w_shape=None, weight_offset=True), "without a weight"),
    (dict(op="layernorm", **S), "RMSNorm forward only"),
    (dict(norm_pass="bwd", **S), "RMSNorm forward only"),
    (dict(fp8_out=True, s_dtype="float16", s_shape=(1,)), "one float32"),
    (dict(fp8_out=True, s_dtype="float32", s_shape=(2,)), "one float32"),
])
def test_variants_ktune_does_not_serve_fall_back_with_a_reason(change, words):
    d = norm(**change)
    assert not d.served and words in d.reason


def test_variant_layouts_bind_residual_dresidual_and_scale():
    fwd = serving.norm_layouts(norm(**R, **S).key)
    assert fwd["residual"] == (pb.BF16, (32, 4096), (4096, 1))
    assert fwd["y"] == (pb.FP8_E4M3, (32, 4096), (4096, 1)) and fwd["scale"] == (pb.FP32, (1,), (1,))
    bwd = serving.norm_layouts(norm(norm_pass="bwd", **R).key)
    assert bwd["dresidual"] == (pb.BF16, (32, 4096), (4096, 1))
    plain = serving.norm_layouts(norm().key)
    assert plain["residual"] is None and plain["scale"] is None
    assert serving.norm_layouts(norm(norm_pass="bwd").key)["dresidual"] is None
