"""The training dataflow graph: plain data, shared by every later stage.

Two layers of the same shape:

* :class:`Graph` is structural: what each node computes (FLOPs), how many bytes
  its output occupies, which outputs it reads.  Builders (the benchmark zoo,
  PyTorch extraction) produce it.
* :class:`CostedGraph` is what solvers see: the same nodes with the device's
  time and energy for computing, paging in and paging out each one.  It is
  also the user-facing ``poet-graph/1`` file, so a graph profiled on real
  hardware can be scheduled without any model code.

Node ids are positions in a fixed topological order (``edges`` only go from a
lower id to a higher one); builders must produce that order deterministically.

A node made by tiling (:mod:`poet.graph.tiling`) carries a :class:`Tile`
saying which original node it is a piece of, so reports, plots and the
executor can map a tiled schedule back to the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..units import MAX_BYTES, byte_count, finite_number
from .errors import GraphError
from .weights import NO_TRAFFIC, Traffic, WeightStore

FORWARD = "forward"
BACKWARD = "backward"
KINDS = (FORWARD, BACKWARD)


TILE_PARTS = ("output", "stats", "partial", "weight_grad")


@dataclass(frozen=True, slots=True)  # slots: a tiled BERT has millions of them
class Tile:
    """Which piece of an untiled node a tiled node is.

    ``of`` names the original (untiled) node; ``index`` of ``count`` numbers the
    pieces in the order they are computed.  ``axis`` says what is split: one name
    (``"rows"``, ``"tokens"``, ``"queries"``, ``"channels"``, ...) or several joined
    by ``","`` for a grid (``"heads,queries"``).  ``start``/``stop`` give, per axis,
    the half-open range of the original tensor (or of the original computation's
    index space) this piece covers; empty when not recorded.  ``halo`` is how many
    extra input rows/tokens the piece reads beyond its own range on each side
    (from the kernel, stride and padding).  ``part`` says what the node holds:

    * ``output``: a slice of the original node's output;
    * ``stats``: a running statistics pass over the tiles (BatchNorm in training);
    * ``partial``: a running reduction or accumulator (global pooling, streamed
      attention with online softmax, gradient sums), complete at the last index;
    * ``weight_grad``: one tile's contribution to a weight gradient, accumulated
      into the gradient buffer that lives with the parameters.
    """

    of: str
    index: int
    count: int
    axis: str
    halo: int = 0
    part: str = "output"
    start: tuple[int, ...] = ()
    stop: tuple[int, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "start", tuple(self.start))
        object.__setattr__(self, "stop", tuple(self.stop))
        problem = tile_problem(self)
        if problem:
            raise GraphError(f"tile of {self.of!r}: {problem}")

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.axis.split(","))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_GOOD_AXES: set[str] = set()  # axis strings already found well formed (a graph uses a handful of them)


def _plainly_valid(t: Tile) -> bool:
    """True for a tile whose fields are all plain and in range (what the tiling builders make, millions of
    times for bert at 32 KiB): the checks of :func:`tile_problem` with exact types, a third of its time.
    False means only that the full check must say."""
    if type(t.of) is not str or not t.of or type(t.count) is not int or type(t.index) is not int:
        return False
    if not 0 <= t.index < t.count or type(t.halo) is not int or t.halo < 0 or t.part not in TILE_PARTS:
        return False
    if type(t.axis) is not str or t.axis not in _GOOD_AXES:
        return False
    start, stop = t.start, t.stop
    if not start:
        return not stop
    if len(start) != len(stop) or len(start) != t.axis.count(",") + 1:
        return False
    return all(type(a) is int and type(b) is int and 0 <= a < b for a, b in zip(start, stop))


def tile_problem(t: Tile) -> str:
    """What is wrong with a tile's fields, or "" when nothing is."""
    if _plainly_valid(t):
        return ""
    problem = _tile_problem(t)
    if not problem and isinstance(t.axis, str):
        _GOOD_AXES.add(t.axis)
    return problem


def _tile_problem(t: Tile) -> str:
    if not isinstance(t.of, str) or not t.of:
        return "'of' must be the non-empty name of the original node"
    if not _is_int(t.count) or t.count < 1:
        return f"'count' must be an integer >= 1, got {t.count!r}"
    if not _is_int(t.index) or not 0 <= t.index < t.count:
        return f"'index' must be an integer in 0..count-1 = 0..{t.count - 1}, got {t.index!r}"
    if not isinstance(t.axis, str) or not t.axis or any(not a.strip() for a in t.axis.split(",")):
        return f'\'axis\' must name what is split (e.g. "rows", "tokens", "heads,queries"), got {t.axis!r}'
    if not _is_int(t.halo) or t.halo < 0:
        return f"'halo' must be an integer >= 0 (extra rows read on each side), got {t.halo!r}"
    if t.part not in TILE_PARTS:
        return f"'part' must be one of {', '.join(TILE_PARTS)}, got {t.part!r}"
    if len(t.start) != len(t.stop):
        return "'start' and 'stop' must have one entry per axis each"
    if t.start:
        if len(t.start) != len(t.axis.split(",")):
            return f"'start'/'stop' have {len(t.start)} entries but 'axis' {t.axis!r} names {len(t.axis.split(','))}"
        for a, b in zip(t.start, t.stop):
            if not (_is_int(a) and _is_int(b) and 0 <= a < b):
                return f"'start' {list(t.start)} / 'stop' {list(t.stop)} must be integer ranges with 0 <= start < stop"
    return ""


@dataclass(frozen=True, slots=True)  # slots: a tiled BERT has millions of them
class Node:
    """One operation of the training iteration and the tensor it produces."""

    name: str
    kind: str
    output_bytes: int
    flops: float = 0.0
    param_bytes: int = 0
    op: str = ""
    tile: Tile | None = None


COST_FIELDS = (
    "compute_time_s",
    "compute_energy_j",
    "pagein_time_s",
    "pagein_energy_j",
    "pageout_time_s",
    "pageout_energy_j",
)


@dataclass(frozen=True, slots=True)  # slots: a tiled BERT has millions of them
class CostedNode:
    """A node with the device costs a solver needs (seconds, joules, bytes)."""

    name: str
    kind: str
    ram_bytes: int
    compute_time_s: float
    compute_energy_j: float
    pagein_time_s: float
    pagein_energy_j: float
    pageout_time_s: float
    pageout_energy_j: float
    tile: Tile | None = None
    # what one computation moves to and from the weight store (weights, gradients); under the stream
    # placement its storage cost is part of compute_time_s / compute_energy_j (poet.graph.weights)
    weight_traffic: Traffic = NO_TRAFFIC


def _check_edges(n: int, edges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The edges sorted, each once; a clear error for the first that is not a forward pair of node ids."""
    if not isinstance(edges, (list, tuple)):
        edges = list(edges)
    if all(type(e) is tuple and len(e) == 2 and type(e[0]) is int and type(e[1]) is int for e in edges) and all(
        0 <= u < v < n for u, v in edges
    ):  # pairs of plain ints in order (what the builders make, 7 million on bert at 32 KiB): no conversions
        return tuple(sorted(set(edges)))
    out = []
    seen = set()
    for e in edges:
        if len(e) != 2:
            raise GraphError(f"edge {e!r} must be a pair [u, v]")
        u, v = int(e[0]), int(e[1])
        if not (0 <= u < n and 0 <= v < n):
            raise GraphError(f"edge [{u}, {v}] names a node outside 0..{n - 1}")
        if u >= v:
            raise GraphError(
                f"edge [{u}, {v}] goes backwards: node ids must be a topological order (every edge [u, v] needs u < v)"
            )
        if (u, v) not in seen:
            seen.add((u, v))
            out.append((u, v))
    out.sort()
    return tuple(out)


class _Topology:
    """Adjacency derived from ``edges``; mixed into both graph classes."""

    nodes: tuple
    edges: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return len(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        p: list[list[int]] = [[] for _ in self.nodes]
        for u, v in self.edges:
            p[v].append(u)
        return tuple(tuple(sorted(x)) for x in p)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        s: list[list[int]] = [[] for _ in self.nodes]
        for u, v in self.edges:
            s[u].append(v)
        return tuple(tuple(sorted(x)) for x in s)

    @cached_property
    def last_reader(self) -> tuple[int, ...]:
        """Per node, the largest id that reads its output (-1 if nobody reads it)."""
        return tuple(sc[-1] if sc else -1 for sc in self.succs)

    @cached_property
    def last_useful_stage(self) -> tuple[int, ...]:
        """Per node, its largest descendant id (-1 if nobody reads it).

        A schedule's stage t only computes what serves node t or a later node, so
        node i is of no use at any stage past this one.
        """
        md = [-1] * len(self.nodes)
        for i in range(len(self.nodes) - 1, -1, -1):
            for s in self.succs[i]:
                md[i] = max(md[i], s, md[s])
        return tuple(md)

    def forward_ids(self) -> list[int]:
        return [i for i, nd in enumerate(self.nodes) if nd.kind == FORWARD]

    def backward_ids(self) -> list[int]:
        return [i for i, nd in enumerate(self.nodes) if nd.kind == BACKWARD]


@dataclass(frozen=True)
class Graph(_Topology):
    """Structural training graph (no device costs yet)."""

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[int, int], ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "edges", _check_edges(len(self.nodes), self.edges))
        for i, nd in enumerate(self.nodes):
            if nd.kind not in KINDS:
                raise GraphError(f"node {i} ({nd.name}) has kind {nd.kind!r}; expected 'forward' or 'backward'")
            byte_count(nd.output_bytes, f"node {i} ({nd.name}): output_bytes", error=GraphError)
            byte_count(nd.param_bytes, f"node {i} ({nd.name}): param_bytes", error=GraphError)
            finite_number(nd.flops, f"node {i} ({nd.name}): flops", error=GraphError)
            if nd.tile is not None and not isinstance(nd.tile, Tile):
                raise GraphError(f"node {i} ({nd.name}): tile must be a poet.graph.core.Tile or None")

    @property
    def param_bytes(self) -> int:
        return sum(nd.param_bytes for nd in self.nodes if nd.kind == FORWARD)

    @property
    def total_flops(self) -> float:
        return sum(nd.flops for nd in self.nodes)


@dataclass(frozen=True)
class CostedGraph(_Topology):
    """What every solver takes: topology, per-node costs, and fixed RAM.

    ``fixed_ram_bytes`` is RAM that is occupied for the whole iteration and
    not scheduled (parameters, gradients, optimizer state, workspace, runtime).
    The paper's setting leaves it at 0 and counts only layer outputs.
    ``weights`` says where the parameters live (:class:`~poet.graph.weights.WeightStore`; None: not
    recorded, as ``flash``): under ``stream`` each node's compute cost includes its weight traffic.
    """

    name: str
    nodes: tuple[CostedNode, ...]
    edges: tuple[tuple[int, int], ...]
    fixed_ram_bytes: int = 0
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    weights: WeightStore | None = None

    def __post_init__(self):
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "edges", _check_edges(len(self.nodes), self.edges))
        object.__setattr__(
            self, "fixed_ram_bytes", byte_count(self.fixed_ram_bytes, "fixed_ram_bytes", error=GraphError)
        )
        if not isinstance(self.meta, dict):
            raise GraphError(f"meta must be an object (a dict of notes), got {type(self.meta).__name__}")
        if not self.nodes:
            raise GraphError("the graph has no nodes")
        for i, nd in enumerate(self.nodes):
            label = f"node {i} ({nd.name})"
            if nd.kind not in KINDS:
                raise GraphError(f"{label} has kind {nd.kind!r}; expected 'forward' or 'backward'")
            byte_count(nd.ram_bytes, f"{label}: ram_bytes", error=GraphError)
            if nd.tile is not None and not isinstance(nd.tile, Tile):
                raise GraphError(f"{label}: tile must be a poet.graph.core.Tile or None")
            if not isinstance(nd.weight_traffic, Traffic):
                raise GraphError(f"{label}: weight_traffic must be a poet.graph.weights.Traffic")
            if nd.weight_traffic is not NO_TRAFFIC:
                nd.weight_traffic.check(f"{label}: weight_traffic")
            for f in COST_FIELDS:
                finite_number(getattr(nd, f), f"{label}: {f}", error=GraphError)
        if self.weights is not None and not isinstance(self.weights, WeightStore):
            raise GraphError("weights must be a poet.graph.weights.WeightStore or None")
        if self.fixed_ram_bytes + sum(nd.ram_bytes for nd in self.nodes) > MAX_BYTES:
            raise GraphError(
                "fixed_ram_bytes plus every node's ram_bytes is above 2^53 B (9 PB); byte counts "
                "that large are not exact in the solvers' arithmetic"
            )

    @property
    def ram(self) -> list[int]:
        return [nd.ram_bytes for nd in self.nodes]

    @property
    def plain_runtime_s(self) -> float:
        """One ordinary forward+backward pass: every node computed once."""
        return float(sum(nd.compute_time_s for nd in self.nodes))

    @property
    def plain_energy_j(self) -> float:
        return float(sum(nd.compute_energy_j for nd in self.nodes))

    def min_ram_bytes(self) -> int:
        """A necessary RAM budget: some node must hold its inputs and output at once.

        With paging allowed and unlimited time this bound is also sufficient.
        """
        return self.fixed_ram_bytes + max(
            nd.ram_bytes + sum(self.nodes[p].ram_bytes for p in self.preds[i]) for i, nd in enumerate(self.nodes)
        )

    @property
    def plain_weight_traffic(self) -> tuple[float, float]:
        """(joules, seconds) of the weight traffic of one plain pass (each node once); 0 unless streamed."""
        if self.weights is None or not self.weights.streamed:
            return 0.0, 0.0
        return (
            math.fsum(self.weights.joules(nd.weight_traffic) for nd in self.nodes),
            math.fsum(self.weights.seconds(nd.weight_traffic) for nd in self.nodes),
        )

    @property
    def placement(self) -> str:
        """Where the parameters live: ``flash`` (also when not recorded), ``ram`` or ``stream``."""
        return self.weights.placement if self.weights is not None else "flash"

    def with_fixed_ram(self, fixed_ram_bytes: int) -> CostedGraph:
        return CostedGraph(self.name, self.nodes, self.edges, fixed_ram_bytes, dict(self.meta), self.weights)
