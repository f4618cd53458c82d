"""ktune's torch ops: fused RMSNorm/LayerNorm (forward and backward) and GEMM with fused epilogues.

    import ktune.torch as kt
    kt.configure(address="unix:/run/ktune/ktuned.sock")   # or env KTUNE_ADDRESS
    y = kt.rms_norm(x, weight, 1e-5)                       # autograd reaches ktune's fused backward
    y = kt.linear(x, weight, bias, activation="gelu")
    y, residual = kt.fused_add_rms_norm(x, residual, weight, 1e-6)   # residual += x in place, then the norm
    y = kt.rms_norm(x, weight, 1e-6, weight_offset=True)   # Gemma's (1 + w)
    q = kt.rms_norm_fp8(x, weight, scale, 1e-6)            # float8_e4m3fn, divided by the scale tensor
    kt.patch(model)                                        # swap the model's norm modules in place

The ops are torch.library custom ops (ktune::rms_norm_fwd, ...), with fake
implementations, so torch.compile(fullgraph=True) traces them. A call ktune
does not serve (dtype, shape, stride, CPU tensors, no daemon, no launcher)
runs torch's own computation instead and warns once per reason
(ktune.serving.KtuneFallbackWarning): never an error.
"""
from ._ops import configure, fused_add_rms_norm, layer_norm, linear, planner, rms_norm, rms_norm_fp8
from .modules import FusedAddRMSNorm, GemmaRMSNorm, LayerNorm, Linear, RMSNorm
from .patch import patch

__all__ = ["configure", "fused_add_rms_norm", "layer_norm", "linear", "planner", "rms_norm", "rms_norm_fp8",
           "FusedAddRMSNorm", "GemmaRMSNorm", "LayerNorm", "Linear", "RMSNorm", "patch"]
