"""Reading a served LaunchRecipe: its tensors and typed arguments in Python terms,
and binding a caller's buffers to the tensors by name.

Pure (no torch, no driver): a Binding is checked once per (recipe, layout) by
`plan_binding`, so the per-launch work is picking addresses in order.
"""
from .v1 import ktune_pb2 as pb

DTYPE_NAMES = {pb.BF16: "bf16", pb.FP16: "fp16", pb.FP32: "fp32", pb.FP8_E4M3: "fp8_e4m3"}
ELEMENT_BYTES = {pb.BF16: 2, pb.FP16: 2, pb.FP32: 4, pb.FP8_E4M3: 1}
ROLE_NAMES = {pb.ROLE_INPUT: "input", pb.ROLE_OUTPUT: "output", pb.ROLE_INPUT_OUTPUT: "input_output",
              pb.ROLE_WORKSPACE: "workspace", pb.ROLE_SCALE: "scale", pb.ROLE_UNSPECIFIED: "unspecified"}


class BindingError(ValueError):
    """The caller's buffers do not meet the recipe's tensor contract (a fallback reason, never a crash)."""


def describe_tensor(spec):
    return {"name": spec.name, "role": ROLE_NAMES.get(spec.role, str(spec.role)),
            "dtype": DTYPE_NAMES.get(spec.dtype, "unspecified"), "shape": tuple(spec.shape),
            "strides": tuple(spec.strides), "alignment_bytes": spec.alignment_bytes,
            "optional": spec.optional, "bytes": spec.bytes}


def describe_arg(arg):
    """(name, kind, value): kind is tensor, i32, i64, f32 or tma (value: the tensor it encodes)."""
    kind = arg.WhichOneof("value")
    if kind == "tma":
        return arg.name, kind, arg.tma.tensor
    return arg.name, kind, getattr(arg, kind) if kind else None


def describe(recipe):
    """A plain-data view of a recipe's interface (for printing and tests)."""
    return {"template_id": recipe.template_id,
            "tensors": [describe_tensor(t) for t in recipe.tensors],
            "kernels": [{"lowered_name": k.lowered_name, "args": [describe_arg(a) for a in k.args]}
                        for k in recipe.kernels],
            "workspace_bytes": recipe.workspace_bytes, "cublaslt": recipe.template_id == "cublaslt"}


class Binding:
    """The order in which a caller's named buffers fill recipe.tensors.

    names[i] is the caller's name bound to tensors[i], or None for the
    workspace and for optional tensors the caller does not bind.
    """

    __slots__ = ("names", "alignments", "outputs")

    def __init__(self, names, alignments, outputs):
        self.names = names
        self.alignments = alignments
        self.outputs = outputs

    def addresses(self, buffers):
        """buffers: name -> device address. Raises BindingError on a misaligned address."""
        out = []
        for name, align in zip(self.names, self.alignments):
            if name is None:
                out.append(0)
                continue
            address = buffers[name]
            if align > 1 and address % align:
                # No address in the message: it is a fallback reason, warned once per distinct text.
                raise BindingError(f"tensor {name} is not {align}-byte aligned")
            out.append(address)
        return out


def plan_binding(recipe, layouts):
    """Checks the caller's buffers against the recipe's tensors once.

    layouts: name -> (dtype enum, shape tuple, strides tuple) of what the
    caller will bind, or None to leave an optional tensor unbound. Raises
    BindingError naming the first mismatch.
    """
    if not recipe.tensors:
        raise BindingError("the recipe lists no tensors (a ktuned older than self-describing recipes)")
    names, alignments, outputs = [], [], []
    for spec in recipe.tensors:
        if spec.role == pb.ROLE_WORKSPACE:
            names.append(None)
            alignments.append(0)
            continue
        layout = layouts.get(spec.name)
        if layout is None:
            if not spec.optional:
                raise BindingError(f"the recipe needs tensor '{spec.name}', which this op does not bind")
            names.append(None)
            alignments.append(0)
            continue
        dtype, shape, strides = layout
        if spec.dtype and dtype != spec.dtype:
            raise BindingError(f"tensor {spec.name}: {DTYPE_NAMES.get(dtype, dtype)}, the recipe takes "
                               f"{DTYPE_NAMES.get(spec.dtype, spec.dtype)}")
        if tuple(spec.shape) and _elements(spec.shape) != _elements(shape):
            raise BindingError(f"tensor {spec.name}: shape {tuple(shape)}, the recipe takes {tuple(spec.shape)}")
        if tuple(spec.strides) and not _same_layout(spec.shape, spec.strides, shape, strides):
            raise BindingError(f"tensor {spec.name}: strides {tuple(strides)}, the recipe takes "
                               f"{tuple(spec.strides)} for shape {tuple(spec.shape)}")
        names.append(spec.name)
        alignments.append(spec.alignment_bytes)
        if spec.role in (pb.ROLE_OUTPUT, pb.ROLE_INPUT_OUTPUT):
            outputs.append(spec.name)
    # A tensor the caller leaves unbound (None) may be one this recipe lacks
    # (the norm backward without a weight has no reduce kernel, so no dw).
    unknown = {name for name, layout in layouts.items() if layout is not None} - {s.name for s in recipe.tensors}
    if unknown:
        raise BindingError(f"the recipe has no tensor named {sorted(unknown)[0]!r} "
                           f"(it takes {[s.name for s in recipe.tensors]})")
    return Binding(names, alignments, outputs)


def _elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape):
    out, step = [], 1
    for d in reversed(tuple(shape)):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _same_layout(spec_shape, spec_strides, shape, strides):
    """Both describe the same memory order: equal, or both dense row-major of one element count."""
    if tuple(spec_shape) == tuple(shape) and tuple(spec_strides) == tuple(strides):
        return True
    return (tuple(spec_strides) == contiguous_strides(spec_shape) and tuple(strides) == contiguous_strides(shape)
            and _elements(spec_shape) == _elements(shape))
