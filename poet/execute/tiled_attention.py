"""Streamed attention in a traced training step: query tiles, key/value tiles streamed with an online softmax.

A traced attention is a handful of aten ops around one ``_softmax``:
``S = bmm(Q, K^T)``, a positive scale and an optional ``masked_fill(mask, -inf)``,
``P = softmax(S)``, the context ``bmm(P, V)``; backward ``dV = bmm(P^T, dO)``,
``dP = bmm(dO, V^T)``, ``_softmax_backward_data``, the same mask and scale,
``dQ = bmm(dS, K)`` and ``dK^T = bmm(Q^T, dS)``.
:mod:`poet.execute.tiled_attention_match` finds that pattern (every
intermediate read only inside it) and :class:`AttentionGroup` rewrites it so
that no ``S x S`` (nor query-tile x ``S``) block is ever a value:

* forward, per query tile ``a``, a chain over key tiles ``b``: each step reads
  ``Q[a]``, ``K[b]``, ``V[b]`` and the running ``(O, rowmax, rowsum)`` and
  returns the next (FlashAttention's recurrence); the last step returns the
  context tile and the row log-sum-exp ``L[a]``;
* backward, per query tile, ``[L, rowsum(dO * O)]`` (the row statistics), then
  per key tile a chain over query tiles accumulating ``(dK^T[b], dV[b])`` and per
  query tile a chain over key tiles accumulating ``dQ[a]``; every step recomputes
  its block's probabilities from ``Q``, ``K`` and the statistics.

Key/value tiles are separate inputs of each step, so the schedule's RAM
accounting holds one key tile at a time.  A causal mask (a constant
``key - query > c``) is applied per block, and blocks it masks entirely are
skipped.  Other masks, dropout on the probabilities, or batch tiles (whole
sequences per tile, where queries need no streaming) leave the ops to the
ordinary rules of :mod:`poet.execute.tiled_tokens`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.fx

from ..graph.core import Tile
from . import tiled_ops as K
from .tiled_values import Layout, Tiled, even_bounds

aten = torch.ops.aten

STREAMED_OP = "attention: online softmax, key/value tiles streamed"
STREAMED_BACKWARD_OP = "attention backward: blocks recomputed from row statistics"


class Elided:
    """The value of an op inside a streamed attention: it never exists (nothing outside reads it)."""

    def __init__(self, name: str):
        self.name = name


def fx_val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def shape_of(n) -> tuple:
    v = fx_val(n)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


@dataclass
class AttentionGroup:
    """One matched attention: its inputs, outputs, the ops that disappear, and how it was rewritten."""

    scores: torch.fx.Node  # bmm(Q, K^T)
    q: torch.fx.Node
    kt: torch.fx.Node
    v: torch.fx.Node
    do: torch.fx.Node
    scale: tuple  # ((op, c), ...) applied to the scores, in order
    causal: int | None  # keys j of query i masked where j - i > causal; None: no mask
    context: torch.fx.Node  # bmm(P, V)
    grad_v: torch.fx.Node
    grad_kt: torch.fx.Node
    grad_q: torch.fx.Node
    internal: set  # ops whose values are never made
    forward_ops: list  # scores .. softmax: recomputed by every backward step
    backward_ops: dict  # "dp", "dv", "ds", "dk", "dq" -> ops
    state: str = "pending"  # pending | declined | streamed
    o_tiles: list = field(default_factory=list)
    lse_tiles: list = field(default_factory=list)
    qlay: Layout | None = None
    klay: Layout | None = None
    backward_done: bool = False

    @property
    def outputs(self) -> tuple:
        return (self.context, self.grad_v, self.grad_kt, self.grad_q)

    # ------------------------------------------------------------ decisions
    def decide(self, rw) -> bool:
        """Stream when queries or keys arrive tiled along the sequence, or the scores are too big to keep."""
        vq, vk = rw.env.get(self.q), rw.env.get(self.kt)
        if isinstance(vq, Tiled) and vq.layout.dim != 1 or isinstance(vk, Tiled) and vk.layout.dim != 2:
            self.state = "declined"  # batch tiles: each holds whole sequences, the ordinary rules apply
            return False
        big = max(rw.working_set.get(n.name, 0) for n in self.forward_ops + [self.context]) > rw.threshold
        if not (isinstance(vq, Tiled) or isinstance(vk, Tiled) or big):
            self.state = "declined"
            return False
        bh, sq, _ = shape_of(self.q)
        self.qlay = vq.layout if isinstance(vq, Tiled) else Layout(1, even_bounds(sq, rw.count), "tokens")
        self.state = "streamed"
        return True

    def masked_out(self, a: tuple, b: tuple) -> bool:
        """Every key of block (queries a, keys b) is masked for every query."""
        return self.causal is not None and b[0] - (a[1] - 1) > self.causal

    def _flops(self, rw, ops) -> float:
        return sum(rw.unit_flops.get(n.name, 0.0) for n in ops)

    # ------------------------------------------------------------ rewriting
    def visit(self, rw, n) -> bool:
        """Rewrite original op ``n`` of this group; False when the group is left to the ordinary rules."""
        if self.state == "pending" and not self.decide(rw):
            return False
        if self.state == "declined":
            return False
        if n is self.context:
            self._forward(rw)
        elif not self.backward_done and (n is self.grad_v or n is self.backward_ops["dp"][0]):
            self._backward(rw)  # the first op reading dO: every backward input exists now
        if n not in self.outputs:
            rw.env[n] = Elided(n.name)
        return True

    def _key_layout(self, rw) -> Layout:
        vk, vv = rw.env.get(self.kt), rw.env.get(self.v)
        sk = shape_of(self.kt)[2]
        if isinstance(vk, Tiled):
            return Layout(1, vk.layout.bounds, "tokens")
        if isinstance(vv, Tiled) and vv.layout.dim == 1:
            return Layout(1, vv.layout.bounds, "tokens")
        return Layout(1, even_bounds(sk, rw.count), "tokens")

    def _blocks(self, outer: Layout, inner: Layout, queries_outer: bool) -> list:
        """(outer index, [inner indices]) with the blocks the mask leaves something of."""
        out = []
        for i in range(outer.count):
            inner_ids = []
            for j in range(inner.count):
                a, b = (outer.rows(i), inner.rows(j)) if queries_outer else (inner.rows(j), outer.rows(i))
                if not self.masked_out(a, b):
                    inner_ids.append(j)
            out.append((i, inner_ids))
        return out

    def _inputs(self, rw, orig):
        """Views (or gathered copies) of Q, dO per query tile and K^T, V per key tile."""
        ql, kl = self.qlay, self.klay
        stub = Tile(of=orig.name, index=0, count=1, axis="tokens")
        qs = [rw.rows_of(self.q, 1, *ql.rows(i), orig, stub) for i in range(ql.count)]
        ks = [rw.rows_of(self.kt, 2, *kl.rows(j), orig, stub) for j in range(kl.count)]
        vs = [rw.rows_of(self.v, 1, *kl.rows(j), orig, stub) for j in range(kl.count)]
        return qs, ks, vs

    def _tile(self, of, k: int, n: int, a: tuple, b: tuple, last: bool) -> Tile:
        part = "output" if last else "partial"
        return Tile(of.name, k, n, "queries,keys", part=part, start=(a[0], b[0]), stop=(a[1], b[1]))

    def _forward(self, rw) -> None:
        ctx = self.context
        self.klay = self._key_layout(rw)
        ql, kl = self.qlay, self.klay
        sq, sk = shape_of(self.q)[1], shape_of(self.kt)[2]
        total = self._flops(rw, self.forward_ops + [ctx])
        qs, ks, vs = self._inputs(rw, ctx)
        blocks = self._blocks(ql, kl, True)
        n_blocks = sum(len(js) for _, js in blocks)
        k = 0
        for i, js in blocks:
            a = ql.rows(i)
            acc = (None, None, None)
            for pos, j in enumerate(js):
                b = kl.rows(j)
                last = pos == len(js) - 1
                node = rw.emit(
                    K.tile_attention_step,
                    acc + (qs[i], ks[j], vs[j], self.scale, self.causal, a[0], b[0], last),
                    ctx,
                    tile=self._tile(ctx, k, n_blocks, a, b, last),
                    flops=total * (a[1] - a[0]) * (b[1] - b[0]) / (sq * sk),
                )
                acc = tuple(rw.item(node, x) for x in range(2 if last else 3))
                k += 1
            if not js:
                raise ValueError(f"{ctx.name}: query rows {a} see no key (a fully masked row)")
            self.o_tiles.append(acc[0])
            self.lse_tiles.append(acc[1])
        out = fx_val(ctx)
        rw.env[ctx] = Tiled(Layout(1, ql.bounds, "tokens"), list(self.o_tiles), tuple(out.shape), out.dtype, out)
        rw.report.tiled[ctx.name] = (STREAMED_OP, max(ql.count, kl.count), "queries,keys")

    def _backward(self, rw) -> None:
        self.backward_done = True
        ql, kl = self.qlay, self.klay
        sq, sk = shape_of(self.q)[1], shape_of(self.kt)[2]
        ops = self.backward_ops
        recompute = self._flops(rw, self.forward_ops)
        common = recompute + self._flops(rw, ops["dp"] + ops["ds"])
        work_q = common + self._flops(rw, ops["dq"])
        work_kv = common + self._flops(rw, ops["dv"] + ops["dk"])
        qs, ks, vs = self._inputs(rw, self.grad_q)
        stub = Tile(of=self.grad_q.name, index=0, count=1, axis="tokens")
        dos = [rw.rows_of(self.do, 1, *ql.rows(i), self.grad_q, stub) for i in range(ql.count)]
        stats = []
        for i in range(ql.count):
            a = ql.rows(i)
            stats.append(
                rw.emit(
                    K.tile_attention_grad_stats,
                    (dos[i], self.o_tiles[i], self.lse_tiles[i]),
                    self.grad_q,
                    tile=Tile(self.grad_q.name, i, ql.count, "queries", part="stats", start=(a[0],), stop=(a[1],)),
                    flops=2.0 * math.prod(shape_of(self.do)) * (a[1] - a[0]) / sq,
                )
            )
        dk_tiles, dv_tiles = [], []
        blocks = self._blocks(kl, ql, False)
        n_blocks, k = sum(len(ids) for _, ids in blocks), 0
        for j, ids in blocks:
            b = kl.rows(j)
            acc = (None, None)
            for pos, i in enumerate(ids):
                a = ql.rows(i)
                node = rw.emit(
                    K.tile_attention_grad_kv,
                    acc + (qs[i], ks[j], vs[j], dos[i], stats[i], self.scale, self.causal, a[0], b[0]),
                    self.grad_v,
                    tile=self._tile(self.grad_v, k, n_blocks, a, b, pos == len(ids) - 1),
                    flops=work_kv * (a[1] - a[0]) * (b[1] - b[0]) / (sq * sk),
                )
                acc = (rw.item(node, 0), rw.item(node, 1))
                k += 1
            if not ids:  # no query sees these keys: their gradients are zero
                node = rw.emit(
                    K.tile_zeros_like_pair,
                    (ks[j], vs[j]),
                    self.grad_v,
                    tile=Tile(self.grad_v.name, 0, 1, "keys", start=(b[0],), stop=(b[1],)),
                )
                acc = (rw.item(node, 0), rw.item(node, 1))
            dk_tiles.append(acc[0])
            dv_tiles.append(acc[1])
        dq_tiles = []
        blocks = self._blocks(ql, kl, True)
        n_blocks, k = sum(len(js) for _, js in blocks), 0
        for i, js in blocks:
            a = ql.rows(i)
            acc = None
            for pos, j in enumerate(js):
                b = kl.rows(j)
                acc = rw.emit(
                    K.tile_attention_grad_q,
                    (acc, qs[i], ks[j], vs[j], dos[i], stats[i], self.scale, self.causal, a[0], b[0]),
                    self.grad_q,
                    tile=self._tile(self.grad_q, k, n_blocks, a, b, pos == len(js) - 1),
                    flops=work_q * (a[1] - a[0]) * (b[1] - b[0]) / (sq * sk),
                )
                k += 1
            dq_tiles.append(acc)
        for node, lay, dim, tiles in (
            (self.grad_q, ql, 1, dq_tiles),
            (self.grad_v, kl, 1, dv_tiles),
            (self.grad_kt, kl, 2, dk_tiles),
        ):
            out = fx_val(node)
            rw.env[node] = Tiled(Layout(dim, lay.bounds, "tokens"), tiles, tuple(out.shape), out.dtype, out)
        rw.report.tiled[self.grad_q.name] = (STREAMED_BACKWARD_OP, max(ql.count, kl.count), "queries,keys")
