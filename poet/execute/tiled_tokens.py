"""Tiling rules for token ops: linear layers, attention's matmuls, softmax, LayerNorm, embedding, the loss.

Tokens are the leading axis of 2-D/3-D activations: positions of one sequence
(then attention is tiled by queries, reading the whole keys and values) or
whole sequences of a batch.  A contraction over the tiled axis (a weight
gradient, attention's key/value gradients) is accumulated tile by tile.
Attention whose keys and values can be streamed is rewritten whole by
:mod:`poet.execute.tiled_attention` before these rules see its ops.  See
:mod:`poet.execute.tiled_emit` for what rules share.
"""

from __future__ import annotations

import torch

from . import tiled_ops as K
from .tiled_emit import (
    chain,
    each_tile,
    fx_value,
    gradient_tuple,
    last_tile,
    norm_dim,
    pair_items,
    partials,
    tiled_layout,
    tiled_output,
)
from .tiled_values import Tiled, TilingError, TupleVal

aten = torch.ops.aten


def _split_outputs(rw, n, nodes, lay, out):
    """Per-tile nodes of a tuple op -> a TupleVal of tiled outputs."""
    items = {}
    for j, o in enumerate(out):
        if isinstance(o, torch.Tensor):
            items[j] = Tiled(lay, [rw.item(t, j) for t in nodes], tuple(o.shape), o.dtype)
    return TupleVal(items)


def rowwise(rw, n):
    """Ops that reduce only along other axes (softmax, log-softmax and their backward, LayerNorm)."""
    x = n.args[0]
    shape = rw.shape(x)
    nd = len(shape)
    if n.target is aten.native_layer_norm.default:
        reduced = list(range(nd - len(n.args[1]), nd))
    else:
        reduced = [norm_dim(n.args[1] if "backward" not in str(n.target) else n.args[2], nd)]
    lay = tiled_layout(rw, n, shape, reduced)
    if lay is None:
        return None
    out = fx_value(n)
    nodes = []
    for _, a0, b0, t in each_tile(rw, n, lay):
        args = [
            rw.rows_of(a, lay.dim, a0, b0, n, t)
            if isinstance(a, torch.fx.Node) and len(rw.shape(a)) == nd and rw.shape(a)[lay.dim] == shape[lay.dim]
            else rw.full(a)
            for a in n.args
        ]
        nodes.append(rw.emit(n.target, args, n, tile=t, flops=rw.share(n, a0, b0, shape[lay.dim])))
    if isinstance(out, (tuple, list)):
        return _split_outputs(rw, n, nodes, lay, out)
    return tiled_output(n, lay, nodes)


def layer_norm_backward(rw, n):
    go, x, normalized_shape, mean, rstd, w, b, mask = n.args
    shape = rw.shape(x)
    nd = len(shape)
    if len(normalized_shape) != 1:
        raise TilingError("LayerNorm over more than the last axis: not tiled yet")
    lay = tiled_layout(rw, n, shape, [nd - 1])
    items = {}
    gis, acc_w, acc_b = [], None, None
    for i, a0, b0, t in each_tile(rw, n, lay):
        g_i, x_i = rw.rows_of(go, lay.dim, a0, b0, n, t), rw.rows_of(x, lay.dim, a0, b0, n, t)
        m_i, r_i = rw.rows_of(mean, lay.dim, a0, b0, n, t), rw.rows_of(rstd, lay.dim, a0, b0, n, t)
        share = rw.share(n, a0, b0, shape[lay.dim]) / 2
        if mask[0]:
            node = rw.emit(
                aten.native_layer_norm_backward.default,
                (g_i, x_i, normalized_shape, m_i, r_i, rw.full(w), rw.full(b), [True, False, False]),
                n,
                tile=t,
                flops=share,
            )
            gis.append(rw.item(node, 0))
        if mask[1] or mask[2]:
            acc = rw.emit(
                K.tile_layer_norm_param_grad,
                (acc_w, acc_b, g_i, x_i, m_i, r_i, bool(mask[1]), bool(mask[2])),
                n,
                tile=rw.tile_of(n, i, lay, part="partial"),
                flops=share,
            )
            acc_w, acc_b = pair_items(rw, acc, mask[1], mask[2])
    if mask[0]:
        items[0] = Tiled(lay, gis, shape, fx_value(x).dtype)
    return gradient_tuple(items, mask, acc_w, acc_b)


def matmul(rw, n):
    """mm / bmm / addmm: output rows from row tiles of the left operand; a contraction over the
    tiled axis (a weight gradient, attention's value gradient) accumulated tile by tile."""
    if n.target is aten.addmm.default:
        bias, a, b = n.args[:3]
    else:
        bias, (a, b) = None, n.args[:2]
    row = 0 if n.target is not aten.bmm.default else 1
    va = rw.env.get(a)
    out = fx_value(n)
    if isinstance(va, Tiled) and va.layout.dim == row + 1 and bias is None:
        return chain(  # a contraction over the tiled axis
            rw,
            n,
            va.layout,
            K.tile_mm_accumulate,
            lambda i, lo, hi, t: (va.tiles[i], rw.rows_of(b, row, lo, hi, n, t)),
            lambda lo, hi: rw.share(n, lo, hi, va.shape[row + 1]),
        )
    if isinstance(va, Tiled) and va.layout.dim not in (row, 0):
        return None
    lay = va.layout if isinstance(va, Tiled) else rw.layout_for(tuple(out.shape), dim=row)
    tiles = []
    for _, a0, b0, t in each_tile(rw, n, lay):
        a_i = rw.rows_of(a, lay.dim, a0, b0, n, t)
        b_i = rw.rows_of(b, 0, a0, b0, n, t) if lay.dim == 0 and row == 1 else rw.full(b, "the whole right operand")
        args = (rw.full(bias), a_i, b_i) if bias is not None else (a_i, b_i)
        tiles.append(
            rw.emit(
                n.target,
                args + tuple(n.args[len(args) :]),
                n,
                tile=t,
                kwargs=dict(n.kwargs),
                flops=rw.share(n, a0, b0, out.shape[lay.dim]),
            )
        )
    return tiled_output(n, lay, tiles)


def embedding(rw, n):
    w, ids = n.args[:2]
    out = fx_value(n)
    lay = tiled_layout(rw, n, tuple(out.shape))
    if lay.dim >= len(rw.shape(ids)):
        return None
    tiles = [
        rw.emit(
            n.target,
            (rw.full(w), rw.rows_of(ids, lay.dim, a0, b0, n, t)) + tuple(n.args[2:]),
            n,
            tile=t,
            flops=rw.share(n, a0, b0, out.shape[lay.dim]),
        )
        for _, a0, b0, t in each_tile(rw, n, lay)
    ]
    return tiled_output(n, lay, tiles)


def embedding_backward(rw, n):
    g, ids = n.args[:2]
    if len(n.args) > 4 and n.args[4]:
        raise TilingError("embedding gradient scaled by word frequency: the counts are over the whole batch")
    v = rw.env.get(g)
    if not isinstance(v, Tiled) or v.layout.dim >= len(rw.shape(ids)):
        return None
    return chain(
        rw,
        n,
        v.layout,
        K.tile_embedding_grad_accumulate,
        lambda i, lo, hi, t: (v.tiles[i], rw.rows_of(ids, v.layout.dim, lo, hi, n, t)) + tuple(n.args[2:]),
        lambda lo, hi: rw.share(n, lo, hi, v.shape[v.layout.dim]),
    )


def nll_loss(rw, n):
    logp, target, weight, reduction, ignore = n.args
    v = rw.env.get(logp)
    if not isinstance(v, Tiled) or v.layout.dim != 0 or reduction not in (1, 2):
        return None
    lay = v.layout
    parts = partials(
        rw,
        n,
        lay,
        K.tile_nll_partial,
        lambda i, lo, hi, t: (v.tiles[i], rw.rows_of(target, 0, lo, hi, n, t), rw.full(weight), ignore),
        lambda lo, hi: rw.share(n, lo, hi, v.shape[0]),
    )
    comb = rw.emit(
        K.tile_nll_combine,
        (parts, reduction, fx_value(n)[0].dtype),
        n,
        tile=last_tile(rw, n, lay),
        flops=2 * lay.count,
    )
    return TupleVal({0: rw.item(comb, 0), 1: rw.item(comb, 1)})


def nll_loss_backward(rw, n):
    tangent, logp, target, weight, reduction, ignore, total_weight = n.args
    shape = rw.shape(logp)
    lay = tiled_layout(rw, n, shape, [len(shape) - 1])
    if lay is None or lay.dim != 0:
        return None
    tiles = [
        rw.emit(
            n.target,
            (rw.full(tangent), rw.rows_of(logp, 0, a0, b0, n, t), rw.rows_of(target, 0, a0, b0, n, t))
            + (rw.full(weight), reduction, ignore, rw.full(total_weight)),
            n,
            tile=t,
            flops=rw.share(n, a0, b0, shape[0]),
        )
        for _, a0, b0, t in each_tile(rw, n, lay)
    ]
    return tiled_output(n, lay, tiles)


RULES = {
    aten._softmax.default: rowwise,
    aten._log_softmax.default: rowwise,
    aten._softmax_backward_data.default: rowwise,
    aten._log_softmax_backward_data.default: rowwise,
    aten.native_layer_norm.default: rowwise,
    aten.native_layer_norm_backward.default: layer_norm_backward,
    aten.mm.default: matmul,
    aten.bmm.default: matmul,
    aten.addmm.default: matmul,
    aten.embedding.default: embedding,
    aten.embedding_dense_backward.default: embedding_backward,
    aten.nll_loss_forward.default: nll_loss,
    aten.nll_loss_backward.default: nll_loss_backward,
}
