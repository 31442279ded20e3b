"""What every tiling rule does the same way: read an op's traced value, pick a layout, walk the tiles,
chain accumulators and hand back a gradient op's tuple.

The rules (:mod:`poet.execute.tiled_rules`, :mod:`poet.execute.tiled_spatial`,
:mod:`poet.execute.tiled_tokens`) take the :class:`~poet.execute.tiled.Rewriter` and an original FX
node and return the rewritten value; these helpers are their shared vocabulary.
"""

from __future__ import annotations

from .tiled_values import Layout, Tiled, TupleVal


def fx_value(n):
    """The traced (fake) value of an original FX node."""
    return n.meta.get("val")


def norm_dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def layout_of(rw, a, shape, axis="rows") -> Layout:
    """The layout of ``a`` if it is tiled with this shape, else the default layout for the shape."""
    v = rw.env.get(a)
    if isinstance(v, Tiled) and v.shape == tuple(shape):
        return v.layout
    return rw.layout_for(shape, axis)


def tiled_layout(rw, n, shape, dims_reduced=()):
    """The layout of an input with ``shape`` that is tiled along an axis the op does not reduce, else the default
    (None when the default axis is reduced)."""
    for a in n.all_input_nodes:
        v = rw.env.get(a)
        if isinstance(v, Tiled) and v.shape == tuple(shape) and v.layout.dim not in dims_reduced:
            return v.layout
    lay = rw.layout_for(tuple(shape))
    return None if lay.dim in dims_reduced else lay


def each_tile(rw, n, lay: Layout, part: str = "output"):
    """``(i, lo, hi, tile)`` for every tile of ``lay``: its index, its rows and its :class:`Tile` record."""
    for i in range(lay.count):
        lo, hi = lay.rows(i)
        yield i, lo, hi, rw.tile_of(n, i, lay, part=part)


def tiled_output(n, lay: Layout, tiles: list) -> Tiled:
    """The tiles of op ``n``'s (single tensor) output."""
    out = fx_value(n)
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


def chain(rw, n, lay: Layout, target, args_of, flops_of):
    """An accumulator over the tiles: ``acc = target(acc, *args_of(i, lo, hi, tile))``, None at first."""
    acc = None
    for i, lo, hi, t in each_tile(rw, n, lay, part="partial"):
        acc = rw.emit(target, (acc,) + tuple(args_of(i, lo, hi, t)), n, tile=t, flops=flops_of(lo, hi))
    return acc


def partials(rw, n, lay: Layout, target, args_of, flops_of) -> list:
    """One partial per tile (``target(*args_of(i, lo, hi, tile))``), to be combined by one more node."""
    return [
        rw.emit(target, tuple(args_of(i, lo, hi, t)), n, tile=t, flops=flops_of(lo, hi))
        for i, lo, hi, t in each_tile(rw, n, lay, part="partial")
    ]


def last_tile(rw, n, lay: Layout, part: str = "partial"):
    """The :class:`Tile` record of a node that finishes a pass over the tiles (a combination)."""
    return rw.tile_of(n, lay.count - 1, lay, part=part)


def pair_items(rw, node, want_first: bool, want_second: bool) -> tuple:
    """``(node[0], node[1])`` of a node returning a pair (a weight and a bias gradient), None where not wanted."""
    return (rw.item(node, 0) if want_first else None, rw.item(node, 1) if want_second else None)


def gradient_tuple(items: dict, mask, acc_w, acc_b) -> TupleVal:
    """A backward op's ``(grad_input, grad_weight, grad_bias)`` with the parts its output mask asks for."""
    if mask[1]:
        items[1] = acc_w
    if mask[2]:
        items[2] = acc_b
    return TupleVal(items)
