"""ktune's torch ops: fused RMSNorm/LayerNorm (forward and backward) and GEMM with fused epilogues.

    import ktune.torch as kt
    kt.configure(address="unix:/run/ktune/ktuned.sock")   # or env KTUNE_ADDRESS
    y = kt.rms_norm(x, weight, 1e-5)                       # autograd reaches ktune's fused backward
    y = kt.linear(x, weight, bias, activation="gelu")
    kt.patch(model)                                        # swap the model's norm modules in place

The ops are torch.library custom ops (ktune::rms_norm_fwd, ...), with fake
implementations, so torch.compile(fullgraph=True) traces them. A call ktune
does not serve (dtype, shape, stride, CPU tensors, no daemon, no launcher)
runs torch's own computation instead and warns once per reason
(ktune.serving.KtuneFallbackWarning): never an error.
"""
from ._ops import configure, layer_norm, linear, rms_norm, planner
from .modules import LayerNorm, Linear, RMSNorm
from .patch import patch

__all__ = ["configure", "layer_norm", "linear", "rms_norm", "planner", "LayerNorm", "Linear", "RMSNorm", "patch"]
