"""patch(model): swap a model's norm modules, in place, for ktune-backed ones.

What is swapped (each keeps its Parameter objects, so optimizers, state_dict
keys and tied weights are unchanged):
  torch.nn.RMSNorm and torch.nn.LayerNorm over one (the last) dimension;
  Hugging Face style RMSNorms: LlamaRMSNorm, Qwen2RMSNorm, MistralRMSNorm, and
  any module whose class name ends in RMSNorm with `weight` and
  `variance_epsilon` (the Llama formula: y = w * x * rsqrt(mean(x^2) + eps));
  with linears=True, torch.nn.Linear too.
Gemma-style norms (1 + w, attribute `eps`) do not match and are left alone.
A module shared by several parents is replaced by one module everywhere.
Hooks registered on a replaced module are not carried over.
"""
import torch

from .modules import LayerNorm, Linear, RMSNorm

HF_RMSNORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")


def _is_hf_rmsnorm(module):
    name = type(module).__name__
    return name in HF_RMSNORMS or (name.endswith("RMSNorm") and isinstance(getattr(module, "weight", None),
                                                                         torch.Tensor)
                                   and isinstance(getattr(module, "variance_epsilon", None), float))


def replacement(module, linears=False):
    """The ktune module standing in for `module`, or None when it is not one patch() swaps."""
    if isinstance(module, (RMSNorm, LayerNorm, Linear)):
        return None
    torch_rmsnorm = getattr(torch.nn, "RMSNorm", None)
    if torch_rmsnorm is not None and isinstance(module, torch_rmsnorm):
        if len(module.normalized_shape) != 1:
            return None
        return RMSNorm(module.weight, module.eps)
    if isinstance(module, torch.nn.LayerNorm):
        if len(module.normalized_shape) != 1:
            return None
        return LayerNorm(module.weight, module.bias, module.eps)
    if _is_hf_rmsnorm(module):
        return RMSNorm(module.weight, float(module.variance_epsilon))
    if linears and type(module) is torch.nn.Linear:
        return Linear(module.weight, module.bias)
    return None


def patch(model, linears=False):
    """Swaps model's submodules in place; returns {qualified name: replaced class name}.

    The model itself is never replaced (there is no parent to hold the new one).
    """
    made = {}  # id(old module) -> its replacement, so shared modules stay shared
    swapped = {}
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent.named_children()):
            new = made.get(id(child))
            if new is None:
                new = replacement(child, linears)
                if new is None:
                    continue
                new.train(child.training)
                made[id(child)] = new
            setattr(parent, child_name, new)
            swapped[f"{parent_name}.{child_name}" if parent_name else child_name] = type(child).__name__
    return swapped
