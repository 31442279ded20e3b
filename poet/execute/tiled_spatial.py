"""Tiling rules for spatial ops: convolutions, BatchNorm in training, max and average pooling, split by rows.

Rows are the height of N x C x H x W tensors.  Geometry of a convolution or
pooling window: output rows ``[a, b)`` read input rows
``[a*s - p, (b-1)*s - p + d*(k-1) + 1)``, the part outside the tensor being
padding (zeros, or -inf for max pooling).  See :mod:`poet.execute.tiled_emit`
for the rule interface.
"""

from __future__ import annotations

import math

import torch

from ..graph.windows import reach_span, window_span
from . import tiled_ops as K
from .tiled_emit import (
    each_tile,
    fx_value,
    gradient_tuple,
    last_tile,
    layout_of,
    pair_items,
    partials,
    tiled_output,
)
from .tiled_values import Tiled, TilingError, TupleVal

aten = torch.ops.aten


def reaching_rows(a: int, b: int, k: int, s: int, p: int, d: int, n_out: int) -> tuple[int, int]:
    """Output rows whose windows reach input rows ``[a, b)``, clipped to the ``n_out`` rows of the
    output tensor (an empty range at ``lo`` when none)."""
    first, stop = reach_span(a, b, k, s, p, d)
    lo = max(0, first)
    return lo, max(lo, min(n_out, stop))


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
        lo, hi = window_span(a0, b0, k, s, p, dl)
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
    return tiled_output(n, lay, tiles)


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
            rs, re = window_span(o0, o1, k, s, p, dl) if o1 > o0 else (a0, a0)
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
    acc_w = acc_b = None
    if mask[1] or mask[2]:
        wlay = layout_of(rw, go, gos)
        if wlay.dim != 2:  # the chain walks output rows; a gradient tiled otherwise is read by rows
            wlay = rw.layout_for(gos)
        for _, o0, o1, t in each_tile(rw, n, wlay, part="partial"):
            lo, hi = window_span(o0, o1, k, s, p, dl)
            node = rw.emit(
                K.tile_conv_weight_grad,
                (acc_w, acc_b, rw.rows_of(go, 2, o0, o1, n, t), rw.pieces(x, 2, lo, hi), max(0, -lo))
                + (max(0, hi - H), rw.full(w), bias_sizes, stride, padding, dilation, groups)
                + (bool(mask[1]), bool(mask[2])),
                n,
                tile=t,
                flops=flops / parts * (o1 - o0) / Ho,
            )
            acc_w, acc_b = pair_items(rw, node, mask[1], mask[2])
    return gradient_tuple(items, mask, acc_w, acc_b)


# ------------------------------------------------------------------ BatchNorm (training)
def _bn_layout(rw, a, shape):
    """Tiles of a BatchNorm input: its own unless they split the channels (statistics are per channel)."""
    lay = layout_of(rw, a, shape)
    return rw.layout_for(shape) if lay.dim == 1 else lay


def batch_norm(rw, n):
    x, w, b, rm, rv, training, momentum, eps = n.args
    if not training or len(rw.shape(x)) < 3:
        raise TilingError("BatchNorm not in training mode or not on an N x C x ... tensor: not tiled yet")
    shape = rw.shape(x)
    lay = _bn_layout(rw, x, shape)
    flops = rw.unit_flops.get(n.name, 0.0)

    def half(lo, hi):
        return flops / 2 * (hi - lo) / shape[lay.dim]

    stats = [
        rw.emit(K.tile_bn_stats, (rw.rows_of(x, lay.dim, lo, hi, n, t),), n, tile=t, flops=half(lo, hi))
        for _, lo, hi, t in each_tile(rw, n, lay, part="stats")
    ]
    comb = rw.emit(
        K.tile_bn_combine,
        (stats, rw.full(rm), rw.full(rv), momentum, eps, fx_value(x).dtype),
        n,
        tile=last_tile(rw, n, lay, part="stats"),
        flops=10 * shape[1] * lay.count,
    )
    mean, invstd = rw.item(comb, 0), rw.item(comb, 1)
    tiles = [
        rw.emit(
            K.tile_bn_apply,
            (rw.rows_of(x, lay.dim, lo, hi, n, t), mean, invstd, rw.full(w), rw.full(b)),
            n,
            tile=t,
            flops=half(lo, hi),
        )
        for _, lo, hi, t in each_tile(rw, n, lay)
    ]
    return TupleVal(
        {0: Tiled(lay, tiles, shape, fx_value(x).dtype), 1: mean, 2: invstd, 3: rw.item(comb, 2), 4: rw.item(comb, 3)}
    )


def batch_norm_backward(rw, n):
    go, x, w, _rm, _rv, save_mean, save_invstd, train, _eps, mask = n.args
    shape = rw.shape(x)
    if not train or save_mean is None or len(shape) < 3:
        raise TilingError("BatchNorm backward not in training mode: not tiled yet")
    lay = _bn_layout(rw, go, shape)
    flops = rw.unit_flops.get(n.name, 0.0)
    count = math.prod(shape) // shape[1]
    mean, invstd = rw.full(save_mean), rw.full(save_invstd)

    def half(lo, hi):
        return flops / 2 * (hi - lo) / shape[lay.dim]

    gos, xs = [], []

    def partial_args(i, lo, hi, t):
        gos.append(rw.rows_of(go, lay.dim, lo, hi, n, t))
        xs.append(rw.rows_of(x, lay.dim, lo, hi, n, t))
        return gos[-1], xs[-1], mean

    parts = partials(rw, n, lay, K.tile_bn_grad_partial, partial_args, half)
    comb = rw.emit(
        K.tile_bn_grad_combine,
        (parts, invstd, fx_value(x).dtype),
        n,
        tile=last_tile(rw, n, lay),
        flops=4 * shape[1] * lay.count,
    )
    items = {1: rw.item(comb, 0), 2: rw.item(comb, 1)}
    if mask[0]:
        sums = rw.item(comb, 2)
        tiles = [
            rw.emit(
                K.tile_bn_grad_input,
                (gos[i], xs[i], mean, invstd, rw.full(w), sums, count),
                n,
                tile=t,
                flops=half(lo, hi),
            )
            for i, lo, hi, t in each_tile(rw, n, lay)
        ]
        items[0] = Tiled(lay, tiles, shape, fx_value(x).dtype)
    return TupleVal(items)


# ------------------------------------------------------------------ pooling
def _pool_args(args, defaults):
    args = list(args) + [None] * (len(defaults) - len(args))
    return [a if a is not None and a != [] else d for a, d in zip(args, defaults)]


def _pairs(*vals):
    return (list(v) * 2 if len(v) == 1 else list(v) for v in vals)


def max_pool(rw, n):
    x, kernel, stride, padding, dilation, _ceil = _pool_args(n.args, [None, None, None, [0, 0], [1, 1], False])
    kernel, stride, padding, dilation = _pairs(kernel, stride or kernel, padding, dilation)
    out = fx_value(n)[0]
    shape = rw.shape(x)
    k, s, p, dl = kernel[0], stride[0], padding[0], dilation[0]
    if out.shape[2] != (shape[2] + 2 * p - dl * (k - 1) - 1) // s + 1:
        raise TilingError("max pooling with ceil_mode rounding up: not tiled yet")
    lay = rw.layout_for(tuple(out.shape))
    outs, idxs = [], []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        lo, hi = window_span(a0, b0, k, s, p, dl)
        node = rw.emit(
            K.tile_max_pool,
            (rw.pieces(x, 2, lo, hi), max(0, -lo), max(0, hi - shape[2]), lo, shape[3])
            + (kernel, stride, padding, dilation),
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
    kernel, stride, padding, dilation = _pairs(kernel, stride or kernel, padding, dilation)
    shape, gos = rw.shape(x), rw.shape(go)
    k, s, p, dl = kernel[0], stride[0], padding[0], dilation[0]
    lay = rw.layout_for(shape)
    tiles = []
    for _, a0, b0, t in each_tile(rw, n, lay):
        o0, o1 = reaching_rows(a0, b0, k, s, p, dl, gos[2])
        tiles.append(
            rw.emit(
                K.tile_max_pool_grad,
                (rw.pieces(go, 2, o0, o1), rw.pieces(idx, 2, o0, o1), a0, b0, list(shape)),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, shape[2]),
            )
        )
    return Tiled(lay, tiles, shape, fx_value(n).dtype)


def avg_pool(rw, n):
    x, kernel, stride, padding, ceil, cip, divisor = _pool_args(n.args, [None, None, None, [0, 0], False, True, None])
    kernel, stride, padding = _pairs(kernel, stride or kernel, padding)
    out = fx_value(n)
    shape = rw.shape(x)
    k, s, p = kernel[0], stride[0], padding[0]
    if ceil or (p and not cip):
        raise TilingError("average pooling with ceil_mode, or padding not counted: not tiled yet")
    lay = rw.layout_for(tuple(out.shape))
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        lo, hi = window_span(a0, b0, k, s, p, 1)
        tiles.append(
            rw.emit(
                K.tile_avg_pool,
                (rw.pieces(x, 2, lo, hi), max(0, -lo), max(0, hi - shape[2]), kernel, stride, padding, cip, divisor),
                n,
                tile=rw.tile_of(n, i, lay, halo=max(0, (hi - lo) - (b0 - a0) * s) // 2),
                flops=rw.share(n, a0, b0, out.shape[2]),
            )
        )
    return tiled_output(n, lay, tiles)


def avg_pool_backward(rw, n):
    go, x, kernel, stride, padding, ceil, cip, divisor = n.args
    kernel, stride, padding = _pairs(kernel, stride or kernel, padding)
    shape, gos = rw.shape(x), rw.shape(go)
    k, s, p = kernel[0], stride[0], padding[0]
    if ceil or (p and not cip):
        raise TilingError("average pooling with ceil_mode, or padding not counted: not tiled yet")
    lay = rw.layout_for(shape)
    tiles = []
    for _, a0, b0, t in each_tile(rw, n, lay):
        o0, o1 = reaching_rows(a0, b0, k, s, p, 1, gos[2])
        rs, re = window_span(o0, o1, k, s, p, 1) if o1 > o0 else (a0, a0)
        tiles.append(
            rw.emit(
                K.tile_avg_pool_grad,
                (rw.pieces(go, 2, o0, o1), rs, re - rs, a0, b0, list(shape), kernel, stride, padding, cip, divisor)
                + (fx_value(n).dtype,),
                n,
                tile=t,
                flops=rw.share(n, a0, a0 + max(b0 - a0, re - rs), shape[2]),
            )
        )
    return Tiled(lay, tiles, shape, fx_value(n).dtype, fx_value(n))


RULES = {
    aten.convolution.default: convolution,
    aten.convolution_backward.default: convolution_backward,
    aten._native_batch_norm_legit_functional.default: batch_norm,
    aten.native_batch_norm_backward.default: batch_norm_backward,
    aten.max_pool2d_with_indices.default: max_pool,
    aten.max_pool2d_with_indices_backward.default: max_pool_backward,
    aten.avg_pool2d.default: avg_pool,
    aten.avg_pool2d_backward.default: avg_pool_backward,
}
