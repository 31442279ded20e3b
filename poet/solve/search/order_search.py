"""Local search over the order the recomputing one-pass rule runs in: move one node, keep what costs no more.

The one-pass rule (:mod:`~poet.solve.search.stream_remat`) prices any topological order, and the orders
built for it (:mod:`~poet.solve.search.order`) are good starts but not local optima: on resnet18_cifar at
32 KiB on the ``m4`` the depth-first order costs 8.551 J, and single moves lower it, mostly in the
backward pass (a BatchNorm statistics tile one tile later, behind the next convolution tile it waits for;
a BatchNorm gradient tile beside the weight-gradient tiles that read the same tensors).  A move takes one
node out and puts it back at a random place after its last input and before its first reader (so the
order stays topological), runs the pass in the new order, and keeps the order when it costs no more
(moves of equal cost are kept too, so the search drifts across plateaus).  Measured: docs/tiling.md,
"Searching the one-pass rule's order".

A search is seeded, resumable and pickled without its graph, so
:class:`~poet.solve.search.pool.SearchPool` runs several side by side in worker processes (the phase,
:mod:`poet.solve.phases.order_search`, hands the best order to every search between rounds).
"""

from __future__ import annotations

import random
import time

from ...graph.core import CostedGraph
from ...schedule.core import Budget
from .order import reordered, stream_remat_in_order
from .stream import StreamResult
from .stream_remat import stream_remat_schedule

PATIENCE = 1000  # moves in a row without gain before a search ends on its own


class OrderSearch:
    """One search: the best order found, its energy as the pass prices it, and the moves made."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        order: list[int],
        energy_j: float,
        *,
        seed: int = 0,
        target_energy: float | None = None,
        patience: int = PATIENCE,
        round_tries: int | None = None,
    ):
        if sorted(order) != list(range(len(g.nodes))):
            raise ValueError(f"the order must list each of the graph's {len(g.nodes)} nodes once")
        self.g, self.budget = g, budget
        self.order, self.energy_j = list(order), energy_j
        self.rng = random.Random(seed)
        self.target_energy, self.patience = target_energy, patience
        self.round_tries = round_tries  # tries per call of run (None: no limit), so rounds end by the moves
        self.moves = self.kept = self.idle = 0  # moves priced, moves that lowered the energy, moves since

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["g"] = None  # a worker has the graph already (SearchPool sets it back)
        return state

    @property
    def reached(self) -> bool:
        return self.target_energy is not None and self.energy_j <= self.target_energy

    @property
    def done(self) -> bool:
        return self.reached or self.idle >= self.patience

    def adopt(self, other: OrderSearch) -> None:
        """Go on from ``other``'s order when it is cheaper (searches side by side share their best)."""
        if other.energy_j < self.energy_j:
            self.order, self.energy_j, self.idle = list(other.order), other.energy_j, 0

    def run(self, time_limit: float, patience: int | None = None, stop=None, clock=time.perf_counter) -> None:
        """Move nodes for ``time_limit`` seconds, until ``patience`` tries in a row (counted across calls)
        bring no gain, ``round_tries`` tries are made, the target is reached, or ``stop()`` is true.  Ended
        by its tries or its patience, a search is the same whatever the machine's speed."""
        g, order, n = self.g, self.order, len(self.order)
        patience = self.patience if patience is None else patience
        t_end = clock() + time_limit
        pos = [0] * n
        for i, v in enumerate(order):
            pos[v] = i
        tries = 0
        while not self.reached and self.idle < patience and n > 1:
            if clock() >= t_end or (stop is not None and stop()):
                return
            if self.round_tries is not None and tries >= self.round_tries:
                return
            tries += 1
            i = self.rng.randrange(n)
            v = order[i]
            lo = max((pos[p] for p in g.preds[v]), default=-1) + 1
            hi = min((pos[s] for s in g.succs[v]), default=n) - 1
            j = self.rng.randint(lo, hi)
            self.idle += 1  # (a node with no other place counts as a move without gain: patience still ends it)
            if j == i:
                continue
            moved = order[:i] + order[i + 1 :]
            moved.insert(j, v)
            self.moves += 1
            found = stream_remat_schedule(
                reordered(g, moved),
                self.budget,
                time_limit=max(0.0, t_end - clock()),
                stop=stop,
                clock=clock,
                ceiling_j=self.energy_j,
            )
            if not found.found or found.energy_j > self.energy_j:
                continue
            if found.energy_j < self.energy_j:
                self.kept += 1
                self.idle = 0
            order, self.order, self.energy_j = moved, moved, found.energy_j
            for k in range(min(i, j), max(i, j) + 1):
                pos[order[k]] = k

    def result(self, time_limit: float | None = None, stop=None, clock=time.perf_counter) -> StreamResult:
        """The pass's schedule in the best order, its steps on the graph's ids (the caller validates it)."""
        t_end = None if time_limit is None else clock() + time_limit
        return stream_remat_in_order(self.g, self.budget, self.order, t_end, stop, clock)
