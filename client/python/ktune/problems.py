"""Problem constructors and their cache keys.

A key is a plain tuple of the problem's fields in a fixed order: hashing it
is what a cache hit costs, where serializing a proto would cost microseconds.
norm_key/gemm_key and norm_problem/gemm_problem take the same arguments, so
the key and the problem it stands for cannot drift apart.
"""
from .v1 import ktune_pb2 as pb

DTYPES = {"bf16": pb.BF16, "fp16": pb.FP16, "fp32": pb.FP32, "fp8_e4m3": pb.FP8_E4M3}
NORM_OPS = {"rmsnorm": pb.RMSNORM, "layernorm": pb.LAYERNORM}
PASSES = {"fwd": pb.FWD, "bwd": pb.BWD}
EPILOGUES = {None: pb.EPILOGUE_NONE, "none": pb.EPILOGUE_NONE, "bias": pb.EPILOGUE_BIAS,
             "bias_gelu": pb.EPILOGUE_BIAS_GELU, "bias_silu": pb.EPILOGUE_BIAS_SILU,
             "residual_add": pb.EPILOGUE_RESIDUAL_ADD}
POLICIES = {"cached": pb.CACHED_ONLY, "heuristic": pb.HEURISTIC_ON_MISS, "tune": pb.TUNE_ON_MISS}


def _enum(table, value, what):
    if isinstance(value, int):
        return value
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"{what} {value!r}: expected one of {sorted(k for k in table if k)}") from None


def norm_key(op, norm_pass, m, n, dtype, output_dtype=0, weight_dtype=0, has_weight=True, has_bias=False, eps=0.0,
             residual=False, weight_offset=False):
    """A NormProblem's key. The variants (residual, weight_offset, output_dtype "fp8_e4m3") default to the
    plain norm, whose problem, and so the daemon's canonical key, is the one it always was. out_scale is
    not carried: the daemon's key ignores it and the fp8 op reads its scale at launch."""
    return ("norm", _enum(NORM_OPS, op, "op"), _enum(PASSES, norm_pass, "pass"), m, n,
            _enum(DTYPES, dtype, "dtype"), _enum(DTYPES, output_dtype, "output dtype"),
            _enum(DTYPES, weight_dtype, "weight dtype"), has_weight, has_bias, eps, residual, weight_offset)


def gemm_key(m, n, k, a_dtype="bf16", b_dtype="bf16", d_dtype="bf16", c_dtype=0, b_layout=pb.COL_MAJOR,
             epilogue=None, batch=0):
    return ("gemm", m, n, k, _enum(DTYPES, a_dtype, "a dtype"), _enum(DTYPES, b_dtype, "b dtype"),
            _enum(DTYPES, d_dtype, "d dtype"), _enum(DTYPES, c_dtype, "c dtype"), b_layout,
            _enum(EPILOGUES, epilogue, "epilogue"), batch)


def problem_from_key(key):
    """The pb.Problem a norm_key or gemm_key tuple stands for."""
    if key[0] == "norm":
        _, op, norm_pass, m, n, dtype, out, w, has_weight, has_bias, eps, residual, weight_offset = key
        return pb.Problem(norm=pb.NormProblem(op=op, norm_pass=norm_pass, m=m, n=n, input_dtype=dtype,
                                              output_dtype=out, weight_dtype=w, has_weight=has_weight,
                                              has_bias=has_bias, eps=eps, residual=residual,
                                              weight_offset=weight_offset))
    if key[0] == "gemm":
        _, m, n, k, a, b, d, c, b_layout, epilogue, batch = key
        return pb.Problem(gemm=pb.GemmProblem(m=m, n=n, k=k, a_dtype=a, b_dtype=b, d_dtype=d, c_dtype=c,
                                              a_layout=pb.ROW_MAJOR, b_layout=b_layout, epilogue=epilogue,
                                              batch=batch))
    raise ValueError(f"not a problem key: {key!r}")


def norm_problem(*args, **kwargs):
    return problem_from_key(norm_key(*args, **kwargs))


def gemm_problem(*args, **kwargs):
    return problem_from_key(gemm_key(*args, **kwargs))
