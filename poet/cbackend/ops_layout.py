"""Specs of ops that move elements between views (kernels: runtime/kernels_layout.c).

A list of tensors (cat's, stack's, a tile kernel's pieces) becomes that many kernel inputs and a
count scalar.  ``where(cond, a, b)`` is ``masked_fill(b, cond, a)``: one kernel for both.
"""

from __future__ import annotations

from .opspec import CallSpec, arg, register


@register("aten.clone.default", "aten.lift_fresh_copy.default")
def clone(n) -> CallSpec:
    return CallSpec("copy", (n.args[0],))


@register("aten.cat.default")
def cat(n) -> CallSpec:
    tensors = tuple(n.args[0])
    return CallSpec("cat", tensors, (int(arg(n, 1, "dim", 0)), len(tensors)))


@register("aten.stack.default")
def stack(n) -> CallSpec:
    tensors = tuple(n.args[0])
    return CallSpec("stack", tensors, (int(arg(n, 1, "dim", 0)), len(tensors)))


@register("poet.execute.tiled_ops.tile_assemble", "poet.execute.tiled_ops.tile_gather")
def tile_join(n) -> CallSpec:
    """The whole tensor (or a consumer's rows) from its tiles: a cat (a copy for one tile)."""
    pieces, dim = n.args[:2]
    return CallSpec("cat", tuple(pieces), (int(dim), len(pieces)))


@register("aten.masked_fill.Scalar")
def masked_fill_scalar(n) -> CallSpec:
    x, mask, value = n.args[:3]
    return CallSpec("masked_fill", (x, mask, None), (float(value),), broadcast=True)


@register("aten.masked_fill.Tensor")
def masked_fill_tensor(n) -> CallSpec:
    x, mask, value = n.args[:3]
    return CallSpec("masked_fill", (x, mask, value), (0.0,), broadcast=True)


@register("aten.where.self")
def where(n) -> CallSpec:
    cond, a, b = n.args[:3]
    return CallSpec("masked_fill", (b, cond, a), (0.0,), broadcast=True)


@register("aten.tril.default")
def tril(n) -> CallSpec:
    return CallSpec("tril", (n.args[0],), (int(arg(n, 1, "diagonal", 0)),))
