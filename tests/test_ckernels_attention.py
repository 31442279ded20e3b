"""The attention C kernels against a float64 reference (and torch): the CPU flash-attention op that
F.scaled_dot_product_attention traces to (forward and backward; causal, an additive mask, a given
scale, more keys than queries, strided layouts), and the streamed attention tiles, one by one against
the Python tiles and as a whole chain against the untiled reference.

Scores are float dot products and probabilities come from pk_expf, so the bound is 4u (E + S) of
each tensor's largest element (u = 2^-24, E the head size, S the keys); measured on a 64-query causal
case: 3.3u, torch's own kernel 2.1u."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.cbackend.ops_attention import tile_scalars  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten


def reference(q, k, v, mask=None, causal=False, scale=None):
    """Attention in float64 with autograd: (out, lse) and the leaves."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s + mask.double()
    if causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1), (q, k, v)


def bound(ref, e, s):
    return 4 * U32 * (e + s) * ref.abs().max().item()


def permuted(x):
    """x's values stored as [B, L, H, E] (the layout a view of a projection gives), viewed as [B, H, L, E]."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


CASES = [
    dict(shape=(2, 3, 5, 4, 5), causal=False, mask=False, scale=None),
    dict(shape=(1, 2, 7, 8, 7), causal=True, mask=False, scale=None),
    dict(shape=(2, 2, 4, 6, 9), causal=True, mask=False, scale=0.3),  # more keys than queries
    dict(shape=(1, 2, 6, 4, 6), causal=False, mask=True, scale=None),
    dict(shape=(1, 1, 16, 16, 16), causal=True, mask=False, scale=None),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_sdpa_forward_and_backward(case, layout):
    b, h, lq, e, s = case["shape"]
    q0, k0, v0 = randn(b, h, lq, e, seed=1), randn(b, h, s, e, seed=2), randn(b, h, s, e, seed=3)
    mask = None
    if case["mask"]:
        mask = randn(lq, s, seed=4)
        mask[2, :3] = float("-inf")  # some keys hidden from a row, as a padding mask does
    out64, lse64, leaves = reference(q0, k0, v0, mask, case["causal"], case["scale"])
    view = permuted if layout == "permuted" else (lambda x: x)
    q, k, v = view(q0), view(k0), view(v0)
    out, lse = view(torch.full((b, h, lq, e), float("nan"))), torch.full((b, h, lq), float("nan"))
    scalars = [int(case["causal"]), int(case["scale"] is not None), float(case["scale"] or 0.0)]
    hostlib.call("sdpa", [q, k, v, mask], [out, lse], scalars)
    assert_within(out, out64, bound(out64, e, s), "out")
    assert_within(lse, lse64, bound(lse64, e, s), "lse")
    kw = {"attn_mask": mask} if mask is not None else {}
    if case["scale"] is not None:
        kw["scale"] = case["scale"]
    t_out, t_lse = aten._scaled_dot_product_flash_attention_for_cpu(q0, k0, v0, 0.0, case["causal"], **kw)
    assert_within(t_out, out64, bound(out64, e, s), "torch's own out")
    assert_within(out, t_out, 2 * bound(out64, e, s), "vs torch")

    dout0 = randn(b, h, lq, e, seed=5)
    out64.backward(dout0.double())
    grads = [torch.full(t.shape, float("nan")) for t in (q0, k0, v0)]
    grads = [view(g) for g in grads]
    hostlib.call("sdpa_backward", [view(dout0), q, k, v, out, lse, mask], grads, scalars)
    for name, got, leaf in zip("qkv", grads, leaves):
        assert_within(got, leaf.grad, bound(leaf.grad, e, s), f"grad {name}")


def test_sdpa_a_fully_masked_row_gives_zeros_as_aten():
    q, k, v = randn(1, 1, 3, 4, seed=6), randn(1, 1, 3, 4, seed=7), randn(1, 1, 3, 4, seed=8)
    mask = torch.zeros(3, 3)
    mask[1] = float("-inf")
    out, lse = torch.empty(1, 1, 3, 4), torch.empty(1, 1, 3)
    hostlib.call("sdpa", [q, k, v, mask], [out, lse], [0, 0, 0.0])
    t_out, t_lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)[:2]
    assert torch.equal(out[0, 0, 1], t_out[0, 0, 1]) and lse[0, 0, 1] == t_lse[0, 0, 1] == 0.0
    grads = [torch.empty(1, 1, 3, 4) for _ in range(3)]
    hostlib.call("sdpa_backward", [torch.ones(1, 1, 3, 4), q, k, v, out, lse, mask], grads, [0, 0, 0.0])
    assert torch.equal(grads[0][0, 0, 1], torch.zeros(4))  # the hidden row's query gets no gradient


def test_sdpa_refuses_mismatched_heads_and_a_bool_mask():
    q, k = randn(1, 2, 3, 4), randn(1, 1, 3, 4)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("sdpa", [q, k, k, None], [torch.empty(1, 2, 3, 4), torch.empty(1, 2, 3)], [0, 0, 0.0])
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        mask = torch.ones(3, 3, dtype=torch.bool)
        hostlib.call("sdpa", [q, q, q, mask], [torch.empty(1, 2, 3, 4), torch.empty(1, 2, 3)], [0, 0, 0.0])


# ------------------------------------------------------------------ streamed tiles
SCALES = [(("mul", 0.5),), (("div", 2.0), ("mul", 0.9))]


def step(o, m, l, q, kt, v, scale, causal, q0, k0, last):
    """The C attention step with the Python tile's signature."""
    g, rows, ev = q.shape[0], q.shape[1], v.shape[2]
    outs = [torch.full((g, rows, ev), float("nan")), torch.full((g, rows, 1), float("nan"))]
    if not last:
        outs.append(torch.full((g, rows, 1), float("nan")))
    hostlib.call("attention_step", [o, m, l, q, kt, v], outs, [*tile_scalars(scale, causal, q0, k0), int(last)])
    return tuple(outs)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("causal", [None, 0])
def test_tile_attention_step_matches_the_python_tile(scale, causal):
    q, kt, v = randn(3, 4, 8, seed=9), randn(3, 8, 5, seed=10), randn(3, 5, 6, seed=11)
    q0, k0 = 4, 2  # query rows 4..7, keys 2..6: some blocks partly masked
    first = tiled_ops.tile_attention_step(None, None, None, q, kt, v, scale, causal, q0, k0, False)
    got = step(None, None, None, q, kt, v, scale, causal, q0, k0, False)
    for name, a, b in zip(("o", "m", "l"), got, first):
        assert_within(a, b, bound(b, 8, 5), f"first step {name}")
    kt2, v2 = randn(3, 8, 4, seed=12), randn(3, 4, 6, seed=13)
    want = tiled_ops.tile_attention_step(*first, q, kt2, v2, scale, causal, q0, k0 + 5, True)
    got = step(*first, q, kt2, v2, scale, causal, q0, k0 + 5, True)
    for name, a, b in zip(("out", "lse"), got, want):
        assert_within(a, b, bound(b, 8, 9), f"last step {name}")


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("causal", [None, 0])
def test_tile_attention_backward_tiles_match_the_python_tiles(scale, causal):
    q, kt, v, do = randn(2, 4, 8, seed=14), randn(2, 8, 5, seed=15), randn(2, 5, 6, seed=16), randn(2, 4, 6, seed=17)
    o, lse = tiled_ops.tile_attention_step(None, None, None, q, kt, v, scale, causal, 3, 0, True)
    stats = torch.empty(2, 4, 2)
    hostlib.call("attention_grad_stats", [do, o, lse], [stats])
    want_stats = tiled_ops.tile_attention_grad_stats(do, o, lse)
    assert torch.equal(stats[..., 0], want_stats[..., 0])
    assert_within(stats, want_stats, 2 * U32 * want_stats.abs(), "stats")
    acc_kt, acc_v = randn(2, 8, 5, seed=18), randn(2, 5, 6, seed=19)
    for accs in ((None, None), (acc_kt, acc_v)):
        want = tiled_ops.tile_attention_grad_kv(*accs, q, kt, v, do, stats, scale, causal, 3, 0)
        got = (torch.full((2, 8, 5), float("nan")), torch.full((2, 5, 6), float("nan")))
        hostlib.call("attention_grad_kv", [*accs, q, kt, v, do, stats], list(got), tile_scalars(scale, causal, 3, 0))
        for name, a, b in zip(("dK^T", "dV"), got, want):
            assert_within(a, b, bound(b, 8, 5), f"{name} (accumulated: {accs[0] is not None})")
    for acc in (None, randn(2, 4, 8, seed=20)):
        want = tiled_ops.tile_attention_grad_q(acc, q, kt, v, do, stats, scale, causal, 3, 0)
        got = torch.full((2, 4, 8), float("nan"))
        hostlib.call("attention_grad_q", [acc, q, kt, v, do, stats], [got], tile_scalars(scale, causal, 3, 0))
        assert_within(got, want, bound(want, 8, 5), f"dQ (accumulated: {acc is not None})")


def test_tiled_chain_equals_untiled_causal_attention():
    """Two query tiles x three key tiles, causal, run as the streamed schedule runs them, against float64."""
    g, n, e = 2, 12, 4
    q, k, v, do = (randn(g, n, e, seed=s) for s in (21, 22, 23, 24))
    kt = k.transpose(1, 2).contiguous()
    scale, qb, kb = (("mul", 0.5),), [(0, 6), (6, 12)], [(0, 4), (4, 8), (8, 12)]
    outs, lses = [], []
    for a0, a1 in qb:
        state = (None, None, None)
        blocks = [(b0, b1) for b0, b1 in kb if b0 - (a1 - 1) <= 0]
        for i, (b0, b1) in enumerate(blocks):
            state = step(*state, q[:, a0:a1], kt[:, :, b0:b1], v[:, b0:b1], scale, 0, a0, b0, i == len(blocks) - 1)
        outs.append(state[0])
        lses.append(state[1])
    out = torch.cat(outs, 1)
    out64, _, leaves = reference(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), causal=True, scale=0.5)
    assert_within(out, out64.squeeze(1), bound(out64, e, n), "context")
    out64.backward(do.unsqueeze(1).double())
    stats = []
    for (a0, a1), o, lse in zip(qb, outs, lses):
        st = torch.empty(g, a1 - a0, 2)
        hostlib.call("attention_grad_stats", [do[:, a0:a1], o, lse], [st])
        stats.append(st)
    dq = torch.zeros(g, n, e)
    dkt, dv = torch.zeros(g, e, n), torch.zeros(g, n, e)
    for (a0, a1), st in zip(qb, stats):
        for b0, b1 in kb:
            if b0 - (a1 - 1) > 0:
                continue
            args = [q[:, a0:a1], kt[:, :, b0:b1], v[:, b0:b1], do[:, a0:a1], st]
            sc = tile_scalars(scale, 0, a0, b0)
            new_q = torch.empty(g, a1 - a0, e)
            hostlib.call("attention_grad_q", [dq[:, a0:a1].clone(), *args], [new_q], sc)
            dq[:, a0:a1] = new_q
            new_kt, new_v = torch.empty(g, e, b1 - b0), torch.empty(g, b1 - b0, e)
            hostlib.call(
                "attention_grad_kv", [dkt[:, :, b0:b1].clone(), dv[:, b0:b1].clone(), *args], [new_kt, new_v], sc
            )
            dkt[:, :, b0:b1], dv[:, b0:b1] = new_kt, new_v
    for name, got, leaf in (("q", dq, leaves[0]), ("k", dkt.transpose(1, 2), leaves[1]), ("v", dv, leaves[2])):
        assert_within(got, leaf.grad.squeeze(1), bound(leaf.grad, e, n), f"grad {name}")


def test_zeros_like_pair():
    a, b = randn(2, 3), randn(4)
    za, zb = torch.full((2, 3), float("nan")), torch.full((4,), float("nan"))
    hostlib.call("zeros_like", [a, b], [za, zb], [2])
    want = tiled_ops.tile_zeros_like_pair(a, b)
    assert torch.equal(za, want[0]) and torch.equal(zb, want[1])
