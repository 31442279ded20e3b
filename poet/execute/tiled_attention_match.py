"""Finding attention in a traced training step: the aten ops around one softmax that can be streamed.

:func:`find_attention` maps every op of each attention it recognises to an
:class:`~poet.execute.tiled_attention.AttentionGroup` (the rewrite is there).
Recognised: ``S = bmm(Q, K^T)`` through views, positive scalings and an optional
``masked_fill(mask, -inf)`` whose mask is a constant causal pattern
(:func:`causal_offset`), ``softmax`` over keys whose output (and its views) only
the context ``bmm(P, V)``, ``bmm(P^T, dO)`` and ``_softmax_backward_data`` read;
backward ``dP = bmm(dO, V^T)``, the same scalings and mask, and ``dS`` read only
by ``bmm(dS, K)`` and ``bmm(Q^T, dS)``.  Anything else (another mask, dropout on
the probabilities, an intermediate read elsewhere) is not matched.
"""

from __future__ import annotations

import torch
import torch.fx

from .tiled_attention import AttentionGroup, fx_val, shape_of

aten = torch.ops.aten

VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.expand.default,
    aten.detach.default,
    aten.alias.default,
    aten.transpose.int,
}
SCALES = {aten.mul.Tensor: "mul", aten.div.Tensor: "div"}
MAX_MASK_ELEMENTS = 1 << 24


def _is_transpose_of_last_two(n) -> bool:
    if n.target is not aten.transpose.int:
        return False
    nd = len(shape_of(n))
    return sorted(d + nd if d < 0 else d for d in n.args[1:3]) == [nd - 2, nd - 1]


def _transpose_of(n, base) -> bool:
    return isinstance(n, torch.fx.Node) and _is_transpose_of_last_two(n) and n.args[0] is base


def _scale_op(n):
    """``(op, c)`` for a multiplication or division by a positive Python number, else None."""
    kind = SCALES.get(n.target)
    if kind is None or len(n.args) != 2 or isinstance(n.args[1], torch.fx.Node):
        return None
    c = n.args[1]
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not c > 0:
        return None
    return (kind, float(c))


def _constant(n, memo: dict):
    """The value of ``n`` when it depends on no input (a mask built from ``ones``/``tril``...), else None."""
    if n in memo:
        return memo[n]
    memo[n] = None
    v = fx_val(n)
    if n.op != "call_function" or not isinstance(v, torch.Tensor) or v.numel() > MAX_MASK_ELEMENTS:
        return None
    args = []
    for a in n.all_input_nodes:
        if _constant(a, memo) is None:
            return None
        args.append(a)
    try:
        out = n.target(
            *torch.fx.node.map_arg(n.args, lambda a: memo[a]), **torch.fx.node.map_arg(n.kwargs, lambda a: memo[a])
        )
    except Exception:
        return None
    memo[n] = out if isinstance(out, torch.Tensor) else None
    return memo[n]


def causal_offset(mask, sq: int, sk: int) -> int | None:
    """``c`` such that ``mask[i, j]`` is ``j - i > c`` (a causal mask, shifted), else None.

    Rows masked entirely (``c < 0``) would give NaN in eager mode too; they are not streamed.
    """
    if mask is None or mask.dtype != torch.bool or mask.dim() < 2 or tuple(mask.shape[-2:]) != (sq, sk):
        return None
    if any(s != 1 for s in mask.shape[:-2]):
        return None
    m = mask.reshape(sq, sk)
    c = int((~m[0]).sum()) - 1
    if c < 0:
        return None
    want = (torch.arange(sk).unsqueeze(0) - torch.arange(sq).unsqueeze(1)) > c
    return c if torch.equal(m, want) else None


# ---------------------------------------------------------------- matching
def _pre_chain(sm):
    """softmax's input back to the scores bmm: ([ops], scale ops, mask node) or None."""
    ops, scale, mask = [], [], None
    x = sm.args[0]
    while isinstance(x, torch.fx.Node) and x.op == "call_function":
        if len(x.users) != 1:
            return None
        ops.append(x)
        if x.target is aten.bmm.default:
            return ops, tuple(reversed(scale)), mask
        s = _scale_op(x)
        if x.target in (aten.view.default, aten._unsafe_view.default):
            pass
        elif s is not None:
            scale.append(s)
        elif x.target is aten.masked_fill.Scalar and mask is None and x.args[2] == float("-inf"):
            mask = x.args[1]
        else:
            return None
        x = x.args[0]
    return None


def _aliases_of(sm):
    """Every view of the softmax output, with whether it is transposed (P^T) or not."""
    out = {sm: False}
    stack = [sm]
    while stack:
        x = stack.pop()
        for u in x.users:
            if u.target not in VIEWS or u in out:
                continue
            if u.target is aten.transpose.int:
                if not _is_transpose_of_last_two(u):
                    return None
                out[u] = not out[x]
            elif shape_of(u)[-2:] != shape_of(x)[-2:]:
                return None
            else:
                out[u] = out[x]
            stack.append(u)
    return out


def _single_users_until(x, allowed):
    """Follow single users of ``x`` through ops ``allowed(op)`` accepts; (chain, last node)."""
    chain = []
    while len(x.users) == 1:
        u = next(iter(x.users))
        if not allowed(u):
            break
        chain.append(u)
        x = u
    return chain, x


def match_attention(sm, memo: dict) -> AttentionGroup | None:
    """The attention around softmax ``sm`` (see the module docstring), or None when it does not fit."""
    if sm.target is not aten._softmax.default or sm.args[2]:
        return None
    nd = len(shape_of(sm))
    if nd < 3 or sm.args[1] not in (-1, nd - 1):
        return None
    pre = _pre_chain(sm)
    if pre is None:
        return None
    fwd_ops, scale, mask = pre
    scores = fwd_ops[-1]
    q, kt = scores.args
    bh, sq, _ = shape_of(q)
    sk = shape_of(kt)[2]
    causal = None
    if mask is not None:
        causal = causal_offset(_constant(mask, memo), sq, sk)
        if causal is None:
            return None
    aliases = _aliases_of(sm)
    if aliases is None:
        return None
    context = grad_v = sbd = None
    for x, transposed in aliases.items():
        for u in x.users:
            if u in aliases:
                continue
            if u.target is aten.bmm.default and u.args[0] is x and not transposed and context is None:
                context = u
            elif u.target is aten.bmm.default and u.args[0] is x and transposed and grad_v is None:
                grad_v = u
            elif u.target is aten._softmax_backward_data.default and u.args[1] is x and not transposed and sbd is None:
                sbd = u
            else:
                return None
    if context is None or grad_v is None or sbd is None or sbd.args[2] not in (-1, nd - 1):
        return None
    v, do = context.args[1], grad_v.args[1]
    # dP = bmm(dO, V^T) (through views) feeds the softmax backward
    dp_ops, x = [], sbd.args[0]
    while isinstance(x, torch.fx.Node) and x.target in (aten.view.default, aten._unsafe_view.default):
        dp_ops.append(x)
        x = x.args[0]
    if not (x.target is aten.bmm.default and x.args[0] is do and _transpose_of(x.args[1], v)):
        return None
    dp_ops.append(x)
    if any(len(y.users) != 1 for y in dp_ops):
        return None

    def ds_op(u):
        if u.target in (aten.view.default, aten._unsafe_view.default) or _scale_op(u) is not None:
            return True
        return u.target is aten.masked_fill.Scalar and u.args[1] is mask and u.args[2] == 0

    ds_chain, g = _single_users_until(sbd, ds_op)
    if sorted(s for s in map(_scale_op, ds_chain) if s is not None) != sorted(scale):
        return None
    users = list(g.users)
    grad_kt = next((u for u in users if u.target is aten.bmm.default and _transpose_of(u.args[0], q)), None)
    grad_q = next((u for u in users if u.target is aten.bmm.default and _transpose_of(u.args[1], kt)), None)
    if len(users) != 2 or grad_kt is None or grad_q is None or grad_kt.args[1] is not g or grad_q.args[0] is not g:
        return None
    internal = set(fwd_ops) | {sm} | set(aliases) | set(dp_ops) | {sbd} | set(ds_chain)
    return AttentionGroup(
        scores=scores,
        q=q,
        kt=kt,
        v=v,
        do=do,
        scale=scale,
        causal=causal,
        context=context,
        grad_v=grad_v,
        grad_kt=grad_kt,
        grad_q=grad_q,
        internal=internal,
        forward_ops=list(reversed(fwd_ops)) + [sm],
        backward_ops={
            "dp": list(reversed(dp_ops)),
            "ds": [sbd] + ds_chain,
            "dv": [grad_v],
            "dk": [grad_kt],
            "dq": [grad_q],
        },
    )


def find_attention(graph: torch.fx.Graph) -> dict:
    """Original FX node -> the :class:`AttentionGroup` it belongs to, for every matched attention."""
    memo: dict = {}
    out = {}
    for n in graph.nodes:
        if n.op == "call_function" and n.target is aten._softmax.default:
            grp = match_attention(n, memo)
            if grp is not None:
                for x in grp.internal | set(grp.outputs):
                    out[x] = grp
    return out
