"""Tiling rules for token ops: linear layers, attention's matmuls, softmax, LayerNorm, embedding, the loss.

Tokens are the leading axis of 2-D/3-D activations: positions of one sequence
(then attention is tiled by queries, reading the whole keys and values) or
whole sequences of a batch.  A contraction over the tiled axis (a weight
gradient, attention's key/value gradients) is accumulated tile by tile.  See
:mod:`poet.execute.tiled_rules` for the rule interface.
"""

from __future__ import annotations

import torch

from . import tiled_ops as K
from .tiled_rules import fx_value, norm_dim, tiled_layout
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
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
        args = [
            rw.rows_of(a, lay.dim, a0, b0, n, t)
            if isinstance(a, torch.fx.Node) and len(rw.shape(a)) == nd and rw.shape(a)[lay.dim] == shape[lay.dim]
            else rw.full(a)
            for a in n.args
        ]
        nodes.append(rw.emit(n.target, args, n, tile=t, flops=rw.share(n, a0, b0, shape[lay.dim])))
    if isinstance(out, (tuple, list)):
        return _split_outputs(rw, n, nodes, lay, out)
    return Tiled(lay, nodes, tuple(out.shape), out.dtype, out)


def layer_norm_backward(rw, n):
    go, x, normalized_shape, mean, rstd, w, b, mask = n.args
    shape = rw.shape(x)
    nd = len(shape)
    if len(normalized_shape) != 1:
        raise TilingError("LayerNorm over more than the last axis: not tiled yet")
    lay = tiled_layout(rw, n, shape, [nd - 1])
    items = {}
    gis, acc_w, acc_b = [], None, None
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
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
            acc_w = rw.item(acc, 0) if mask[1] else None
            acc_b = rw.item(acc, 1) if mask[2] else None
    if mask[0]:
        items[0] = Tiled(lay, gis, shape, fx_value(x).dtype)
    if mask[1]:
        items[1] = acc_w
    if mask[2]:
        items[2] = acc_b
    return TupleVal(items)


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
        lay = va.layout  # contraction over the tiled axis
        acc = None
        for i in range(lay.count):
            a0, b0 = lay.rows(i)
            t = rw.tile_of(n, i, lay, part="partial")
            acc = rw.emit(
                K.tile_mm_accumulate,
                (acc, va.tiles[i], rw.rows_of(b, row, a0, b0, n, t)),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, va.shape[row + 1]),
            )
        return acc
    if isinstance(va, Tiled) and va.layout.dim not in (row, 0):
        return None
    lay = va.layout if isinstance(va, Tiled) else rw.layout_for(tuple(out.shape), dim=row)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
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
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


def embedding(rw, n):
    w, ids = n.args[:2]
    out = fx_value(n)
    lay = tiled_layout(rw, n, tuple(out.shape))
    if lay.dim >= len(rw.shape(ids)):
        return None
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
        tiles.append(
            rw.emit(
                n.target,
                (rw.full(w), rw.rows_of(ids, lay.dim, a0, b0, n, t)) + tuple(n.args[2:]),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, out.shape[lay.dim]),
            )
        )
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


def embedding_backward(rw, n):
    g, ids = n.args[:2]
    v = rw.env.get(g)
    if not isinstance(v, Tiled) or v.layout.dim >= len(rw.shape(ids)):
        return None
    lay, acc = v.layout, None
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay, part="partial")
        acc = rw.emit(
            K.tile_embedding_grad_accumulate,
            (acc, v.tiles[i], rw.rows_of(ids, lay.dim, a0, b0, n, t)) + tuple(n.args[2:]),
            n,
            tile=t,
            flops=rw.share(n, a0, b0, v.shape[lay.dim]),
        )
    return acc


def nll_loss(rw, n):
    logp, target, weight, reduction, ignore = n.args
    v = rw.env.get(logp)
    if not isinstance(v, Tiled) or v.layout.dim != 0 or reduction not in (1, 2):
        return None
    lay, parts = v.layout, []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay, part="partial")
        parts.append(
            rw.emit(
                K.tile_nll_partial,
                (v.tiles[i], rw.rows_of(target, 0, a0, b0, n, t), rw.full(weight), ignore),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, v.shape[0]),
            )
        )
    comb = rw.emit(
        K.tile_nll_combine,
        (parts, reduction, fx_value(n)[0].dtype),
        n,
        tile=rw.tile_of(n, lay.count - 1, lay, part="partial"),
        flops=2 * lay.count,
    )
    return TupleVal({0: rw.item(comb, 0), 1: rw.item(comb, 1)})


def nll_loss_backward(rw, n):
    tangent, logp, target, weight, reduction, ignore, total_weight = n.args
    shape = rw.shape(logp)
    lay = tiled_layout(rw, n, shape, [len(shape) - 1])
    if lay is None or lay.dim != 0:
        return None
    out = fx_value(n)
    tiles = []
    for i in range(lay.count):
        a0, b0 = lay.rows(i)
        t = rw.tile_of(n, i, lay)
        tiles.append(
            rw.emit(
                n.target,
                (
                    rw.full(tangent),
                    rw.rows_of(logp, 0, a0, b0, n, t),
                    rw.rows_of(target, 0, a0, b0, n, t),
                    rw.full(weight),
                    reduction,
                    ignore,
                    rw.full(total_weight),
                ),
                n,
                tile=t,
                flops=rw.share(n, a0, b0, shape[0]),
            )
        )
    return Tiled(lay, tiles, tuple(out.shape), out.dtype, out)


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
