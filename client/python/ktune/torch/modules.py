"""nn.Modules over ktune's ops, holding the same parameters as the modules patch() replaces."""
import torch

from ._ops import layer_norm, linear, rms_norm


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension. eps None: torch.finfo(x.dtype).eps, as torch.nn.RMSNorm."""

    def __init__(self, weight=None, eps=1e-6):
        super().__init__()
        self.weight = weight if weight is None or isinstance(weight, torch.nn.Parameter) \
            else torch.nn.Parameter(weight)
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
