"""nn.Modules over ktune's ops, holding the same parameters as the modules patch() replaces."""
import torch

from ._ops import fused_add_rms_norm, layer_norm, linear, rms_norm


def _parameter(weight):
    return weight if weight is None or isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension. eps None: torch.finfo(x.dtype).eps, as torch.nn.RMSNorm."""

    def __init__(self, weight=None, eps=1e-6):
        super().__init__()
        self.weight = _parameter(weight)
        self.eps = eps

    @classmethod
    def like(cls, hidden_size, eps=1e-6, device=None, dtype=None):
        return cls(torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype)), eps)

    @property
    def variance_epsilon(self):  # the Hugging Face name, for code that reads it
        return self.eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps if self.eps is not None else torch.finfo(x.dtype).eps)

    def extra_repr(self):
        return f"{tuple(self.weight.shape) if self.weight is not None else None}, eps={self.eps}"


class GemmaRMSNorm(torch.nn.Module):
    """Gemma's RMSNorm, as transformers' GemmaRMSNorm (Gemma2RMSNorm, Gemma3RMSNorm, ...) computes it:
    (x.float() * rsqrt(mean(x.float()^2) + eps) * (1 + weight.float())).type_as(x). The weight holds
    the offset from 1 (Gemma initialises it to zeros); y has x's dtype even with a float32 weight."""

    def __init__(self, weight, eps=1e-6):
        super().__init__()
        self.weight = _parameter(weight)
        self.eps = eps

    @classmethod
    def like(cls, hidden_size, eps=1e-6, device=None, dtype=None):
        return cls(torch.nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype)), eps)

    def forward(self, x):
        y = rms_norm(x, self.weight, self.eps, weight_offset=True)
        # Only a float32 weight with a narrower x promotes; one rounding of the fp32 result, as type_as.
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class FusedAddRMSNorm(torch.nn.Module):
    """An RMSNorm that engines call with the residual stream, as vLLM's RMSNorm(x, residual):
    forward(x) is rms_norm(x); forward(x, residual) adds x into residual in place and returns
    (rms_norm(residual), residual) in one kernel (fused_add_rms_norm). weight_offset: Gemma's (1 + w)."""

    def __init__(self, weight=None, eps=1e-6, weight_offset=False):
        super().__init__()
        self.weight = _parameter(weight)
        self.eps = eps
        self.weight_offset = weight_offset

    def forward(self, x, residual=None):
        if residual is None:
            return rms_norm(x, self.weight, self.eps, self.weight_offset)
        return fused_add_rms_norm(x, residual, self.weight, self.eps, self.weight_offset)

    def extra_repr(self):
        shape = tuple(self.weight.shape) if self.weight is not None else None
        return f"{shape}, eps={self.eps}, weight_offset={self.weight_offset}"


class LayerNorm(torch.nn.Module):
    """LayerNorm over the last dimension."""

    def __init__(self, weight=None, bias=None, eps=1e-5):
        super().__init__()
        self.weight = weight
        self.bias = bias
        self.eps = eps

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{tuple(self.weight.shape) if self.weight is not None else None}, eps={self.eps}"


class Linear(torch.nn.Module):
    """y = act(x @ weight.T + bias) with the activation fused into ktune's GEMM epilogue."""

    def __init__(self, weight, bias=None, activation=None):
        super().__init__()
        self.weight = weight
        self.bias = bias
        self.activation = activation

    @property
    def in_features(self):
        return self.weight.shape[1]

    @property
    def out_features(self):
        return self.weight.shape[0]

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}, activation={self.activation}"
