"""The gRPC client, the answer cache and the error mapping, against a live ktuned."""
import pytest

import ktune
from ktune import errors
from ktune.v1 import ktune_pb2 as pb

RMS_FWD = ktune.norm_key("rmsnorm", "fwd", 4096, 4096, "bf16", eps=1e-5)


def test_status_answers(client):
    status = client.status()
    assert status.version
    assert status.nvrtc_version > 0


def test_norm_answer_carries_a_launchable_recipe(client):
    answer = client.get_config(ktune.problem_from_key(RMS_FWD), include_cubin=True)
    assert answer.source in (pb.HEURISTIC, pb.TUNED, pb.NEAREST)
    recipe = answer.recipe
    assert recipe.template_id == "norm/rmsnorm_fwd"
    assert recipe.cubin, "an answer asked with include_cubin must carry the cubin"
    kernel = recipe.kernels[0]
    # The kernel's signature names every pointer a variant may use; the recipe's
    # tensors are the ones this problem binds (no residual or scale for plain RMSNorm).
    assert kernel.lowered_name.startswith("_Z")
    assert list(kernel.params)[:6] == ["x", "residual", "w", "y", "rstd", "scale"]
    # The optional ones this problem does not use are described with no elements.
    used = [t.name for t in recipe.tensors if not (t.optional and list(t.shape) == [0])]
    unused = [t.name for t in recipe.tensors if t.name not in used]
    assert used == ["x", "w", "y", "rstd"] and unused == ["residual", "scale"]
    assert list(kernel.grid)[0] >= 1 and list(kernel.block)[0] >= 32


def test_gemm_answer_carries_a_recipe(client):
    key = ktune.gemm_key(256, 1024, 512, epilogue="bias_gelu")
    answer = client.get_config(ktune.problem_from_key(key), include_cubin=True)
    assert answer.config.WhichOneof("kind") == "gemm"
    assert answer.recipe.template_id.startswith("gemm/") or answer.recipe.template_id == "cublaslt"


def test_key_and_problem_agree():
    problem = ktune.norm_problem("layernorm", "bwd", 8, 1024, "fp16", has_bias=True, eps=1e-5)
    assert problem.norm.norm_pass == pb.BWD and problem.norm.op == pb.LAYERNORM
    assert problem.norm.has_bias and problem.norm.input_dtype == pb.FP16 and problem.norm.m == 8
    assert ktune.problem_from_key(ktune.norm_key("layernorm", "bwd", 8, 1024, "fp16", has_bias=True, eps=1e-5)) \
        == problem
    with pytest.raises(ValueError, match="dtype 'fp64'"):
        ktune.norm_key("rmsnorm", "fwd", 8, 8, "fp64")


def test_second_lookup_makes_no_rpc(client):
    cache = ktune.AnswerCache(client)
    first = cache.get(RMS_FWD)
    calls = client.rpc_count
    for _ in range(100):
        assert cache.get(RMS_FWD) is first
    assert client.rpc_count == calls, "a cached answer must cost no RPC"


def test_policy_is_part_of_the_cache_key(client):
    cache = ktune.AnswerCache(client)
    cache.get(RMS_FWD, pb.HEURISTIC_ON_MISS)
    calls = client.rpc_count
    with pytest.raises(ktune.NotFound):  # nothing is tuned in this daemon's fresh store
        cache.get(ktune.norm_key("rmsnorm", "fwd", 4096, 4096, "bf16", eps=1e-5), pb.CACHED_ONLY)
    assert client.rpc_count == calls + 1


@pytest.mark.parametrize("key, field", [
    (ktune.norm_key("rmsnorm", "fwd", 0, 4096, "bf16"), "problem.m"),
    (ktune.norm_key("rmsnorm", 0, 16, 4096, "bf16"), "problem.pass"),
    (ktune.norm_key("rmsnorm", "fwd", 16, 4096, "bf16", weight_dtype="fp16"), "problem.weight_dtype"),
    (ktune.gemm_key(16, 64, 64, d_dtype="fp16"), "d_dtype"),
])
def test_a_bad_problem_is_invalid_problem_naming_the_field(client, key, field):
    with pytest.raises(ktune.InvalidProblem) as info:
        client.get_config(ktune.problem_from_key(key))
    assert info.value.code == errors.INVALID_ARGUMENT
    assert field in info.value.message
    assert info.value.field is not None and info.value.field.endswith(field)
    assert isinstance(info.value, ValueError)


def test_an_unreachable_daemon_is_unavailable(tmp_path):
    with ktune.Client(f"unix:{tmp_path}/none.sock", timeout_s=2) as c:
        with pytest.raises(ktune.Unavailable, match="is ktuned running"):
            c.status()


def test_compile_only_daemon_refuses_a_tune_as_failed_precondition(client):
    if not client.status().compile_only:
        pytest.skip("the daemon has a GPU: it tunes")
    with pytest.raises(ktune.FailedPrecondition, match="compile-only"):
        list(client.tune(ktune.problem_from_key(RMS_FWD)))


@pytest.mark.parametrize("code, cls", [
    (3, ktune.InvalidProblem), (5, ktune.NotFound), (9, ktune.FailedPrecondition), (14, ktune.Unavailable),
    (4, ktune.Unavailable), (7, ktune.PermissionDenied), (16, ktune.PermissionDenied), (8, ktune.ResourceExhausted),
    (13, ktune.Internal), (2, ktune.Internal),
])
def test_status_codes_map_to_the_hierarchy(code, cls):
    e = errors.from_code(code, "x: y")
    assert type(e) is cls and isinstance(e, ktune.Error) and e.code == code
