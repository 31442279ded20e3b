"""Tiling rules for elementwise ops, reductions and concatenation (any layout: they follow their inputs' tiles).

Each rule takes the :class:`~poet.execute.tiled.Rewriter` and an original FX
node and returns the rewritten value (a :class:`Tiled` tensor, a
:class:`TupleVal` for tuple ops, or a whole FX node), or ``None`` to leave the
op whole.  Spatial rules (convolutions, BatchNorm, pooling) are in
:mod:`poet.execute.tiled_spatial`, token rules in :mod:`poet.execute.tiled_tokens`,
streamed attention in :mod:`poet.execute.tiled_attention`, views of tiled
tensors in :mod:`poet.execute.tiled_views`; what they share is in
:mod:`poet.execute.tiled_emit`.
"""

from __future__ import annotations

import math

import torch

from . import tiled_ops as K
from .tiled_emit import each_tile, fx_value, last_tile, norm_dim, partials, tiled_output
from .tiled_values import Layout, Tiled, TilingError

aten = torch.ops.aten


# ------------------------------------------------------------------ pointwise
def pointwise(rw, n):
    out = fx_value(n)
    if not isinstance(out, torch.Tensor) or out.dim() == 0:
        return None
    shape = tuple(out.shape)
    lay = rw.layout_for(shape)
    same = [v.layout for v in (rw.env.get(a) for a in n.all_input_nodes) if isinstance(v, Tiled) and v.shape == shape]
    if same:  # follow an input's tiles, along the usual axis if one is
        lay = next((x for x in same if x.dim == lay.dim), same[0])
    d = lay.dim
    tiles = []
    for _, a0, b0, tile in each_tile(rw, n, lay):

        def arg(x, a0=a0, b0=b0, tile=tile):
            if isinstance(x, (list, tuple)):
                return type(x)(arg(y, a0, b0, tile) for y in x)
            if not isinstance(x, torch.fx.Node):
                return x
            xs = rw.shape(x)
            k = d - (len(shape) - len(xs))  # broadcasting aligns trailing dims
            if k >= 0 and len(xs) > k and xs[k] == shape[d]:
                return rw.rows_of(x, k, a0, b0, n, tile)
            return rw.full(x, "broadcast into a tiled op")

        args = [arg(x) for x in n.args]
        kwargs = {k: arg(x) for k, x in n.kwargs.items()}
        tiles.append(rw.emit(n.target, args, n, tile=tile, flops=rw.share(n, a0, b0, shape[d]), kwargs=kwargs))
    return tiled_output(n, lay, tiles)


# ------------------------------------------------------------------ reductions, cat
def reduction(rw, n):
    x = n.args[0]
    v = rw.env.get(x)
    if not isinstance(v, Tiled):
        return None  # a whole input: tiling its reduction saves nothing
    shape = v.shape
    if n.target is aten.sum.default:
        dims, keepdim = list(range(len(shape))), False
    else:
        dims = n.args[1] if len(n.args) > 1 and n.args[1] is not None else list(range(len(shape)))
        keepdim = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
    dims = sorted(norm_dim(d, len(shape)) for d in dims)
    out = fx_value(n)
    lay = v.layout
    if lay.dim not in dims:
        return pointwise_reduce(rw, n, v, dims, keepdim)
    count = math.prod(shape[d] for d in dims)
    scale = 1.0 / count if n.target is aten.mean.dim else 1.0
    parts = partials(
        rw,
        n,
        lay,
        K.tile_sum_partial,
        lambda i, lo, hi, t: (v.tiles[i], dims, keepdim, out.dtype),
        lambda lo, hi: rw.share(n, lo, hi, shape[lay.dim]),
    )
    return rw.emit(
        K.tile_sum_combine, (parts, scale, out.dtype), n, tile=last_tile(rw, n, lay), flops=out.numel() * lay.count
    )


def pointwise_reduce(rw, n, v, dims, keepdim):
    """A reduction along axes other than the tiled one: tile by tile, the tiled axis renumbered."""
    lay = v.layout
    newdim = lay.dim if keepdim else lay.dim - sum(1 for d in dims if d < lay.dim)
    tiles = [
        rw.emit(
            n.target,
            [v.tiles[i]] + list(n.args[1:]),
            n,
            tile=t,
            kwargs=dict(n.kwargs),
            flops=rw.share(n, a0, b0, v.shape[lay.dim]),
        )
        for i, a0, b0, t in each_tile(rw, n, lay)
    ]
    return tiled_output(n, Layout(newdim, lay.bounds, lay.axis), tiles)


def cat(rw, n):
    tensors = n.args[0]
    out = fx_value(n)
    dim = norm_dim(n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0), out.dim())
    lay = rw.layout_for(tuple(out.shape))
    if dim == lay.dim:
        raise TilingError("concatenation along the tiled axis: not tiled yet")
    tiles = [
        rw.emit(aten.cat.default, ([rw.rows_of(x, lay.dim, a0, b0, n, t) for x in tensors], dim), n, tile=t)
        for _, a0, b0, t in each_tile(rw, n, lay)
    ]
    return tiled_output(n, lay, tiles)


def _tensor_to_tensor(op) -> bool:
    """An overload a traced graph can hold: one Tensor out, some Tensor in, nothing mutated (not
    ``add.int``, ``where(condition) -> Tensor[]`` or ``copy.Dict_str``), and not always decomposed
    by tracing (``relu6`` becomes ``hardtanh``, ``where.Scalar`` becomes ``where.self``)."""
    schema = op._schema
    rets = schema.returns
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return (
        not schema.is_mutable
        and len(rets) == 1
        and str(rets[0].type) == "Tensor"
        and any(str(a.type) == "Tensor" for a in schema.arguments)
        and not (has(op.name(), "CompositeImplicitAutograd") and not has(op.name(), "CPU"))
    )


def _pointwise_targets():
    out = {}
    for name in (
        "relu",
        "add",
        "sub",
        "mul",
        "div",
        "threshold_backward",
        "gelu",
        "gelu_backward",
        "sigmoid",
        "sigmoid_backward",
        "tanh",
        "tanh_backward",
        "silu",
        "silu_backward",
        "native_dropout_backward",
        "clone",
        "neg",
        "exp",
        "where",
        "hardtanh",
        "hardtanh_backward",
        "leaky_relu",
        "leaky_relu_backward",
        "masked_fill",
        "rsqrt",
        "pow",
        "_to_copy",
        "copy",
        "fill",
        "le",
        "lt",
        "ge",
        "gt",
        "eq",
        "ne",
        "abs",
        "erf",
        "log",
        "sqrt",
        "reciprocal",
        "clamp",
        "clamp_min",
        "clamp_max",
        "relu6",
        "elu",
        "elu_backward",
        "softplus",
        "mish",
        "hardswish",
        "hardswish_backward",
        "hardsigmoid",
        "hardsigmoid_backward",
    ):
        pk = getattr(aten, name, None)
        if pk is None:
            continue
        for ov in pk.overloads():
            op = getattr(pk, ov)
            if _tensor_to_tensor(op) and torch.Tag.nondeterministic_seeded not in op.tags:
                out[op] = pointwise
    return out


RULES = {
    **_pointwise_targets(),
    aten.mean.dim: reduction,
    aten.sum.dim_IntList: reduction,
    aten.sum.default: reduction,
    aten.cat.default: cat,
}
