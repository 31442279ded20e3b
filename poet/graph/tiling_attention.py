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


def _tile(of: str, k: int, n: int, h: int, a: tuple[int, int], b: tuple[int, int], last: bool) -> Tile:
    return Tile(of, k, n, AXIS, part="output" if last else "partial", start=(h, a[0], b[0]), stop=(h + 1, a[1], b[1]))


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
) -> list[Piece]:
    """Context tiles ``[a, h]`` of a tiled attention; ``counts``: (query tiles, key tiles) per head;
    ``owners``: the layers whose counts those are (for the tiling planner)."""
    heads, seq = scores.heads, scores.shape[1]
    d = context.shape[1] // heads
    ranges, kranges = split(seq, counts[0]), split(seq, counts[1])
    n = heads * len(ranges) * len(kranges)
    total = batch * (scores.flops + softmax.flops + context.flops)
    out, idx = [], 0
    for h in range(heads):
        for a in ranges:
            prev = None
            for j, bk in enumerate(kranges):
                reads = overlap(q, *a, h, h + 1) + overlap(k, *bk, h, h + 1) + overlap(v, *bk, h, h + 1)
                if prev is not None:
                    reads.append(prev)
                rows = a[1] - a[0]
                frac = rows * (bk[1] - bk[0]) / (seq * seq * heads)
                last = j == len(kranges) - 1
                prev = bd.add(
                    Node(
                        f"{context.name}[h{h},q{a[0]}:{a[1]},k{bk[0]}:{bk[1]}]",
                        FORWARD,
                        dtype_bytes * batch * rows * (d + 2),
                        total * frac,
                        0,
                        "attention",
                        _tile(context.name, idx, n, h, a, bk, last),
                    ),
                    reads,
                    owners[0],
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
) -> tuple[list[Piece], list[Piece], list[Piece]]:
    """(dQ, dK, dV) tiles by head, from the context's gradient tiles ``d_out``."""
    heads, seq = scores.heads, scores.shape[1]
    d = context.shape[1] // heads
    qranges, kranges = split(seq, counts[0]), split(seq, counts[1])
    n = heads * len(qranges) * len(kranges)
    recompute = batch * (scores.flops + softmax.flops)  # each chain rebuilds the block's P
    d_p = batch * context.bwd_flops / 2  # dP = dO V^T (half of context's backward)
    d_v = batch * context.bwd_flops / 2  # dV = P^T dO
    d_s = batch * softmax.bwd_flops
    d_qk = batch * scores.bwd_flops / 2  # dQ = dS K, dK = dS^T Q: half each
    work = {"dq": recompute + d_p + d_s + d_qk, "dk": recompute + d_p + d_s + d_qk, "dv": recompute + d_v}

    def block_reads(h, a, bk):
        r = overlap(q, *a, h, h + 1) + overlap(k, *bk, h, h + 1) + overlap(v, *bk, h, h + 1)
        r += overlap(ctx, *a, h, h + 1)  # O and the row statistics (logsumexp) of the forward
        r += [u for src in d_out for u in overlap(src, *a, h, h + 1)]
        return r

    result = {"dq": [], "dk": [], "dv": []}
    for which in ("dv", "dk", "dq"):
        idx = 0
        outers, inners, owner = (qranges, kranges, owners[0]) if which == "dq" else (kranges, qranges, owners[1])
        for h in range(heads):
            for outer in outers:
                prev = None
                for j, inner in enumerate(inners):
                    a, bk = (outer, inner) if which == "dq" else (inner, outer)
                    reads = block_reads(h, a, bk) + ([prev] if prev is not None else [])
                    frac = (a[1] - a[0]) * (bk[1] - bk[0]) / (seq * seq * heads)
                    last = j == len(inners) - 1
                    name = f"bwd.{context.name}.{which}[h{h},q{a[0]}:{a[1]},k{bk[0]}:{bk[1]}]"
                    prev = bd.add(
                        Node(
                            name,
                            BACKWARD,
                            dtype_bytes * batch * (outer[1] - outer[0]) * d,
                            work[which] * frac,
                            0,
                            "attention",
                            _tile(f"bwd.{context.name}.{which}", idx, n, h, a, bk, last),
                        ),
                        reads,
                        owner,
                    )
                    idx += 1
                result[which].append(Piece(outer[0], outer[1], prev, h, h + 1))
    return tuple(Pieces(sorted(result[w], key=lambda p: (p.lo, p.clo))) for w in ("dq", "dk", "dv"))
