"""Tiled attention: per head and query tile, key/value tiles streamed with an online softmax.

The zoo writes attention as three layers: ``scores = Q K^T`` (heads x S x S),
``softmax`` and ``context = P V``.  Tiled, the S x S scores never exist:
for every head ``h`` and query tile ``a`` a chain of nodes walks the key
tiles ``b`` (query and key tiles are counted separately: the scores layer's
count is the query tiles, the softmax layer's the key tiles), each reading ``Q[a, h]``, ``K[b, h]``,
``V[b, h]`` and the running
``(O, rowmax, rowsum)`` of the previous step (FlashAttention's recurrence); the
last step of the chain is the context tile ``[a, h]``.  Q, K and V come from
their projections already split by head, so a tile reads only its head's
columns.

Backward keeps the same blocks and recomputes each block's probabilities
from Q, K and the saved row statistics instead of storing them: three chains
per head, ``dQ[a]`` over key tiles, and ``dK[b]``, ``dV[b]`` over query
tiles.  Every chain recomputes the block's scores and softmax (costed), which
is the price of never holding an S x S matrix.
"""

from __future__ import annotations

from .core import BACKWARD, FORWARD, Node, Tile
from .tiling_ranges import Builder, Piece, Pieces, overlap, split

AXIS = "heads,queries,keys"


def _tile(of: str, k: int, n: int, h: int, a: tuple[int, int], b: tuple[int, int], last: bool, per: int) -> Tile:
    """Block ``k`` of ``n``: heads ``[h*per, (h+1)*per)`` (group ``h``), queries ``a``, keys ``b``."""
    return Tile(
        of,
        k,
        n,
        AXIS,
        part="output" if last else "partial",
        start=(h * per, a[0], b[0]),
        stop=((h + 1) * per, a[1], b[1]),
    )


def head_label(g: int, per: int) -> str:
    """Name of head group ``g`` of ``per`` heads: ``h3`` for one head, ``h4:8`` for heads 4..7."""
    return f"h{g}" if per == 1 else f"h{g * per}:{(g + 1) * per}"


def attention_forward(
    bd: Builder,
    scores,
    softmax,
    context,
    q: list[Piece],
    k: list[Piece],
    v: list[Piece],
    counts: tuple[int, int],
    batch: int,
    dtype_bytes: int,
    owners: tuple[int, int],
    per: int = 1,
) -> list[Piece]:
    """Context tiles ``[a, h]`` of a tiled attention; ``counts``: (query tiles, key tiles) per head;
    ``owners``: the layers whose counts those are (for the tiling planner); ``per``: heads per tile
    (pieces of Q, K, V and the context are numbered by group of ``per`` heads)."""
    seq = scores.shape[1]
    heads = scores.heads // per
    d = per * context.shape[1] // scores.heads
    ranges, kranges = split(seq, counts[0]), split(seq, counts[1])
    n = heads * len(ranges) * len(kranges)
    total = batch * (scores.flops + softmax.flops + context.flops)
    out, idx = [], 0
    for h in range(heads):
        # what a step reads depends on its head and one of its ranges only: looked up once each
        kv_of = [overlap(k, *bk, h, h + 1) + overlap(v, *bk, h, h + 1) for bk in kranges]
        for a in ranges:
            prev = None
            q_reads = overlap(q, *a, h, h + 1)
            for j, bk in enumerate(kranges):
                kv = kv_of[j]
                reads = q_reads + kv
                if prev is not None:
                    reads.append(prev)
                rows = a[1] - a[0]
                frac = rows * (bk[1] - bk[0]) / (seq * seq * heads)
                last = j == len(kranges) - 1
                prev = bd.add(
                    Node(
                        f"{context.name}[{head_label(h, per)},q{a[0]}:{a[1]},k{bk[0]}:{bk[1]}]",
                        FORWARD,
                        dtype_bytes * batch * rows * (d + 2 * per),
                        total * frac,
                        0,
                        "attention",
                        _tile(context.name, idx, n, h, a, bk, last, per),
                    ),
                    reads,
                    owners[0],
                    dict.fromkeys(kv, owners[1]),  # key tiles set what a step reads of K and V
                )
                idx += 1
            out.append(Piece(a[0], a[1], prev, h, h + 1))
    return Pieces(sorted(out, key=lambda p: (p.lo, p.clo)))


def attention_backward(
    bd: Builder,
    scores,
    softmax,
    context,
    q: list[Piece],
    k: list[Piece],
    v: list[Piece],
    ctx: list[Piece],
    d_out: list[list[Piece]],
    counts: tuple[int, int],
    batch: int,
    dtype_bytes: int,
    owners: tuple[int, int],
    per: int = 1,
) -> tuple[list[Piece], list[Piece], list[Piece]]:
    """(dQ, dK, dV) tiles by head group, from the context's gradient tiles ``d_out``."""
    seq = scores.shape[1]
    heads = scores.heads // per
    d = per * context.shape[1] // scores.heads
    qranges, kranges = split(seq, counts[0]), split(seq, counts[1])
    n = heads * len(qranges) * len(kranges)
    recompute = batch * (scores.flops + softmax.flops)  # each chain rebuilds the block's P
    d_p = batch * context.bwd_flops / 2  # dP = dO V^T (half of context's backward)
    d_v = batch * context.bwd_flops / 2  # dV = P^T dO
    d_s = batch * softmax.bwd_flops
    d_qk = batch * scores.bwd_flops / 2  # dQ = dS K, dK = dS^T Q: half each
    work = {"dq": recompute + d_p + d_s + d_qk, "dk": recompute + d_p + d_s + d_qk, "dv": recompute + d_v}

    qside_of: dict[tuple, list[int]] = {}  # (head, query range) -> what a block reads of the query side
    kv_of: dict[tuple, list[int]] = {}  # (head, key range) -> what it reads of K and V

    def block_reads(h, a, bk):
        """(what a block reads of the query side, of K and V): each looked up once per head and range
        (the lists are shared: callers build new ones from them)"""
        r = qside_of.get((h, a))
        if r is None:
            r = overlap(q, *a, h, h + 1)
            r += overlap(ctx, *a, h, h + 1)  # O and the row statistics (logsumexp) of the forward
            r += [u for src in d_out for u in overlap(src, *a, h, h + 1)]
            qside_of[h, a] = r
        kv = kv_of.get((h, bk))
        if kv is None:
            kv = kv_of[h, bk] = overlap(k, *bk, h, h + 1) + overlap(v, *bk, h, h + 1)
        return r, kv

    result = {"dq": [], "dk": [], "dv": []}
    for which in ("dv", "dk", "dq"):
        idx = 0
        outers, inners, owner = (qranges, kranges, owners[0]) if which == "dq" else (kranges, qranges, owners[1])
        for h in range(heads):
            for outer in outers:
                prev = None
                for j, inner in enumerate(inners):
                    a, bk = (outer, inner) if which == "dq" else (inner, outer)
                    qside, kv = block_reads(h, a, bk)
                    reads = qside + kv + ([prev] if prev is not None else [])
                    # which count sets what the step reads: query tiles for the query side, key tiles for K, V
                    other = dict.fromkeys(kv, owners[1]) if which == "dq" else dict.fromkeys(qside, owners[0])
                    frac = (a[1] - a[0]) * (bk[1] - bk[0]) / (seq * seq * heads)
                    last = j == len(inners) - 1
                    name = f"bwd.{context.name}.{which}[{head_label(h, per)},q{a[0]}:{a[1]},k{bk[0]}:{bk[1]}]"
                    prev = bd.add(
                        Node(
                            name,
                            BACKWARD,
                            dtype_bytes * batch * (outer[1] - outer[0]) * d,
                            work[which] * frac,
                            0,
                            "attention",
                            _tile(f"bwd.{context.name}.{which}", idx, n, h, a, bk, last, per),
                        ),
                        reads,
                        owner,
                        other,
                    )
                    idx += 1
                result[which].append(Piece(outer[0], outer[1], prev, h, h + 1))
    return tuple(Pieces(sorted(result[w], key=lambda p: (p.lo, p.clo))) for w in ("dq", "dk", "dv"))
