"""Row arithmetic of tiling: which rows a tile reads, its halo, and the pieces a rewrite builds from.

A tile of a windowed layer (convolution, pooling) with output rows ``[lo, hi)``
reads input rows ``[lo*stride - pad, (hi-1)*stride - pad + kernel)``, clipped to
the input; its halo is what that window reaches beyond its own rows
``[lo*stride, hi*stride)`` on either side.  Its gradient goes the other way:
the input rows ``[lo, hi)`` get gradient from every output row whose window
touches them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from .core import Node
from .windows import reach_span, window_span
from .zoo import Layer

# ops whose output can be split along rows (3-D C,H,W) or tokens (2-D S,D) with 1:1 or windowed row maps
ROW_OPS = {"conv2d", "maxpool", "avgpool", "batchnorm", "relu", "add", "dropout", "gelu", "layernorm", "linear"}
WINDOWED = {"conv2d", "maxpool", "avgpool"}
WEIGHTED = {"conv2d", "linear"}  # grad-input and weight gradient split into separate tiles
# feature-map ops whose output can also be split into channel groups (when one row is still too much)
CHANNEL_OPS = {"conv2d", "batchnorm", "relu", "add", "dropout", "maxpool", "avgpool"}
STATS_FLOPS_PER_ELEM = 2  # BatchNorm statistics pass (sum, sum of squares) per element


def rows_of(shape: tuple[int, ...]) -> int:
    """Length of the axis tiles split: rows of (C, H, W), tokens of (S, D), features of a flat vector."""
    if len(shape) == 3:
        return shape[1]
    if len(shape) == 2:
        return shape[0]
    return shape[0] if len(shape) == 1 else 1


def axis_of(shape: tuple[int, ...]) -> str:
    return {3: "rows", 2: "tokens"}.get(len(shape), "features")


def dense(lay: Layer) -> bool:
    """A linear layer on a flat vector: every output feature reads every input feature."""
    return lay.op == "linear" and len(lay.shape) == 1


def tileable(lay: Layer) -> bool:
    if lay.op == "matmul" and lay.heads and len(lay.shape) == 3:
        return lay.shape[1] > 1  # attention scores: the count is query tiles per head
    if lay.op == "softmax" and len(lay.shape) == 3:
        return lay.shape[1] > 1  # attention probabilities: the count is key tiles per head
    if len(lay.shape) == 1:  # flat vectors: linear, ReLU and dropout split by features
        return lay.op in ("linear", "relu", "dropout") and lay.shape[0] > 1
    return (
        lay.op in ROW_OPS
        and len(lay.shape) in (2, 3)
        and rows_of(lay.shape) > 1
        and not (lay.op == "linear" and len(lay.shape) != 2)
    )


def channel_splittable(lay: Layer) -> bool:
    """Whether ``lay``'s output (C, H, W) can be split into channel groups as well as rows.

    A convolution's group computes its output channels from every input channel; the other ops
    work channel by channel, so a group reads only its channels.  Global pooling (one output row)
    is a running sum over its input's pieces instead."""
    return lay.op in CHANNEL_OPS and len(lay.shape) == 3 and lay.shape[0] > 1 and lay.shape[1] > 1


def channelwise(lay: Layer) -> bool:
    """Whether output channel c of ``lay`` reads only channel c of its inputs (and gradient)."""
    return lay.op in CHANNEL_OPS and lay.op != "conv2d" and len(lay.shape) == 3


def halo_of(lay: Layer) -> int:
    """Extra input rows a tile of ``lay`` reads beyond its own range, on each side."""
    if lay.op not in WINDOWED:
        return 0
    return max(lay.pad, lay.kernel - lay.stride - lay.pad, 0)


def split(rows: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous ranges covering ``0..rows`` exactly, sizes differing by at most one."""
    count = max(1, min(count, rows))
    return [(t * rows // count, (t + 1) * rows // count) for t in range(count)]


def input_rows(lay: Layer, lo: int, hi: int, in_rows: int) -> tuple[int, int]:
    """Input rows that output rows ``[lo, hi)`` of ``lay`` read (window clipped to the input)."""
    if dense(lay):
        return 0, in_rows
    if lay.op not in WINDOWED:
        return lo, hi
    a, b = window_span(lo, hi, lay.kernel, lay.stride, lay.pad)
    return max(0, a), min(in_rows, b)


def output_rows_touching(lay: Layer, lo: int, hi: int, out_rows: int) -> tuple[int, int]:
    """Output rows of ``lay`` whose window touches input rows ``[lo, hi)`` (what grad-input needs)."""
    if dense(lay):
        return 0, out_rows
    if lay.op not in WINDOWED:
        return lo, hi
    first, stop = reach_span(lo, hi, lay.kernel, lay.stride, lay.pad)
    return max(0, first), min(out_rows, stop)


@dataclass(frozen=True)
class NodeRole:
    """What one node of a zoo graph computes, as the builder made it (kept beside the graph, never in
    its JSON): a front-end that executes the graph reads this instead of parsing node names.

    ``kind``: ``output`` (rows ``[lo, hi)`` of layer ``layer``'s output, the whole when untiled),
    ``backward`` (a whole layer's backward: the gradient of its node inputs ``grad_of``, rows
    ``[lo, hi)`` of its output's, and its weight gradient),
    ``stats`` / ``grad_stats`` (step ``index`` of ``count`` of BatchNorm's forward / backward
    statistics chain over rows ``[lo, hi)``), ``partial`` (step of a global pooling's running sum over
    its input rows ``[lo, hi)``; the last step is the layer's output), ``loss`` / ``loss_partial``
    (the per-sample loss, whole or a step of its chain over logit rows ``[lo, hi)``), ``loss_grad``
    and ``grad_input`` (rows ``[lo, hi)`` of the gradient of the outputs of the layers ``grad_of``;
    ``layer`` is the layer whose backward computes it, ``wrt`` the input it is the gradient of, None
    for add's one tensor serving both), ``weight_grad`` (the weight gradient's share of output rows
    ``[lo, hi)``, step ``index`` of ``count``), ``other`` (a node kind no front-end reads yet).
    ``clo``/``chi``: the channels ``[clo, chi)`` of the tensor (for a weight-gradient share: of the
    layer's output channels) the node covers, when it is one of several channel groups; None: all."""

    kind: str
    layer: int
    lo: int = 0
    hi: int = 1
    grad_of: tuple[int, ...] = ()
    wrt: int | None = None
    index: int = 0
    count: int = 1
    clo: int | None = None
    chi: int | None = None


@dataclass
class Piece:
    """A node holding rows ``[lo, hi)`` of a tensor, and when it is split by heads or channels too, heads
    ``[clo, chi)`` (in head-group units) or channels ``[clo, chi)``."""

    lo: int
    hi: int
    node: int
    clo: int | None = None
    chi: int | None = None


class Builder:
    """Nodes, their inputs, and for the tiling planner which layer's tile count sets each node's size."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.preds: list[list[int]] = []
        self.owner: list[int | None] = []  # layer whose tile count sets the node's size
        # per node, the layer whose count sets how much of an input it reads, where that is not its owner
        # (an attention step: its query tiles set what it reads of Q, its key tiles what it reads of K and V)
        self.read_owner: dict[int, dict[int, int]] = {}
        self.extent: list[int | None] = []  # layer whose count sets which rows the node reads (default: owner)
        self.roles: list[NodeRole | None] = []  # what each node computes (None: not recorded)

    def add(
        self,
        node: Node,
        reads,
        owner: int | None,
        read_owner: dict[int, int] | None = None,
        extent: int | None = None,
        role: NodeRole | None = None,
    ) -> int:
        self.nodes.append(node)
        self.roles.append(role)
        self.preds.append(sorted(set(reads)))
        self.owner.append(owner)
        self.extent.append(owner if extent is None else extent)
        if read_owner:
            self.read_owner[len(self.nodes) - 1] = read_owner
        return len(self.nodes) - 1


class Pieces(list):
    """Pieces of one tensor, sorted by rows (then heads), so lookups can bisect."""

    his: list[int] | None = None  # the pieces' row ends, for bisecting (rebuilt when pieces were added)
    heads: dict | None = None  # head -> that head's pieces, when split by single heads (rebuilt likewise)
    heads_len: int = -1


def _one_head(pieces: Pieces, h: int) -> Pieces | None:
    """Pieces of head ``h`` alone, or None when the tensor is not split by single heads."""
    if pieces.heads_len != len(pieces):
        pieces.heads_len = len(pieces)
        pieces.heads = None
        if pieces and all(p.clo is not None and p.chi == p.clo + 1 for p in pieces):
            pieces.heads = {}
            for p in pieces:
                pieces.heads.setdefault(p.clo, Pieces()).append(p)
    if pieces.heads is None:
        return None
    return pieces.heads.get(h, _EMPTY)


_EMPTY = Pieces()


def overlap(pieces: list[Piece], lo: int, hi: int, clo: int | None = None, chi: int | None = None) -> list[int]:
    """Nodes of ``pieces`` that hold any of rows ``[lo, hi)`` (and of heads ``[clo, chi)`` when given)."""
    if not isinstance(pieces, Pieces):
        return [
            p.node
            for p in pieces
            if p.lo < hi and p.hi > lo and (clo is None or p.clo is None or (p.clo < chi and p.chi > clo))
        ]
    if clo is not None and chi == clo + 1:
        one = _one_head(pieces, clo)
        if one is not None:
            # split by single heads: look in that head's pieces only (a lookup per head and tile stays short)
            pieces, clo = one, None
    if pieces.his is None or len(pieces.his) != len(pieces):
        pieces.his = [p.hi for p in pieces]
    found = []
    for j in range(bisect_right(pieces.his, lo), len(pieces)):  # from the first piece ending after lo
        p = pieces[j]
        if p.lo >= hi:
            break
        if clo is None or p.clo is None or (p.clo < chi and p.chi > clo):
            found.append(p.node)
    return found
