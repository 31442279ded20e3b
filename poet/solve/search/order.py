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
"""

from __future__ import annotations

import heapq
import time

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_OVERLAP, Budget, Step
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
    n, preds, succs, m = len(g.nodes), g.preds, g.succs, g.ram
    waiting = [len(set(p)) for p in preds]  # inputs not placed yet
    placed = [False] * n
    ready = [v for v in range(n) if waiting[v] == 0]
    heapq.heapify(ready)
    order: list[int] = []

    def place(v: int) -> None:
        placed[v] = True
        order.append(v)
        for r in set(succs[v]):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)

    while ready:
        if len(order) % CLOCK_EVERY == 0 and ((t_end is not None and clock() > t_end) or (stop is not None and stop())):
            return None
        v = heapq.heappop(ready)
        if placed[v]:
            continue
        place(v)
        have = set(preds[v]) | {v}
        followers = 0
        for r in sorted({r for p in have for r in succs[p] if not placed[r] and waiting[r] == 0}):
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
    order = affinity_order(g, t_end=t_end, stop=stop, clock=clock)
    if order is None:
        return NOTHING
    left = None if t_end is None else t_end - clock()
    found = stream_remat_schedule(reordered(g, order), budget, time_limit=left, stop=stop, clock=clock)
    if not found.found:
        return found
    steps = tuple(Step(s.op, order[s.node], s.stage) for s in found.steps)
    return StreamResult(steps, found.energy_j, found.runtime_s, found.resident_pairs)
