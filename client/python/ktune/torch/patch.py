"""patch(model): swap a model's norm modules, in place, for ktune-backed ones.

What is swapped (each keeps its Parameter objects, so optimizers, state_dict
keys and tied weights are unchanged):
  torch.nn.RMSNorm and torch.nn.LayerNorm over one (the last) dimension;
  Hugging Face style RMSNorms: LlamaRMSNorm, Qwen2RMSNorm, MistralRMSNorm, and
  any module whose class name ends in RMSNorm with `weight` and
  `variance_epsilon` (the Llama formula: y = w * x * rsqrt(mean(x^2) + eps));
  Gemma-style RMSNorms, by class name (GEMMA_RMSNORMS: transformers' GemmaRMSNorm,
  Gemma2RMSNorm, Gemma3RMSNorm and the others that compute
  (x.float() * rsqrt(mean(x.float()^2) + eps) * (1 + w.float())).type_as(x)),
  with `weight` and `eps`, for ktune.torch.GemmaRMSNorm (the weight offset);
  with linears=True, torch.nn.Linear too.
Gemma-style norms are matched by name, not by shape: other *RMSNorms with
`weight` and `eps` compute x * w (MoshiRMSNorm) or scale before normalizing
(MuseSparkTextInputScaledRMSNorm), and are left alone.
The fused residual add is not patched: in Hugging Face models the add is a
line of the decoder layer's forward, not a module. Engines that call their
norm with the residual (vLLM's RMSNorm(x, residual)) can use
ktune.torch.FusedAddRMSNorm, or call fused_add_rms_norm, themselves.
A module shared by several parents is replaced by one module everywhere.
Hooks registered on a replaced module are not carried over.
"""
import torch

from .modules import GemmaRMSNorm, LayerNorm, Linear, RMSNorm

HF_RMSNORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")
# transformers 5.25's classes with Gemma's formula, read from their source.
GEMMA_RMSNORMS = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "RecurrentGemmaRMSNorm", "T5GemmaRMSNorm",
                  "T5Gemma2RMSNorm", "VaultGemmaRMSNorm", "Qwen3NextRMSNorm", "Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm")


def _is_hf_rmsnorm(module):
    name = type(module).__name__
    return name in HF_RMSNORMS or (name.endswith("RMSNorm") and isinstance(getattr(module, "weight", None),
                                                                         torch.Tensor)
                                   and isinstance(getattr(module, "variance_epsilon", None), float))


def _is_gemma_rmsnorm(module):
    return type(module).__name__ in GEMMA_RMSNORMS and isinstance(getattr(module, "weight", None), torch.Tensor) \
        and isinstance(getattr(module, "eps", None), float)


def replacement(module, linears=False):
    """The ktune module standing in for `module`, or None when it is not one patch() swaps."""
    if isinstance(module, (RMSNorm, GemmaRMSNorm, LayerNorm, Linear)):
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
    if _is_gemma_rmsnorm(module):
        return GemmaRMSNorm(module.weight, module.eps)
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
