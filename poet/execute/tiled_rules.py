"""Tiling rules per aten op family: how one op of the joint graph becomes tiles.

Each rule takes the :class:`~poet.execute.tiled.Rewriter` and an original FX
node and returns the rewritten value (a :class:`Tiled` tensor, a
:class:`TupleVal` for tuple ops, or a whole FX node), or ``None`` to leave the
op whole.  This module holds the spatial rules (rows: the height of NCHW
tensors, for convolutions, pooling, BatchNorm), elementwise ops and
reductions; token rules are in :mod:`poet.execute.tiled_tokens`, views of tiled
tensors in :mod:`poet.execute.tiled_views`.  Geometry of a convolution or pooling
window: output rows ``[a, b)`` read input rows ``[a*s - p, (b-1)*s - p + d*(k-1) + 1)``,
the part outside the tensor being padding (zeros, or -inf for max pooling).
"""

from __future__ import annotations

import math

import torch

from . import tiled_ops as K
from .tiled_values import Layout, Tiled, TilingError, TupleVal

aten = torch.ops.aten


def fx_value(n):
    return n.meta.get("val")


def norm_dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def window_rows(a: int, b: int, k: int, s: int, p: int, d: int) -> tuple[int, int]:
    return a * s - p, (b - 1) * s - p + d * (k - 1) + 1


def reaching_rows(a: int, b: int, k: int, s: int, p: int, d: int, n_out: int) -> tuple[int, int]:
    """Output rows whose windows reach input rows ``[a, b)``."""
    lo = max(0, math.ceil((a + p - d * (k - 1)) / s))
    hi = min(n_out, (b - 1 + p) // s + 1)
    return lo, max(lo, hi)


def _layout_of(rw, a, shape, axis="rows") -> Layout:
    v = rw.env.get(a)
    if isinstance(v, Tiled) and v.shape == tuple(shape):
        return v.layout
    return rw.layout_for(shape, axis)


def tiled_layout(rw, n, shape, dims_reduced=()):
    """The layout of an input with ``shape`` that is tiled along an axis the op does not reduce, else the default."""
    for a in n.all_input_nodes:
        v = rw.env.get(a)
        if isinstance(v, Tiled) and v.shape == tuple(shape) and v.layout.dim not in dims_reduced:
            return v.layout
    lay = rw.layout_for(tuple(shape))
    return None if lay.dim in dims_reduced else lay


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
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        tile = rw.tile_of(n, i, lay)

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
    return Tiled(lay, tiles, shape, out.dtype, out)


# ------------------------------------------------------------------ convolution
def _conv_params(stride, padding, dilation, weight_shape):
    k = weight_shape[2]
    return k, stride[0], padding[0], dilation[0]


def convolution(rw, n):
    x, w, b, stride, padding, dilation, transposed, _, groups = n.args
    out = fx_value(n)
    if transposed or out.dim() != 4:
        raise TilingError("transposed or non-2-D convolution: not tiled yet")
    k, s, p, dl = _conv_params(stride, padding, dilation, fx_value(w).shape)
    H = rw.shape(x)[2]
    lay = rw.layout_for(tuple(out.shape))
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        lo, hi = window_rows(a0, b0, k, s, p, dl)
        ps = rw.pieces(x, 2, lo, hi)
        t = rw.tile_of(n, i, lay, halo=(hi - lo - (b0 - a0) * s + 1) // 2)
        tiles.append(
            rw.emit(
                K.tile_conv,
                (ps, max(0, -lo), max(0, hi - H), rw.full(w), rw.full(b), stride, padding, dilation, groups),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, out.shape[2]),
            )
        )
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


def convolution_backward(rw, n):
    go, x, w, bias_sizes, stride, padding, dilation, transposed, _, groups, mask = n.args
    if transposed or len(rw.shape(x)) != 4:
        raise TilingError("transposed or non-2-D convolution: not tiled yet")
    wshape = fx_value(w).shape
    k, s, p, dl = _conv_params(stride, padding, dilation, wshape)
    xs, gos = rw.shape(x), rw.shape(go)
    H, Ho = xs[2], gos[2]
    flops = rw.unit_flops.get(n.name, 0.0)
    parts = (1 if mask[0] else 0) + (1 if mask[1] or mask[2] else 0)
    items = {}
    if mask[0]:
        lay = rw.layout_for(xs)
        tiles = []
        for i in range(lay.count):
            a0, b0 = lay.rows(i)
            o0, o1 = reaching_rows(a0, b0, k, s, p, dl, Ho)
            ps = rw.pieces(go, 2, o0, o1)
            rs, re = window_rows(o0, o1, k, s, p, dl) if o1 > o0 else (a0, a0)
            t = rw.tile_of(n, i, lay, halo=max(0, (re - rs) - (b0 - a0)) // 2)
            tiles.append(
                rw.emit(
                    K.tile_conv_input_grad,
                    (ps, rs, re - rs, a0, b0, list(xs), rw.full(w), stride, padding, dilation, groups),
                    n,
                    tile=t,
                    flops=flops / parts * max(b0 - a0, re - rs) / H,
                )
            )  # the halo is recomputed
        items[0] = Tiled(lay, tiles, tuple(xs), fx_value(x).dtype)
    if mask[1] or mask[2]:
        lay = _layout_of(rw, go, gos)
        acc_w = acc_b = None
        for j in range(lay.count):
            o0, o1 = lay.rows(j)
            t = rw.tile_of(n, j, lay, part="partial")
            g = rw.rows_of(go, 2, o0, o1, n, t)
            lo, hi = window_rows(o0, o1, k, s, p, dl)
            xp = rw.pieces(x, 2, lo, hi)
            node = rw.emit(
                K.tile_conv_weight_grad,
                (
                    acc_w,
                    acc_b,
                    g,
                    xp,
                    max(0, -lo),
                    max(0, hi - H),
                    rw.full(w),
                    bias_sizes,
                    stride,
                    padding,
                    dilation,
                    groups,
                    bool(mask[1]),
                    bool(mask[2]),
                ),
                n,
                tile=t,
                flops=flops / parts * (o1 - o0) / Ho,
            )
            acc_w = rw.item(node, 0) if mask[1] else None
            acc_b = rw.item(node, 1) if mask[2] else None
        if mask[1]:
            items[1] = acc_w
        if mask[2]:
            items[2] = acc_b
    return TupleVal(items)


# ------------------------------------------------------------------ BatchNorm (training)
def batch_norm(rw, n):
    x, w, b, rm, rv, training, momentum, eps = n.args
    if not training or len(rw.shape(x)) < 3:
        raise TilingError("BatchNorm not in training mode or not on an N x C x ... tensor: not tiled yet")
    shape = rw.shape(x)
    lay = _layout_of(rw, x, shape)
    flops = rw.unit_flops.get(n.name, 0.0)
    stats = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay, part="stats")
        stats.append(
            rw.emit(
                K.tile_bn_stats,
                (rw.rows_of(x, lay.dim, a0, b0, n, t),),
                n,
                tile=t,
                flops=flops / 2 * (b0 - a0) / shape[lay.dim],
            )
        )
    comb = rw.emit(
        K.tile_bn_combine,
        (stats, rw.full(rm), rw.full(rv), momentum, eps, fx_value(x).dtype),
        n,
        tile=rw.tile_of(n, lay.count - 1, lay, part="stats"),
        flops=10 * shape[1] * lay.count,
    )
    mean, invstd = rw.item(comb, 0), rw.item(comb, 1)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
        tiles.append(
            rw.emit(
                K.tile_bn_apply,
                (rw.rows_of(x, lay.dim, a0, b0, n, t), mean, invstd, rw.full(w), rw.full(b)),
                n,
                tile=t,
                flops=flops / 2 * (b0 - a0) / shape[lay.dim],
            )
        )
    return TupleVal(
        {0: Tiled(lay, tiles, shape, fx_value(x).dtype), 1: mean, 2: invstd, 3: rw.item(comb, 2), 4: rw.item(comb, 3)}
    )


def batch_norm_backward(rw, n):
    go, x, w, _rm, _rv, save_mean, save_invstd, train, _eps, mask = n.args
    shape = rw.shape(x)
    if not train or save_mean is None or len(shape) < 3:
        raise TilingError("BatchNorm backward not in training mode: not tiled yet")
    lay = _layout_of(rw, go, shape)
    flops = rw.unit_flops.get(n.name, 0.0)
    count = math.prod(shape) // shape[1]
    mean, invstd = rw.full(save_mean), rw.full(save_invstd)
    parts, gos, xs = [], [], []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay, part="partial")
        gos.append(rw.rows_of(go, lay.dim, a0, b0, n, t))
        xs.append(rw.rows_of(x, lay.dim, a0, b0, n, t))
        parts.append(
            rw.emit(
                K.tile_bn_grad_partial, (gos[-1], xs[-1], mean), n, tile=t, flops=flops / 2 * (b0 - a0) / shape[lay.dim]
            )
        )
    comb = rw.emit(
        K.tile_bn_grad_combine,
        (parts, invstd, fx_value(x).dtype),
        n,
        tile=rw.tile_of(n, lay.count - 1, lay, part="partial"),
        flops=4 * shape[1] * lay.count,
    )
    items = {1: rw.item(comb, 0), 2: rw.item(comb, 1)}
    if mask[0]:
        sums = rw.item(comb, 2)
        tiles = []
        for i in range(lay.count):
            a0, b0 = lay.rows(i)
            tiles.append(
                rw.emit(
                    K.tile_bn_grad_input,
                    (gos[i], xs[i], mean, invstd, rw.full(w), sums, count),
                    n,
                    tile=rw.tile_of(n, i, lay),
                    flops=flops / 2 * (b0 - a0) / shape[lay.dim],
                )
            )
        items[0] = Tiled(lay, tiles, shape, fx_value(x).dtype)
    return TupleVal(items)


# ------------------------------------------------------------------ pooling
def _pool_args(args, defaults):
    args = list(args) + [None] * (len(defaults) - len(args))
    return [a if a is not None and a != [] else d for a, d in zip(args, defaults)]


def max_pool(rw, n):
    x, kernel, stride, padding, dilation, _ceil = _pool_args(n.args, [None, None, None, [0, 0], [1, 1], False])
    stride = stride or kernel
    kernel, stride, padding, dilation = (
        list(v) * 2 if len(v) == 1 else list(v) for v in (kernel, stride, padding, dilation)
    )
    out = fx_value(n)[0]
    shape = rw.shape(x)
    k, s, p, dl = kernel[0], stride[0], padding[0], dilation[0]
    if out.shape[2] != (shape[2] + 2 * p - dl * (k - 1) - 1) // s + 1:
        raise TilingError("max pooling with ceil_mode rounding up: not tiled yet")
    lay = rw.layout_for(tuple(out.shape))
    outs, idxs = [], []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        lo, hi = window_rows(a0, b0, k, s, p, dl)
        node = rw.emit(
            K.tile_max_pool,
            (
                rw.pieces(x, 2, lo, hi),
                max(0, -lo),
                max(0, hi - shape[2]),
                lo,
                shape[3],
                kernel,
                stride,
                padding,
                dilation,
            ),
            n,
            tile=rw.tile_of(n, i, lay, halo=max(0, (hi - lo) - (b0 - a0) * s) // 2),
            flops=rw.share(n, a0, b0, out.shape[2]),
        )
        outs.append(rw.item(node, 0))
        idxs.append(rw.item(node, 1))
    return TupleVal(
        {0: Tiled(lay, outs, tuple(out.shape), out.dtype), 1: Tiled(lay, idxs, tuple(out.shape), torch.int64)}
    )


def max_pool_backward(rw, n):
    go, x, kernel, stride, padding, dilation, _ceil, idx = n.args
    stride = stride or kernel
    kernel, stride, padding, dilation = (
        list(v) * 2 if len(v) == 1 else list(v) for v in (kernel, stride, padding, dilation)
    )
    shape, gos = rw.shape(x), rw.shape(go)
    k, s, p, dl = kernel[0], stride[0], padding[0], dilation[0]
    lay = rw.layout_for(shape)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        o0, o1 = reaching_rows(a0, b0, k, s, p, dl, gos[2])
        tiles.append(
            rw.emit(
                K.tile_max_pool_grad,
                (rw.pieces(go, 2, o0, o1), rw.pieces(idx, 2, o0, o1), a0, b0, list(shape)),
                n,
                tile=rw.tile_of(n, i, lay),
                flops=rw.share(n, a0, b0, shape[2]),
            )
        )
    return Tiled(lay, tiles, shape, fx_value(n).dtype)


def avg_pool(rw, n):
    x, kernel, stride, padding, ceil, cip, divisor = _pool_args(n.args, [None, None, None, [0, 0], False, True, None])
    stride = stride or kernel
    kernel, stride, padding = (list(v) * 2 if len(v) == 1 else list(v) for v in (kernel, stride, padding))
    out = fx_value(n)
    shape = rw.shape(x)
    k, s, p = kernel[0], stride[0], padding[0]
    if ceil or (p and not cip):
        raise TilingError("average pooling with ceil_mode, or padding not counted: not tiled yet")
    lay = rw.layout_for(tuple(out.shape))
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        lo, hi = window_rows(a0, b0, k, s, p, 1)
        tiles.append(
            rw.emit(
                K.tile_avg_pool,
                (rw.pieces(x, 2, lo, hi), max(0, -lo), max(0, hi - shape[2]), kernel, stride, padding, cip, divisor),
                n,
                tile=rw.tile_of(n, i, lay, halo=max(0, (hi - lo) - (b0 - a0) * s) // 2),
                flops=rw.share(n, a0, b0, out.shape[2]),
            )
        )
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


def avg_pool_backward(rw, n):
    go, x, kernel, stride, padding, ceil, cip, divisor = n.args
    stride = stride or kernel
    kernel, stride, padding = (list(v) * 2 if len(v) == 1 else list(v) for v in (kernel, stride, padding))
    shape, gos = rw.shape(x), rw.shape(go)
    k, s, p = kernel[0], stride[0], padding[0]
    if ceil or (p and not cip):
        raise TilingError("average pooling with ceil_mode, or padding not counted: not tiled yet")
    lay = rw.layout_for(shape)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        o0, o1 = reaching_rows(a0, b0, k, s, p, 1, gos[2])
        rs, re = window_rows(o0, o1, k, s, p, 1) if o1 > o0 else (a0, a0)
        tiles.append(
            rw.emit(
                K.tile_avg_pool_grad,
                (
                    rw.pieces(go, 2, o0, o1),
                    rs,
                    re - rs,
                    a0,
                    b0,
                    list(shape),
                    kernel,
                    stride,
                    padding,
                    cip,
                    divisor,
                    fx_value(n).dtype,
                ),
                n,
                tile=rw.tile_of(n, i, lay),
                flops=rw.share(n, a0, a0 + max(b0 - a0, re - rs), shape[2]),
            )
        )
    return Tiled(lay, tiles, shape, fx_value(n).dtype, fx_value(n))


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
    parts = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        parts.append(
            rw.emit(
                K.tile_sum_partial,
                (v.tiles[i], dims, keepdim, out.dtype),
                n,
                tile=rw.tile_of(n, i, lay, part="partial"),
                flops=rw.share(n, a0, b0, shape[lay.dim]),
            )
        )
    return rw.emit(
        K.tile_sum_combine,
        (parts, scale, out.dtype),
        n,
        tile=rw.tile_of(n, lay.count - 1, lay, part="partial"),
        flops=out.numel() * lay.count,
    )


def pointwise_reduce(rw, n, v, dims, keepdim):
    lay = v.layout
    newdim = lay.dim if keepdim else lay.dim - sum(1 for d in dims if d < lay.dim)
    out = fx_value(n)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        args = [v.tiles[i]] + list(n.args[1:])
        tiles.append(
            rw.emit(
                n.target,
                args,
                n,
                tile=rw.tile_of(n, i, lay),
                kwargs=dict(n.kwargs),
                flops=rw.share(n, a0, b0, v.shape[lay.dim]),
            )
        )
    return Tiled(Layout(newdim, lay.bounds, lay.axis), tiles, tuple(out.shape), out.dtype, out)


def cat(rw, n):
    tensors = n.args[0]
    out = fx_value(n)
    dim = norm_dim(n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0), out.dim())
    lay = rw.layout_for(tuple(out.shape))
    if dim == lay.dim:
        raise TilingError("concatenation along the tiled axis: not tiled yet")
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
        tiles.append(
            rw.emit(
                aten.cat.default, ([rw.rows_of(x, lay.dim, a0, b0, n, t) for x in tensors], dim), n, tile=t, flops=0.0
            )
        )
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


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
            if torch.Tag.nondeterministic_seeded not in op.tags and not op._schema.is_mutable:
                out[op] = pointwise
    return out


RULES = {
    **_pointwise_targets(),
    aten.convolution.default: convolution,
    aten.convolution_backward.default: convolution_backward,
    aten._native_batch_norm_legit_functional.default: batch_norm,
    aten.native_batch_norm_backward.default: batch_norm_backward,
    aten.max_pool2d_with_indices.default: max_pool,
    aten.max_pool2d_with_indices_backward.default: max_pool_backward,
    aten.avg_pool2d.default: avg_pool,
    aten.avg_pool2d_backward.default: avg_pool_backward,
    aten.mean.dim: reduction,
    aten.sum.dim_IntList: reduction,
    aten.sum.default: reduction,
    aten.cat.default: cat,
}
