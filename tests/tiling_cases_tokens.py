"""Harness cases for the token ops (softmax, LayerNorm, matmuls, embedding, the loss) and attention.

See :mod:`tiling_harness` for what a case is.  Token tensors are (tokens, features) or
(batch, tokens, features): a batch of one sequence is tiled by tokens, several by sequences.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from tiling_harness import Case, values

from poet.execute.tiled_sdpa import BACKWARD as SDPA_BACKWARD
from poet.execute.tiled_sdpa import FORWARD as SDPA

aten = torch.ops.aten


def _tokens(draw, *, features=(2, 6)):
    if draw(st.booleans()):
        return (draw(st.integers(3, 10)), draw(st.integers(*features)))
    return (draw(st.integers(1, 3)), draw(st.integers(3, 8)), draw(st.integers(*features)))


def softmax_case(op):
    def build(draw):
        shape = _tokens(draw)
        x = values(draw, shape)
        d = draw(st.sampled_from([-1, len(shape) - 1]))
        return Case(op, lambda x: op(x, d, False), (x,), (draw(st.booleans()),))

    return build


def softmax_backward_case(op, forward):
    def build(draw):
        shape = _tokens(draw)
        go, x = values(draw, shape), values(draw, shape)

        def fn(go, x):
            return op(go, forward(x, -1, False), -1, torch.float32)

        return Case(op, fn, (go, x), (True, draw(st.booleans())))

    return build


def _ln_inputs(draw):
    shape = _tokens(draw)
    x = values(draw, shape, shifted=True)
    affine = draw(st.booleans())
    wb = (values(draw, shape[-1:]), values(draw, shape[-1:])) if affine else ()
    return x, wb, [shape[-1]], draw(st.sampled_from([1e-5, 1e-3]))


def layer_norm_case(draw):
    x, wb, ns, eps = _ln_inputs(draw)

    def fn(x, w=None, b=None):
        return aten.native_layer_norm.default(x, ns, w, b, eps)

    return Case(aten.native_layer_norm.default, fn, (x, *wb), (draw(st.booleans()),) + (False,) * len(wb))


def layer_norm_backward_case(draw):
    x, wb, ns, eps = _ln_inputs(draw)
    go = values(draw, tuple(x.shape))
    masks = [[True, True, True], [True, False, False], [False, True, True]]
    mask = draw(st.sampled_from(masks)) if wb else [True, False, False]

    _, mean, rstd = aten.native_layer_norm.default(x, ns, *(wb or (None, None)), eps)

    def fn(go, x, mean, rstd, w=None, b=None):  # the saved statistics are inputs, as in the joint graph
        out = aten.native_layer_norm_backward.default(go, x, ns, mean, rstd, w, b, mask)
        return tuple(t for t in out if t is not None)

    tiled = (True, draw(st.booleans()), False, False) + (False,) * len(wb)
    return Case(aten.native_layer_norm_backward.default, fn, (go, x, mean, rstd, *wb), tiled)


def matmul_case(op):
    """Output rows from row tiles of the left operand, or (``contract``) a sum over tiles of the contracted axis."""

    def build(draw):
        t, k, n = draw(st.integers(3, 10)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
        contract = draw(st.booleans())
        if op is aten.bmm.default:
            b = draw(st.integers(1, 3))
            a, m = (
                (values(draw, (b, t, k)), values(draw, (b, t, n)))
                if contract
                else (values(draw, (b, t, k)), values(draw, (b, k, n)))
            )

            def fn(a, m):
                return op(aten.transpose.int(a, 1, 2), m) if contract else op(a, m)

            return Case(op, fn, (a, m), (True, contract))
        a = values(draw, (t, k))
        m = values(draw, (t, n)) if contract else values(draw, (k, n))
        if op is aten.addmm.default:
            bias = values(draw, (n,))

            def fn(a, m, bias):
                return op(bias, aten.t.default(a), m) if contract else op(bias, a, m)

            why = "addmm contracting over the tiled axis (a joint graph's weight gradients are mm)" if contract else ""
            return Case(op, fn, (a, m, bias), (True, contract, False), may_decline=why)

        def fn(a, m):
            return op(aten.t.default(a), m) if contract else op(a, m)

        return Case(op, fn, (a, m), (True, contract))

    return build


def embedding_case(draw):
    shape = _tokens(draw)[:-1]
    n, d = draw(st.integers(2, 9)), draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    idx = torch.randint(0, n, shape, generator=g)
    pad = draw(st.sampled_from([-1, 0]))

    def fn(w, idx):
        return aten.embedding.default(w, idx, pad)

    return Case(aten.embedding.default, fn, (values(draw, (n, d)), idx), (False, True), exact=True)


def embedding_backward_case(draw):
    shape = _tokens(draw)[:-1]
    n, d = draw(st.integers(2, 9)), draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    idx = torch.randint(0, n, shape, generator=g)
    pad, freq = draw(st.sampled_from([-1, 0])), draw(st.booleans())

    def fn(go, idx):
        return aten.embedding_dense_backward.default(go, idx, n, pad, freq)

    why = "embedding gradient scaled by word frequency" if freq else ""
    ins = (values(draw, shape + (d,)), idx)
    return Case(aten.embedding_dense_backward.default, fn, ins, (True, draw(st.booleans())), may_decline=why)


def _nll_inputs(draw):
    t, c = draw(st.integers(3, 10)), draw(st.integers(2, 6))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    target = torch.randint(0, c, (t,), generator=g)
    target[0] = draw(st.sampled_from([-100, int(target[0])]))  # an ignored position, sometimes
    logp = torch.log_softmax(values(draw, (t, c)), -1)
    weighted = draw(st.booleans())
    return logp, target, (values(draw, (c,), positive=True),) if weighted else (), draw(st.sampled_from([1, 2]))


def nll_loss_case(draw):
    logp, target, w, red = _nll_inputs(draw)

    def fn(logp, target, w=None):
        return aten.nll_loss_forward.default(logp, target, w, red, -100)

    return Case(aten.nll_loss_forward.default, fn, (logp, target, *w), (True, False) + (False,) * len(w))


def nll_loss_backward_case(draw):
    logp, target, w, red = _nll_inputs(draw)

    def fn(go, logp, target, w=None):
        _, total = aten.nll_loss_forward.default(logp, target, w, red, -100)
        return aten.nll_loss_backward.default(go, logp, target, w, red, -100, total)

    ins = (torch.tensor(draw(st.sampled_from([1.0, 0.5]))), logp, target, *w)
    return Case(aten.nll_loss_backward.default, fn, ins, (False, True, False) + (False,) * len(w))


# ------------------------------------------------------------------ fused attention
def _sdpa_inputs(draw):
    """q, k, v as (B, heads, T, d), reached either as query tiles or (from a (B, T, 3 * heads * d)
    projection through the traced view and transpose) as batch tiles; a causal flag or an additive mask."""
    b, h, t, d = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(3, 9)), draw(st.integers(1, 4))
    causal = draw(st.booleans())
    mask = None
    if not causal and draw(st.booleans()):
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        keep = torch.rand(b if draw(st.booleans()) else 1, 1, t if draw(st.booleans()) else 1, t, generator=g) < 0.8
        keep[..., 0] = True  # every query sees a key (a padding mask never hides them all)
        mask = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    fused = draw(st.booleans())  # from one projection, as transformers' GPT-2 does
    if fused:
        x = values(draw, (b, t, 3 * h * d), inner=True)

        def qkv(x):
            return [
                aten.transpose.int(
                    aten.view.default(aten.slice.Tensor(x, 2, i * h * d, (i + 1) * h * d), [b, t, h, d]), 1, 2
                )
                for i in range(3)
            ]

        return (x,), qkv, causal, mask
    ins = tuple(values(draw, (b, h, t, d), inner=True) for _ in range(3))
    return ins, list, causal, mask


def sdpa_case(draw):
    ins, qkv, causal, mask = _sdpa_inputs(draw)
    extra = (mask,) if mask is not None else ()

    def fn(*xs):
        q, k, v = qkv(xs[: len(ins)] if qkv is list else xs[0])
        m = xs[len(ins)] if extra else None
        return SDPA(q, k, v, 0.0, causal, attn_mask=m)

    return Case(SDPA, fn, ins + extra, (True,) * len(ins) + (False,) * len(extra))


def sdpa_backward_case(draw):
    ins, qkv, causal, mask = _sdpa_inputs(draw)
    q0 = qkv(ins if qkv is list else ins[0])
    go = values(draw, tuple(q0[0].shape), inner=True)
    extra = (mask,) if mask is not None else ()

    def fn(go, *xs):
        q, k, v = qkv(xs[: len(ins)] if qkv is list else xs[0])
        m = xs[len(ins)] if extra else None
        o, lse = SDPA(q, k, v, 0.0, causal, attn_mask=m)
        return SDPA_BACKWARD(go, q, k, v, o, lse, 0.0, causal, attn_mask=m)

    return Case(SDPA_BACKWARD, fn, (go,) + ins + extra, (True,) + (True,) * len(ins) + (False,) * len(extra))


TOKEN_CASES = {
    aten._softmax.default: softmax_case(aten._softmax.default),
    aten._log_softmax.default: softmax_case(aten._log_softmax.default),
    aten._softmax_backward_data.default: softmax_backward_case(
        aten._softmax_backward_data.default, aten._softmax.default
    ),
    aten._log_softmax_backward_data.default: softmax_backward_case(
        aten._log_softmax_backward_data.default, aten._log_softmax.default
    ),
    aten.native_layer_norm.default: layer_norm_case,
    aten.native_layer_norm_backward.default: layer_norm_backward_case,
    aten.mm.default: matmul_case(aten.mm.default),
    aten.bmm.default: matmul_case(aten.bmm.default),
    aten.addmm.default: matmul_case(aten.addmm.default),
    aten.embedding.default: embedding_case,
    aten.embedding_dense_backward.default: embedding_backward_case,
    aten.nll_loss_forward.default: nll_loss_case,
    aten.nll_loss_backward.default: nll_loss_backward_case,
    SDPA: sdpa_case,
    SDPA_BACKWARD: sdpa_backward_case,
}
