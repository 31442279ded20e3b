"""Tile kernels: each computes one tile of an aten op from slices of its inputs.

The tiled joint graph (:mod:`poet.execute.tiled`) calls these functions where the
original graph called one aten op on whole tensors.  Every kernel receives the
input rows it needs as a list of pieces (views of neighbouring tiles, or of a
whole tensor) plus the rows of zero/-inf padding its halo reaches past the
tensor's border, and returns tensors with their own compact storage, so a
tile's bytes are the tile's, never a bigger buffer's.

Reductions over the tiled axis (BatchNorm statistics, weight gradients, global
pooling, the loss) are split in two: a per-tile partial and a combination of
all partials, or a chain ``acc_i = acc_{i-1} + contribution_i`` whose
accumulator is an ordinary tensor the schedule keeps, pages or frees.
Partial statistics are kept in float64; the summation order still differs from
the untiled kernels' (see docs/torch.md, "Tiling numerics").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _own(t):
    """``t`` with a storage of its own size (a crop of a bigger buffer is copied), in its own dim order.

    A dense tensor keeps its layout (a channels-last convolution's tile stays channels-last), so the
    traced program's views, checked against the traced layout, still apply to the tile.
    """
    if t is None or not isinstance(t, torch.Tensor):
        return t
    if not _dense(t) or t.untyped_storage().nbytes() > t.numel() * t.element_size():
        return t.clone(memory_format=torch.preserve_format if _dense(t) else torch.contiguous_format)
    return t


def _dense(t) -> bool:
    """Every element once, no gaps: strides a permutation of packed ones."""
    expect = 1
    for d in sorted(range(t.dim()), key=lambda d: (t.stride(d), -d)):
        if t.shape[d] != 1 and t.stride(d) != expect:
            return False
        expect *= t.shape[d]
    return True


def _rows(pieces, dim: int, top: int = 0, bottom: int = 0, value: float = 0.0):
    """The pieces joined along ``dim`` and padded with ``top``/``bottom`` rows of ``value``."""
    x = pieces[0] if len(pieces) == 1 else torch.cat(list(pieces), dim)
    if top or bottom:
        pad = [0, 0] * (x.dim() - dim - 1) + [top, bottom]
        x = F.pad(x, pad, value=value)
    return x


def _zero_rows(rows: int, like_shape, dim: int, dtype):
    shape = list(like_shape)
    shape[dim] = rows
    return torch.zeros(shape, dtype=dtype)


def _place(region, region_start: int, a: int, b: int, dim: int):
    """Rows ``[a, b)`` of a region that starts at row ``region_start`` (zeros where it has none)."""
    out = _zero_rows(b - a, region.shape, dim, region.dtype)
    lo, hi = max(a, region_start), min(b, region_start + region.shape[dim])
    if hi > lo:
        out.narrow(dim, lo - a, hi - lo).copy_(region.narrow(dim, lo - region_start, hi - lo))
    return out


# ------------------------------------------------------------------ assembling
def tile_assemble(tiles, dim: int, stride=None):
    """The whole tensor from its tiles (for a consumer that is not tiled), laid out with ``stride``.

    ``stride`` is the traced tensor's (None: contiguous).  The traced program's views of the
    whole tensor were checked against that layout, and kernels choose their outputs' layout
    from their inputs' (a CPU attention kernel's output is as transposed as its query), so a
    whole tensor rebuilt from tiles must have it again.
    """
    if stride is None:
        return _own(torch.cat(list(tiles), dim)) if len(tiles) > 1 else tiles[0].clone()
    shape = list(tiles[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tiles)
    out = torch.empty_strided(shape, tuple(stride), dtype=tiles[0].dtype)
    at = 0
    for t in tiles:
        out.narrow(dim, at, t.shape[dim]).copy_(t)
        at += t.shape[dim]
    return out


def tile_gather(pieces, dim: int):
    """Rows of a tensor that lie in several tiles, joined (for a row-wise consumer of other bounds)."""
    return _own(torch.cat(list(pieces), dim)) if len(pieces) > 1 else pieces[0].clone()


# ------------------------------------------------------------------ convolution
def tile_conv(pieces, top, bottom, weight, bias, stride, padding, dilation, groups):
    """Output rows of a convolution from the input rows under them (halo included)."""
    x = _rows(pieces, 2, top, bottom)
    pad = [0] + list(padding[1:])
    return _own(aten.convolution.default(x, weight, bias, stride, pad, dilation, False, [0] * len(pad), groups))


def tile_conv_input_grad(
    go_pieces, region_start, region_rows, a, b, in_shape, weight, stride, padding, dilation, groups
):
    """Rows ``[a, b)`` of a convolution's input gradient from the output-gradient rows over them.

    ``go_pieces`` are output rows whose windows start at input row ``region_start``
    (padding included) and cover ``region_rows`` rows; rows no window reaches get 0.
    """
    if not go_pieces:
        return torch.zeros([in_shape[0], in_shape[1], b - a] + list(in_shape[3:]), dtype=weight.dtype)
    go = _rows(go_pieces, 2)
    x = torch.zeros([in_shape[0], in_shape[1], region_rows] + list(in_shape[3:]), dtype=go.dtype)
    pad = [0] + list(padding[1:])
    gi = aten.convolution_backward.default(
        go, x, weight, None, stride, pad, dilation, False, [0] * len(pad), groups, [True, False, False]
    )[0]
    return _place(gi, region_start, a, b, 2)


def tile_conv_weight_grad(
    acc_w, acc_b, go, x_pieces, top, bottom, weight, bias_sizes, stride, padding, dilation, groups, want_w, want_b
):
    """Weight (and bias) gradient accumulated over one more tile of output rows: ``(acc_w, acc_b)``."""
    x = _rows(x_pieces, 2, top, bottom)
    pad = [0] + list(padding[1:])
    _, gw, gb = aten.convolution_backward.default(
        go,
        x,
        weight,
        bias_sizes if want_b else None,
        stride,
        pad,
        dilation,
        False,
        [0] * len(pad),
        groups,
        [False, bool(want_w), bool(want_b)],
    )
    if want_w and acc_w is not None:
        gw = acc_w + gw
    if want_b and acc_b is not None:
        gb = acc_b + gb
    return (gw if want_w else None, gb if want_b else None)


# ------------------------------------------------------------------ BatchNorm (training)
def _channel_dims(x):
    return [d for d in range(x.dim()) if d != 1]


def tile_bn_stats(x):
    """Per channel of one tile: [count, mean, sum of squared deviations] (float64, 3 x C)."""
    xd = x.double()
    dims = _channel_dims(x)
    n = x.numel() // x.shape[1]
    mean = xd.mean(dims)
    m2 = ((xd - mean.view([1, -1] + [1] * (x.dim() - 2))) ** 2).sum(dims)
    return torch.stack([torch.full_like(mean, n), mean, m2])


def tile_bn_combine(stats, running_mean, running_var, momentum, eps, dtype):
    """The batch statistics from every tile's (Chan's parallel formula) and the running-stat updates:
    ``(save_mean, save_invstd, new_running_mean, new_running_var)`` as the untiled op returns them."""
    n = stats[0][0]
    mean = stats[0][1]
    m2 = stats[0][2]
    for s in stats[1:]:
        nb, mb, m2b = s[0], s[1], s[2]
        tot = n + nb
        delta = mb - mean
        mean = mean + delta * nb / tot
        m2 = m2 + m2b + delta * delta * n * nb / tot
        n = tot
    var = m2 / n
    invstd = (var + eps).rsqrt()
    count = float(n[0])
    unbiased = var * count / max(count - 1.0, 1.0)
    new_rm = new_rv = None
    if running_mean is not None:
        new_rm = (running_mean.double() * (1 - momentum) + mean * momentum).to(running_mean.dtype)
        new_rv = (running_var.double() * (1 - momentum) + unbiased * momentum).to(running_var.dtype)
    return (mean.to(dtype), invstd.to(dtype), new_rm, new_rv)


def _per_channel(v, ndim):
    return v.view([1, -1] + [1] * (ndim - 2))


def tile_bn_apply(x, mean, invstd, weight, bias):
    """One tile normalised with the batch statistics."""
    y = (x - _per_channel(mean, x.dim())) * _per_channel(invstd, x.dim())
    if weight is not None:
        y = y * _per_channel(weight, x.dim())
    if bias is not None:
        y = y + _per_channel(bias, x.dim())
    return _own(y)


def tile_bn_grad_partial(go, x, mean):
    """Per channel of one tile: [sum(go), sum(go * (x - mean))] (float64, 2 x C)."""
    dims = _channel_dims(x)
    god = go.double()
    xmu = x.double() - _per_channel(mean.double(), x.dim())
    return torch.stack([god.sum(dims), (god * xmu).sum(dims)])


def tile_bn_grad_combine(partials, invstd, dtype):
    """``(grad_weight, grad_bias, sums)`` from every tile's partial sums."""
    s = partials[0]
    for p in partials[1:]:
        s = s + p
    return ((s[1] * invstd.double()).to(dtype), s[0].to(dtype), s)


def tile_bn_grad_input(go, x, mean, invstd, weight, sums, count):
    """One tile of BatchNorm's input gradient (training mode) from the whole-tensor sums."""
    nd = x.dim()
    inv = invstd.double()
    xmu = x.double() - _per_channel(mean.double(), nd)
    proj = _per_channel(sums[1] * inv * inv / count, nd)
    gi = (go.double() - _per_channel(sums[0] / count, nd) - xmu * proj) * _per_channel(inv, nd)
    if weight is not None:
        gi = gi * _per_channel(weight.double(), nd)
    return gi.to(go.dtype)


# ------------------------------------------------------------------ pooling
def tile_max_pool(pieces, top, bottom, start, width, kernel, stride, padding, dilation):
    """Output rows of max_pool2d_with_indices; indices are of the whole input (row-major H x W)."""
    x = _rows(pieces, 2, top, bottom, value=float("-inf"))
    out, idx = aten.max_pool2d_with_indices.default(x, kernel, stride, [0, padding[1]], dilation, False)
    return (_own(out), _own(idx + start * width))


def tile_max_pool_grad(go_pieces, idx_pieces, a, b, in_shape):
    """Rows ``[a, b)`` of max pooling's input gradient from the output rows whose windows reach them."""
    n, c, w = in_shape[0], in_shape[1], in_shape[3]
    gi = torch.zeros(n, c, (b - a) * w, dtype=go_pieces[0].dtype if go_pieces else torch.float32)
    if go_pieces:
        go = _rows(go_pieces, 2).flatten(2)
        idx = _rows(idx_pieces, 2).flatten(2)
        inside = (idx >= a * w) & (idx < b * w)
        local = torch.where(inside, idx - a * w, torch.zeros_like(idx))
        gi.scatter_add_(2, local, torch.where(inside, go, torch.zeros_like(go)))
    return gi.view(n, c, b - a, w)


def tile_avg_pool(pieces, top, bottom, kernel, stride, padding, count_include_pad, divisor):
    x = _rows(pieces, 2, top, bottom)
    return _own(aten.avg_pool2d.default(x, kernel, stride, [0, padding[1]], False, count_include_pad, divisor))


def tile_avg_pool_grad(
    go_pieces, region_start, region_rows, a, b, in_shape, kernel, stride, padding, count_include_pad, divisor, dtype
):
    if not go_pieces:
        return torch.zeros([in_shape[0], in_shape[1], b - a] + list(in_shape[3:]), dtype=dtype)
    go = _rows(go_pieces, 2)
    x = torch.zeros([in_shape[0], in_shape[1], region_rows] + list(in_shape[3:]), dtype=go.dtype)
    gi = aten.avg_pool2d_backward.default(go, x, kernel, stride, [0, padding[1]], False, count_include_pad, divisor)
    return _place(gi, region_start, a, b, 2)


# ------------------------------------------------------------------ reductions and contractions
def tile_sum_partial(x, dims, keepdim, dtype):
    """One tile's sum over ``dims`` (float64: the partials are combined later)."""
    return x.double().sum(dims, keepdim=keepdim)


def tile_sum_combine(partials, scale, dtype):
    """Sum (times ``scale``: 1 for sum, 1/count for mean) of every tile's partial."""
    s = partials[0]
    for p in partials[1:]:
        s = s + p
    return (s * scale).to(dtype)


def tile_mm_accumulate(acc, a, b):
    """``acc + a @ b`` (mm or bmm): a contraction over the tiled axis, accumulated tile by tile."""
    out = aten.mm.default(a, b) if a.dim() == 2 else aten.bmm.default(a, b)
    return out if acc is None else acc + out


def tile_embedding_grad_accumulate(acc, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    out = aten.embedding_dense_backward.default(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
    return out if acc is None else acc + out


def tile_layer_norm_param_grad(acc_w, acc_b, go, x, mean, rstd, want_w, want_b):
    """LayerNorm's weight/bias gradient accumulated over one more tile of tokens."""
    xhat = (x - mean) * rstd
    lead = list(range(x.dim() - 1)) if x.dim() > 1 else [0]
    gw = (go * xhat).sum(lead) if want_w else None
    gb = go.sum(lead) if want_b else None
    if gw is not None and acc_w is not None:
        gw = acc_w + gw
    if gb is not None and acc_b is not None:
        gb = acc_b + gb
    return (gw, gb)


def tile_nll_partial(logp, target, weight, ignore_index):
    """One tile's summed negative log-likelihood and weight: float64 [2]."""
    total, tw = aten.nll_loss_forward.default(logp, target, weight, 2, ignore_index)  # 2: reduction sum
    return torch.stack([total.double(), tw.double()])


def tile_nll_combine(partials, reduction, dtype):
    """``(loss, total_weight)`` of the whole batch, as nll_loss_forward returns them."""
    s = partials[0]
    for p in partials[1:]:
        s = s + p
    loss = s[0] / s[1] if reduction == 1 else s[0]
    return (loss.to(dtype), s[1].to(dtype))


# ------------------------------------------------------------------ attention (online softmax)
def _attention_scores(q, kt, scale, causal, q0: int, k0: int):
    """One block's scores ``Q[a] K[b]^T`` scaled as the traced ops do, causal mask applied (-inf)."""
    s = torch.bmm(q, kt)
    for op, c in scale:
        s = s * c if op == "mul" else s / c
    if causal is not None and (k0 + kt.shape[2] - 1) - q0 > causal:  # some key of the block is masked
        rows = torch.arange(q0, q0 + q.shape[1]).unsqueeze(1)
        cols = torch.arange(k0, k0 + kt.shape[2]).unsqueeze(0)
        s = s.masked_fill((cols - rows) > causal, float("-inf"))
    return s


def _finite(m):
    """Row maxima with -inf (every key so far masked) replaced by 0, so ``exp(s - m)`` stays 0, not NaN."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def tile_attention_step(o, m, l, q, kt, v, scale, causal, q0, k0, last):
    """One key tile of a query tile (online softmax): the running ``(O, rowmax, rowsum)`` updated.

    ``o``/``m``/``l`` are None at the first key tile.  The last step returns the
    normalised context tile and the rows' log-sum-exp ``L`` (what backward needs).
    """
    s = _attention_scores(q, kt, scale, causal, q0, k0)
    m_new = s.amax(-1, keepdim=True) if m is None else torch.maximum(m, s.amax(-1, keepdim=True))
    m_safe = _finite(m_new)
    p = torch.exp(s - m_safe)
    if o is None:
        l_new, o_new = p.sum(-1, keepdim=True), torch.bmm(p, v)
    else:
        alpha = torch.exp(m - m_safe)
        l_new, o_new = alpha * l + p.sum(-1, keepdim=True), alpha * o + torch.bmm(p, v)
    if last:
        return (_own(o_new / l_new), _own(m_safe + torch.log(l_new)))
    return (o_new, m_new, l_new)


def tile_attention_grad_stats(do, o, lse):
    """A query tile's row statistics for backward: ``[L, rowsum(dO * O)]`` (BH x rows x 2)."""
    d = (do.double() * o.double()).sum(-1, keepdim=True).to(o.dtype)
    return torch.cat([lse, d], -1)


def _attention_block_grads(q, kt, v, do, stats, scale, causal, q0, k0):
    """A block's probabilities (recomputed from ``L``) and the scaled score gradient ``dS``."""
    p = torch.exp(_attention_scores(q, kt, scale, causal, q0, k0) - stats[..., :1])
    ds = p * (torch.bmm(do, v.transpose(1, 2)) - stats[..., 1:])
    for op, c in scale:
        ds = ds * c if op == "mul" else ds / c
    return p, ds


def tile_attention_grad_kv(acc_kt, acc_v, q, kt, v, do, stats, scale, causal, q0, k0):
    """``(dK^T[b], dV[b])`` accumulated over one more query tile."""
    p, ds = _attention_block_grads(q, kt, v, do, stats, scale, causal, q0, k0)
    dkt, dv = torch.bmm(q.transpose(1, 2), ds), torch.bmm(p.transpose(1, 2), do)
    return (dkt if acc_kt is None else acc_kt + dkt, dv if acc_v is None else acc_v + dv)


def tile_attention_grad_q(acc, q, kt, v, do, stats, scale, causal, q0, k0):
    """``dQ[a]`` accumulated over one more key tile."""
    _, ds = _attention_block_grads(q, kt, v, do, stats, scale, causal, q0, k0)
    dq = torch.bmm(ds, kt.transpose(1, 2))
    return dq if acc is None else acc + dq


def tile_zeros_like_pair(a, b):
    """Zero gradients for a key tile no query sees."""
    return (torch.zeros_like(a, memory_format=torch.contiguous_format), torch.zeros_like(b))


# ------------------------------------------------------------------ fused attention (scaled_dot_product)
def _in_order(t, order):
    """``t`` laid out densely with dims ``order`` outermost first (the traced value's dim order)."""
    if order is None or t is None:
        return t
    inverse = [order.index(d) for d in range(len(order))]
    return t.permute(order).contiguous().permute(inverse)


def _query_tile_mask(mask, causal_start, rows: int, keys: int, dtype):
    """The additive mask of a query tile: its rows of ``mask``, or the causal pattern from query ``causal_start``."""
    if causal_start is None:
        return mask
    allowed = torch.ones(rows, keys, dtype=torch.bool).tril(diagonal=causal_start)
    return torch.zeros(rows, keys, dtype=dtype).masked_fill(~allowed, float("-inf"))


def tile_sdpa(q, k, v, mask, causal, causal_start, scale, out_order, lse_order):
    """One tile of CPU flash attention: ``(out, logsumexp)`` for these queries against ``k``/``v``.

    Batch or head tiles pass ``causal`` on; a query tile starting at row ``causal_start`` gets the
    causal pattern as an explicit mask shifted to its rows (top-left aligned, as ``is_causal``).
    """
    m = _query_tile_mask(mask, causal_start, q.shape[-2], k.shape[-2], q.dtype)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(
        q, k, v, 0.0, bool(causal) and causal_start is None, attn_mask=m, scale=scale
    )
    return (_own(_in_order(out, out_order)), _own(_in_order(lse, lse_order)))


def _sdpa_grads(go, q, k, v, out, lse, mask, causal, causal_start, scale):
    m = _query_tile_mask(mask, causal_start, q.shape[-2], k.shape[-2], q.dtype)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
        go, q, k, v, out, lse, 0.0, bool(causal) and causal_start is None, attn_mask=m, scale=scale
    )


def tile_sdpa_backward(go, q, k, v, out, lse, mask, causal, causal_start, scale, orders):
    """One batch or head tile of flash attention's backward: ``(dq, dk, dv)``."""
    g = _sdpa_grads(go, q, k, v, out, lse, mask, causal, causal_start, scale)
    return tuple(_own(_in_order(x, o)) for x, o in zip(g, orders))


def tile_sdpa_grad_query(go, q, k, v, out, lse, mask, causal, causal_start, scale, order):
    """A query tile's ``dq`` (its rows depend on its rows of ``go``, ``out`` and ``lse`` only)."""
    return _own(_in_order(_sdpa_grads(go, q, k, v, out, lse, mask, causal, causal_start, scale)[0], order))


def tile_sdpa_grad_kv(acc_k, acc_v, go, q, k, v, out, lse, mask, causal, causal_start, scale, orders):
    """``(dk, dv)`` accumulated over one more query tile (each query row adds its share)."""
    _, dk, dv = _sdpa_grads(go, q, k, v, out, lse, mask, causal, causal_start, scale)
    dk = dk if acc_k is None else acc_k + dk
    dv = dv if acc_v is None else acc_v + dv
    return (_in_order(dk, orders[0]), _in_order(dv, orders[1]))
