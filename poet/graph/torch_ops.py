"""What one aten call of a traced training step costs: bytes of its tensors, FLOPs of its op.

Shared by extraction (:mod:`poet.graph.torch_export`) and tiled rewrites: the
sizes and FLOP estimates of FX values, and which ops are aliases (views) or
draw from the random generator.
"""

from __future__ import annotations

import operator

try:  # the module must import without torch; the functions need it
    import torch
except Exception:  # pragma: no cover
    torch = None


class ExtractionError(RuntimeError):
    """The model could not be traced into a training graph (``node``: the FX node that failed, if one did)."""

    node: str | None = None


def tensors_of(val) -> list:
    if torch is not None and isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        out = []
        for x in val:
            out.extend(tensors_of(x))
        return out
    return []


def tensor_bytes(val) -> int:
    """Bytes of the unique storages behind a tensor or a tuple of tensors."""
    total = 0
    seen = set()
    for t in tensors_of(val):
        try:
            st = t.untyped_storage()
            nb = int(st.nbytes())
            key = st._cdata
        except Exception:
            nb = t.numel() * t.element_size()
            key = id(t)
        if nb == 0:
            nb = t.numel() * t.element_size()
        if key in seen:
            continue
        seen.add(key)
        total += nb
    return total


def numel_of(val) -> int:
    return sum(int(t.numel()) for t in tensors_of(val))


def is_alias_op(target) -> bool:
    if torch is None:
        return False
    if target is operator.getitem:
        return False
    if target in (torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default):
        return True
    return bool(getattr(target, "is_view", False))


def is_seeded_op(target) -> bool:
    tags = getattr(target, "tags", ())
    return torch is not None and torch.Tag.nondeterministic_seeded in tags


def op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    if torch is not None and isinstance(target, torch._ops.OpOverload):
        return str(target)  # e.g. aten.convolution.default
    return str(getattr(target, "__name__", None) or target)


# FLOP multipliers per output element for elementwise families (rest: 1 per element)
ELEMENTWISE_COST = {
    "exp": 4,
    "log": 4,
    "tanh": 6,
    "sigmoid": 5,
    "gelu": 8,
    "gelu_backward": 10,
    "erf": 6,
    "pow": 4,
    "rsqrt": 2,
    "sqrt": 2,
    "div": 1,
    "sigmoid_backward": 3,
    "tanh_backward": 3,
    "silu": 5,
    "silu_backward": 8,
    "native_dropout": 2,
    "native_dropout_backward": 2,
}


def op_flops(target, args, kwargs, out_val) -> float:
    """FLOPs of one aten call from the shapes of its (meta) arguments and output."""
    if torch is None:
        return 0.0
    packet = getattr(target, "overloadpacket", None)
    try:
        from torch.utils.flop_counter import flop_registry

        fn = flop_registry.get(packet) or flop_registry.get(target)
    except Exception:  # pragma: no cover
        fn = None
    if fn is not None:
        try:
            return float(fn(*args, **kwargs, out_val=out_val))
        except Exception:
            pass
    base = getattr(packet, "__name__", op_name(target)).split(".")[-1]
    in_numel = sum(numel_of(a) for a in args if isinstance(a, (tuple, list)) or tensors_of(a))
    out_numel = numel_of(out_val)
    if "batch_norm" in base or "layer_norm" in base or "group_norm" in base:
        return float((10 if "backward" in base else 6) * max(in_numel, out_numel))
    if "softmax" in base:
        return float((4 if "backward" in base else 5) * max(in_numel, out_numel))
    if base in (
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "var",
        "std",
        "var_mean",
        "nll_loss_forward",
        "nll_loss_backward",
        "norm",
        "linalg_vector_norm",
        "embedding_dense_backward",
    ):
        return float(max(in_numel, out_numel))
    return float(ELEMENTWISE_COST.get(base, 1) * max(out_numel, 1))


__all__ = [
    "ExtractionError",
    "ELEMENTWISE_COST",
    "is_alias_op",
    "is_seeded_op",
    "numel_of",
    "op_flops",
    "op_name",
    "tensor_bytes",
    "tensors_of",
]
