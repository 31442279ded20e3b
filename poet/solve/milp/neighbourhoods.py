"""Neighbourhood search on the MILP's own columns: free the decisions of a few tensors (or of a few
stages), fix every other integer column at the incumbent, and solve what is left exactly.

Why: on a small tiled ``m4`` graph the cheap schedules recompute whole chains of tiles instead of paging
them (a page is mostly the SD card's latency), and a move from one such schedule to a better one changes
every decision of a chain's tensors at once: which stages recompute them, which keep them, which page
them.  CP-SAT's own neighbourhoods (random columns, random rows) seldom free all of them together, and its
search stops on a few plateaus (docs/tiling.md).  Here a neighbourhood is one of

* a **cluster of tensors**: one node and its neighbours in the graph (producers and readers), grown
  breadth-first to 4-16 nodes; every column about any of them is freed (their computations, residency,
  storage, page-ins and page-outs at every stage, and the free-edge columns that name them);
* a **run of stages**: every column of 3-12 consecutive stages;
* a **swap**: up to four of the tensors the incumbent pages out and a cluster of 2-6 nodes: it can page
  a tensor far from the paged ones instead of one of them (resnet-t2's cheapest schedule known came
  from one, docs/tiling.md).

The sub-MILP is the MILP with the other integer columns fixed at the incumbent and taken out
(:func:`~poet.solve.lp.problem.restrict`: a tenth to a third of the columns; 2-8 times faster to solve
than the whole matrix with those columns pinned), so any of its solutions is one of the MILP.  CP-SAT
(:mod:`~poet.solve.lp.cpsat`) solves it from the incumbent within ``sub_limit`` seconds, and its answer
is kept only when it satisfies every row of the MILP (CP-SAT solves a relaxation of it) and costs less.
Not HiGHS: on these sub-MILPs HiGHS 1.16 was seen to loop in its presolve (``strengthenInequalities``,
inside its RINS heuristic) for over 15 minutes past a 3-s time limit (resnet-t2 of
bench/tiled_truth.py), and CP-SAT holds its limit.  The sequence of neighbourhoods comes from ``seed``,
so a run is repeatable up to the sub-solves' time limits.  The clock and ``stop`` are checked between
sub-solves, and each sub-solve ends by the time left.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from ...graph.core import CostedGraph
from ...schedule.core import OPTIMAL
from ..lp.cpsat import solve_cpsat
from ..lp.problem import max_violation, restrict
from .formulation import Formulation

CLUSTER_SIZES = (4, 16)  # nodes in a tensor cluster, drawn uniformly; the upper end adapts
STAGE_RUNS = (3, 12)  # stages in a run, drawn uniformly
CLUSTER_SHARE = 0.6  # of the neighbourhoods that are not swaps, the share that are tensor clusters
SWAP_SHARE = 0.3  # the share that are swaps
SWAP_CLUSTER = (2, 6)  # a swap's cluster: nodes, drawn uniformly
SWAP_PAGED = 4  # a swap's paged tensors: at most this many, drawn


@dataclass(frozen=True)
class NeighbourhoodRun:
    """The best column vector found (the incumbent given when nothing improved it), its objective in the
    problem's units, how many sub-MILPs were solved and how many improved the incumbent."""

    x: np.ndarray
    objective: float
    tried: int
    improved: int
    seconds: float


def grown(g: CostedGraph, rng: random.Random, size: int) -> set[int]:
    """A random node and its neighbours (producers and readers), breadth-first, up to ``size`` nodes."""
    seed = rng.randrange(len(g.nodes))
    chosen, frontier = {seed}, [seed]
    while frontier and len(chosen) < size:
        u = frontier.pop(rng.randrange(len(frontier)))
        for w in sorted(set(g.preds[u]) | set(g.succs[u])):
            if w not in chosen and len(chosen) < size:
                chosen.add(w)
                frontier.append(w)
    return chosen


class ColumnIndex:
    """Which columns are about each node, and each column's stage."""

    def __init__(self, f: Formulation):
        n = f.problem.num_cols
        self.stage = np.full(n, -1, dtype=np.int64)
        about: list[list[int]] = [[] for _ in range(f.T)]

        def put(col: int, t: int, *nodes: int) -> None:
            self.stage[col] = t
            for i in nodes:
                about[i].append(col)

        for mat in (f.R, f.S, f.D, f.O):
            for t, i in zip(*np.nonzero(mat >= 0)):
                put(int(mat[t, i]), min(int(t), f.T - 1), int(i))
        for (t, i), cols in f.I.items():
            for k, col in cols:
                put(col, t, i, k)
        for (t, k, i), col in f.F.items():
            put(col, t, i, k)
        self.about = [np.unique(np.asarray(c, dtype=np.int64)) for c in about]
        self.page_outs = [f.O[:, i][f.O[:, i] >= 0] for i in range(f.T)]
        self.integer = np.asarray(f.problem.integer, dtype=bool)

    def cluster(self, g: CostedGraph, rng: random.Random, largest: int) -> np.ndarray:
        """The columns about a breadth-first cluster of at most ``largest`` nodes around a random node."""
        return self.columns(grown(g, rng, rng.randint(CLUSTER_SIZES[0], max(CLUSTER_SIZES[0], largest))))

    def swap(self, g: CostedGraph, rng: random.Random, x: np.ndarray) -> np.ndarray:
        """The columns about a few tensors ``x`` pages out and a small cluster elsewhere: a move that pages
        one tensor instead of another far from it in the graph, which no cluster or stage run holds."""
        paged = [i for i, cols in enumerate(self.page_outs) if len(cols) and np.any(x[cols] > 0.5)]
        paged = rng.sample(paged, min(len(paged), SWAP_PAGED))
        return self.columns(set(paged) | grown(g, rng, rng.randint(*SWAP_CLUSTER)))

    def columns(self, nodes) -> np.ndarray:
        free = np.zeros(len(self.stage), dtype=bool)
        for i in nodes:
            free[self.about[i]] = True
        return free

    def stages(self, T: int, rng: random.Random) -> np.ndarray:
        """Every column of a random run of consecutive stages."""
        width = min(rng.randint(*STAGE_RUNS), T)
        first = rng.randrange(max(1, T - width + 1))
        return (self.stage >= first) & (self.stage < first + width)


def improve_by_neighbourhoods(
    f: Formulation,
    g: CostedGraph,
    x: np.ndarray,
    *,
    time_limit: float,
    sub_limit: float = 3.0,
    seed: int = 0,
    threads: int | None = None,
    stop=None,
) -> NeighbourhoodRun:
    """Improve ``x`` (a solution of ``f``'s MILP) by re-solving neighbourhoods until ``time_limit``
    seconds have passed or ``stop()`` (see the module); ``threads``: CP-SAT's workers (2 if None).  Needs
    OR-Tools."""
    p = f.problem
    t0 = time.perf_counter()
    best = np.asarray(x, dtype=float).copy()
    objective = float(p.c @ best)
    if max_violation(p, best) > 1e-7:
        raise ValueError("the neighbourhood search needs a solution of the MILP to start from")
    index, rng = ColumnIndex(f), random.Random(seed)
    tried = improved = 0
    largest = CLUSTER_SIZES[1]
    while True:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0.05 or (stop is not None and stop()):
            break
        kind = rng.random()
        if kind < SWAP_SHARE:
            free = index.swap(g, rng, best)
        elif kind < SWAP_SHARE + CLUSTER_SHARE * (1.0 - SWAP_SHARE):
            free = index.cluster(g, rng, largest)
        else:
            free = index.stages(f.T, rng)
        sub = restrict(p, index.integer & ~free, best)
        r = solve_cpsat(
            sub.problem, time_limit=min(sub_limit, left), threads=threads, gap=1e-6, start=best[sub.kept], stop=stop
        )
        tried += 1
        # clusters grow while their sub-MILPs are solved to optimality and shrink when one runs out of time
        if r.status == OPTIMAL:
            largest = min(largest + 1, len(g.nodes))
        elif left > sub_limit:
            largest = max(CLUSTER_SIZES[0], largest - 2)
        if r.x is None:
            continue
        x_new = sub.lift(r.x)
        cost = float(p.c @ x_new)
        if cost < objective - 1e-9 * (1.0 + abs(objective)) and max_violation(p, x_new) <= 1e-7:
            best, objective, improved = x_new, cost, improved + 1
    return NeighbourhoodRun(best, objective, tried, improved, time.perf_counter() - t0)
