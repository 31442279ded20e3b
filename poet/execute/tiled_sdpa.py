"""Tiling rules for fused attention: ``scaled_dot_product_attention`` as the CPU flash kernel traces it.

``F.scaled_dot_product_attention`` (what ``transformers`` models call) is traced into one
``_scaled_dot_product_flash_attention_for_cpu`` op and its backward, on ``(B, heads, T, d)``
tensors.  Every query row's output, log-sum-exp and ``dq`` depend on that row alone (and all
keys and values), and ``dk``/``dv`` are sums over query rows, so:

* batch or head tiles (the queries arrive tiled along dim 0 or 1): each tile is the same op
  on its slices of queries, keys, values and mask;
* query tiles (dim 2): each tile is the op on its query rows against the whole keys and values,
  with its rows of the mask, or, for ``is_causal``, the causal pattern shifted to its rows as an
  explicit mask; backward computes each tile's ``dq`` and accumulates ``dk``/``dv`` over the
  query tiles (a chain, priced: the block's backward is run twice, once for ``dq`` and once for
  the accumulation).

Dropout on the probabilities (``dropout_p > 0``) is refused: its mask must be drawn as in eager
mode.  Outputs are laid out in the traced values' dim order (the kernel's own follows its
query), so the traced program's views apply to them.
"""

from __future__ import annotations

import torch

from . import tiled_ops as K
from .tiled_emit import each_tile, fx_value, pair_items
from .tiled_values import Layout, Tiled, TilingError, TupleVal

aten = torch.ops.aten

FORWARD = aten._scaled_dot_product_flash_attention_for_cpu.default
BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def dim_order(val):
    """The dims of traced value ``val`` from outermost to innermost in memory (None: contiguous)."""
    if not isinstance(val, torch.Tensor) or val.is_contiguous():
        return None
    return sorted(range(val.dim()), key=lambda d: (-val.stride(d), d))


def _layout(rw, n, q):
    """Tiles of the queries: the layout ``q`` arrives with (batch, heads or queries), else query tiles."""
    v = rw.env.get(q)
    shape = rw.shape(q)
    if isinstance(v, Tiled) and v.layout.dim in (0, 1, 2):
        return v.layout
    lay = rw.layout_for(shape)
    return Layout(2, lay.bounds, "tokens") if lay.dim == 2 else rw.layout_for(shape, dim=2)


def _mask_rows(rw, n, mask, dim: int, a0: int, b0: int, q_shape, t):
    """The part of an additive mask a tile reads: its rows along ``dim`` if the mask has them, else whole."""
    if mask is None:
        return None
    ms = rw.shape(mask)
    k = dim - (len(q_shape) - len(ms))  # broadcasting aligns trailing dims
    if k >= 0 and ms[k] == q_shape[dim]:
        return rw.rows_of(mask, k, a0, b0, n, t)
    return rw.full(mask, "an attention mask broadcast over the tiles")


def _options(n, first_scalar: int):
    dropout = n.args[first_scalar] if len(n.args) > first_scalar else n.kwargs.get("dropout_p", 0.0)
    causal = n.args[first_scalar + 1] if len(n.args) > first_scalar + 1 else n.kwargs.get("is_causal", False)
    if dropout:
        raise TilingError("attention with dropout on the probabilities: not tiled (its mask is drawn in eager order)")
    return bool(causal), n.kwargs.get("attn_mask"), n.kwargs.get("scale")


def sdpa(rw, n):
    q, k, v = n.args[:3]
    causal, mask, scale = _options(n, 3)
    shape = rw.shape(q)
    if len(shape) != 4:
        raise TilingError("attention on tensors that are not (batch, heads, tokens, d): not tiled yet")
    lay = _layout(rw, n, q)
    out_val, lse_val = fx_value(n)
    orders = (dim_order(out_val), dim_order(lse_val))
    outs, lses = [], []
    for _, a0, b0, t in each_tile(rw, n, lay):
        d = lay.dim
        q_i = rw.rows_of(q, d, a0, b0, n, t)
        if d == 2:
            k_i, v_i, start = rw.full(k, "keys of query tiles"), rw.full(v, "values of query tiles"), a0
        else:
            k_i, v_i, start = rw.rows_of(k, d, a0, b0, n, t), rw.rows_of(v, d, a0, b0, n, t), None
        m_i = _mask_rows(rw, n, mask, d, a0, b0, shape, t)
        node = rw.emit(
            K.tile_sdpa,
            (q_i, k_i, v_i, m_i, causal, start if causal else None, scale, *orders),
            n,
            tile=t,
            flops=rw.share(n, a0, b0, shape[d]),
        )
        outs.append(rw.item(node, 0))
        lses.append(rw.item(node, 1))
    return TupleVal(
        {
            0: Tiled(lay, outs, tuple(out_val.shape), out_val.dtype, out_val),
            1: Tiled(lay, lses, tuple(lse_val.shape), lse_val.dtype, lse_val),
        }
    )


def sdpa_backward(rw, n):
    go, q, k, v, out, lse = n.args[:6]
    causal, mask, scale = _options(n, 6)
    shape = rw.shape(q)
    if len(shape) != 4:
        raise TilingError("attention on tensors that are not (batch, heads, tokens, d): not tiled yet")
    lay = _layout(rw, n, q)
    vals = fx_value(n)
    orders = tuple(dim_order(x) for x in vals)
    d = lay.dim
    dqs, dks, dvs = [], [], []
    acc_k = acc_v = None
    for i, a0, b0, t in each_tile(rw, n, lay):
        rows = [rw.rows_of(x, d, a0, b0, n, t) for x in (go, q)]
        o_i, l_i = rw.rows_of(out, d, a0, b0, n, t), rw.rows_of(lse, d, a0, b0, n, t)
        m_i = _mask_rows(rw, n, mask, d, a0, b0, shape, t)
        share = rw.share(n, a0, b0, shape[d])
        if d != 2:
            kv = [rw.rows_of(x, d, a0, b0, n, t) for x in (k, v)]
            args = (*rows, *kv, o_i, l_i, m_i, causal, None, scale, orders)
            node = rw.emit(K.tile_sdpa_backward, args, n, tile=t, flops=share)
            dqs.append(rw.item(node, 0))
            dks.append(rw.item(node, 1))
            dvs.append(rw.item(node, 2))
            continue
        kv = [rw.full(k, "keys of query tiles"), rw.full(v, "values of query tiles")]
        start = a0 if causal else None
        dqs.append(
            rw.emit(
                K.tile_sdpa_grad_query,
                (*rows, *kv, o_i, l_i, m_i, causal, start, scale, orders[0]),
                n,
                tile=t,
                flops=share,
            )
        )
        acc = rw.emit(
            K.tile_sdpa_grad_kv,
            (acc_k, acc_v, *rows, *kv, o_i, l_i, m_i, causal, start, scale, orders[1:]),
            n,
            tile=rw.tile_of(n, i, lay, part="partial"),
            flops=share,
        )
        acc_k, acc_v = pair_items(rw, acc, True, True)
    items = {0: Tiled(lay, dqs, tuple(vals[0].shape), vals[0].dtype, vals[0])}
    if d != 2:
        items[1] = Tiled(lay, dks, tuple(vals[1].shape), vals[1].dtype, vals[1])
        items[2] = Tiled(lay, dvs, tuple(vals[2].shape), vals[2].dtype, vals[2])
    else:
        items[1], items[2] = acc_k, acc_v
    return TupleVal(items)


RULES = {FORWARD: sdpa, BACKWARD: sdpa_backward}
