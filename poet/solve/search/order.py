"""Another topological order for the one-pass rules: readers of the same tensors next to each other.

A tiled graph's order is the planner's: on the tiled transformers each attention projection tile (a
head group's query, key or value rows) is computed just before the attention tiles that read it, so the
eight LayerNorm tiles it reads are paged in again for each of the 18 projections of their rows, and in
the backward pass the dk and dv tiles that read the same query, context and output-gradient tiles come in
separate chains.  :func:`affinity_order` is the graph's order with one change: right after a node is
placed, the ready nodes that read mostly what it read (at least ``share`` of their input bytes among its
inputs and its output) are placed too, up to ``most`` of them, so their inputs are read once while
resident.  Any topological order is a legal schedule order; the one-pass rule runs on the graph renumbered
in it (:func:`reordered`) and its steps are mapped back to the graph's ids, then validated like any
schedule.  Measured: docs/tiling.md, "Recomputation and order in the one-pass rule".

:func:`recency_order` places instead, among the ready nodes, one that reads what was placed last (a
depth-first order): on a tiled network each tile is carried through the layers that follow as far as
their other inputs allow, so a BatchNorm's statistics chain runs beside the convolution tiles it reads
and the next layer's tiles beside the ReLU tiles they read, each read while still resident.  Ties go by
layer and by tile index, ascending or descending, which decides the direction tiles sweep; both are
tried (:func:`stream_remat_recency`).  Measured: docs/tiling.md, "A depth-first order for the one-pass
rule".
"""

from __future__ import annotations

import heapq
import time

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_OVERLAP, Budget, Op, Step
from .stream import CLOCK_EVERY, NOTHING, StreamResult
from .stream_remat import stream_remat_schedule

SHARE = 0.75  # the input bytes a reader must share with the node just placed to follow it
MOST = 16  # the readers placed after one node at most


def affinity_order(
    g: CostedGraph,
    *,
    share: float = SHARE,
    most: int = MOST,
    t_end: float | None = None,
    stop=None,
    clock=time.perf_counter,
) -> list[int] | None:
    """The order of the module docstring (a permutation of the node ids, every node after its inputs), or
    None when ``t_end`` passes or ``stop()`` is true first."""
    return _placed_order(g, [(v,) for v in range(len(g.nodes))], False, share, most, t_end, stop, clock)


def recency_order(
    g: CostedGraph,
    direction: int = 1,
    *,
    share: float = SHARE,
    most: int = MOST,
    t_end: float | None = None,
    stop=None,
    clock=time.perf_counter,
) -> list[int] | None:
    """The depth-first order of the module docstring, readers of the same tensors still placed together;
    ties by layer (where its first tile is in the graph), then tile index (``direction`` 1: ascending, -1:
    descending).  None when ``t_end`` passes or ``stop()`` is true first."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be 1 or -1, got {direction!r}")
    first: dict[str, int] = {}
    keys = []
    for v, nd in enumerate(g.nodes):
        layer = nd.tile.of if nd.tile is not None else nd.name
        index = nd.tile.index if nd.tile is not None else 0
        keys.append((first.setdefault(layer, v), direction * index, v))
    return _placed_order(g, keys, True, share, most, t_end, stop, clock)


def _placed_order(g: CostedGraph, keys: list[tuple], recency: bool, share, most, t_end, stop, clock):
    """Place ready nodes by ``keys`` (or, with ``recency``, by the latest placement among their inputs
    first, then ``keys``), each followed by the ready readers of mostly what it read."""
    n, preds, succs, m = len(g.nodes), g.preds, g.succs, g.ram
    waiting = [len(set(p)) for p in preds]  # inputs not placed yet
    placed = [False] * n
    ready = [(0, keys[v], v) for v in range(n) if waiting[v] == 0]
    heapq.heapify(ready)
    order: list[int] = []

    def place(v: int) -> None:
        placed[v] = True
        order.append(v)
        for r in set(succs[v]):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, (-len(order) if recency else 0, keys[r], r))

    while ready:
        if len(order) % CLOCK_EVERY == 0 and ((t_end is not None and clock() > t_end) or (stop is not None and stop())):
            return None
        v = heapq.heappop(ready)[2]
        if placed[v]:
            continue
        place(v)
        have = set(preds[v]) | {v}
        followers = 0
        for r in sorted({r for p in have for r in succs[p] if not placed[r] and waiting[r] == 0}, key=keys.__getitem__):
            ins = set(preds[r])
            if sum(m[p] for p in ins & have) >= share * max(1, sum(m[p] for p in ins)):
                place(r)
                followers += 1
                if followers >= most:
                    break
    return order


def reordered(g: CostedGraph, order: list[int]) -> CostedGraph:
    """``g`` renumbered so that node i is ``order[i]``."""
    new = [0] * len(order)
    for i, v in enumerate(order):
        new[v] = i
    edges = tuple(sorted((new[a], new[b]) for a, b in g.edges))
    nodes = tuple(g.nodes[v] for v in order)
    return CostedGraph(
        name=g.name, nodes=nodes, edges=edges, fixed_ram_bytes=g.fixed_ram_bytes, meta=dict(g.meta), weights=g.weights
    )


def stream_remat_reordered(
    g: CostedGraph, budget: Budget, *, time_limit: float | None = None, stop=None, clock=time.perf_counter
) -> StreamResult:
    """The one-pass rule with recomputation in :func:`affinity_order`, its steps on ``g``'s ids (each step's
    stage is its place in that order).  Not under the overlap paging model, whose stage t must be where
    node t is first computed: there it finds nothing."""
    if budget.paging_time == PAGING_OVERLAP:
        return NOTHING
    t_end = None if time_limit is None else clock() + time_limit
    return stream_remat_in_order(g, budget, affinity_order(g, t_end=t_end, stop=stop, clock=clock), t_end, stop, clock)


def stream_remat_recency(
    g: CostedGraph, budget: Budget, *, time_limit: float | None = None, stop=None, clock=time.perf_counter
) -> StreamResult:
    """The one-pass rule with recomputation in :func:`recency_order`, tiles ascending and descending, the
    cheaper (as the pass prices it; the caller validates it), on ``g``'s ids.  Not under the overlap paging
    model (as :func:`stream_remat_reordered`)."""
    if budget.paging_time == PAGING_OVERLAP:
        return NOTHING
    t_end = None if time_limit is None else clock() + time_limit
    best = NOTHING
    for direction in (1, -1):
        order = recency_order(g, direction, t_end=t_end, stop=stop, clock=clock)
        found = stream_remat_in_order(g, budget, order, t_end, stop, clock)
        if found.found and (not best.found or found.energy_j < best.energy_j):
            best = found
    return best


def stream_remat_in_order(g: CostedGraph, budget: Budget, order, t_end, stop, clock) -> StreamResult:
    """The recomputing pass on ``g`` renumbered in ``order`` (None: no order, nothing found), its steps on
    ``g``'s ids (each step's stage is its place in ``order``), until ``t_end`` on ``clock`` (None: no
    limit) or ``stop()``."""
    if order is None:
        return NOTHING
    left = None if t_end is None else t_end - clock()
    found = stream_remat_schedule(reordered(g, order), budget, time_limit=left, stop=stop, clock=clock)
    if not found.found:
        return found
    steps = tuple(Step(s.op, order[s.node], s.stage) for s in found.steps)
    return StreamResult(steps, found.energy_j, found.runtime_s, found.resident_pairs)


def first_computed_order(steps, n: int) -> list[int] | None:
    """The nodes in the order ``steps`` first compute them: a topological order of any valid schedule (a
    node is computed only once its inputs are), and the order a one-pass rule's schedule was made in (its
    stage t first computes the order's node t).  None when some node of the ``n`` is never computed."""
    first: dict[int, int] = {}
    for k, s in enumerate(steps):
        if s.op == Op.COMPUTE and s.node not in first:
            first[s.node] = k
    if len(first) != n:
        return None
    return sorted(first, key=first.__getitem__)
