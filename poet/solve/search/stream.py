"""A paging schedule in one pass, linear in the graph: the plan every large solve holds first.

The greedy rules (:mod:`poet.solve.search.greedy`) re-plan a stage's whole resident set at each of
its evictions, and write the plan in the stage form (:class:`~poet.solve.stage.plan.Plan`), whose
``keep`` sets hold every resident tensor at every stage: both grow as the graph's nodes times the
tensors resident, which on a 20,000-node chain at 80% of its peak is minutes and gigabytes.

This pass needs neither.  It computes the nodes in order and, when a node's missing inputs and its
output do not fit next to what is resident, pages out the resident tensor read furthest in the future
(Belady's rule; a tensor already on storage is just freed), then pages missing inputs back in.  It
writes the validator's instructions directly: O((nodes + edges) log nodes) time, and memory linear in
the graph and the schedule.  It makes no optimality claim and recomputes nothing (it needs paging);
the portfolio (:mod:`poet.solve.phases.one_pass`) holds it from the start on large graphs, so that a time
limit or a stop always has a validated schedule to return, and keeps whatever beats it.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, PAGING_OVERLAP, Budget, Op, Step
from ..stage.plan import ram_cap

CLOCK_EVERY = 256  # stages between two looks at the clock and the stop flag


@dataclass(frozen=True)
class StreamResult:
    """What the pass found.  ``steps`` is empty when it found no schedule: some node's inputs and output
    alone exceed the RAM, the paging it needs overruns the deadline (``runtime_s`` then says by how
    much), or its time ran out or it was asked to stop first (or, asked for a ceiling, its energy passed it)."""

    steps: tuple[Step, ...]
    energy_j: float | None  # the steps' energy and runtime, as the validator prices them
    runtime_s: float | None  # (also when it is what overran the deadline)
    # the tensors resident summed over the nodes: what a stage plan of the same budget holds, and what a
    # greedy run's time grows with (None when the pass did not reach its end)
    resident_pairs: int | None

    @property
    def found(self) -> bool:
        return bool(self.steps)

    @property
    def over_deadline(self) -> bool:
        """It reached its end, and only the deadline is what it missed."""
        return not self.steps and self.runtime_s is not None


NOTHING = StreamResult((), None, None, None)


def stream_schedule(
    g: CostedGraph,
    budget: Budget,
    *,
    time_limit: float | None = None,
    stop=None,
    clock=time.perf_counter,
) -> StreamResult:
    """The pass of the module docstring: its instructions, their energy and runtime (the caller
    validates what it returns), or none (:class:`StreamResult` says why) when it does not fit the
    budgets, or when ``time_limit`` seconds pass or ``stop()`` is true first."""
    t_end = None if time_limit is None else clock() + time_limit
    n, m, preds, succs = len(g.nodes), g.ram, g.preds, g.succs
    cap = ram_cap(budget.ram_bytes)
    reader = [0] * n  # per tensor, the index in succs[x] of its next reader not yet computed
    resident: set[int] = set()
    stored: set[int] = set()
    used = g.fixed_ram_bytes
    furthest: list[tuple[int, int]] = []  # (-next use, tensor), stale entries skipped when popped
    steps: list[Step] = []
    nd = g.nodes
    page_e: list[float] = []
    page_t: list[float] = []  # per stage, the paging time in it

    def next_use(x: int) -> int:
        r = succs[x]
        return r[reader[x]] if reader[x] < len(r) else n

    pairs = 0
    for t in range(n):
        pairs += len(resident)
        if t % CLOCK_EVERY == 0 and ((t_end is not None and clock() > t_end) or (stop is not None and stop())):
            return NOTHING
        ins = set(preds[t])
        missing = [p for p in sorted(ins) if p not in resident]
        need = m[t] + sum(m[p] for p in missing)
        held = []
        stage_e: list[float] = []
        stage_t: list[float] = []
        while used + need > cap:
            if not furthest:
                return NOTHING  # what t needs alone does not fit
            key, x = heapq.heappop(furthest)
            if x not in resident or -key != next_use(x):
                continue  # stale
            if x in ins:
                held.append((key, x))
                continue
            if x not in stored:
                steps.append(Step(Op.PAGE_OUT, x, t))
                stored.add(x)
                stage_e.append(nd[x].pageout_energy_j)
                stage_t.append(nd[x].pageout_time_s)
            steps.append(Step(Op.FREE, x, t))
            resident.discard(x)
            used -= m[x]
        for entry in held:
            heapq.heappush(furthest, entry)
        for p in missing:
            if p not in stored:
                return NOTHING  # cannot happen: a tensor leaves RAM early only through a page-out
            steps.append(Step(Op.PAGE_IN, p, t))
            stage_e.append(nd[p].pagein_energy_j)
            stage_t.append(nd[p].pagein_time_s)
            resident.add(p)
            used += m[p]
        page_e += stage_e
        page_t.append(math.fsum(stage_t))
        steps.append(Step(Op.COMPUTE, t, t))
        resident.add(t)
        used += m[t]
        for x in sorted(ins) + [t]:
            r = succs[x]
            while reader[x] < len(r) and r[reader[x]] <= t:
                reader[x] += 1
            if reader[x] == len(r):
                steps.append(Step(Op.FREE, x, t))
                resident.discard(x)
                used -= m[x]
            elif m[x] > 0:
                heapq.heappush(furthest, (-r[reader[x]], x))
    energy = g.plain_energy_j + math.fsum(page_e)
    # stage t computes node t alone
    return priced(steps, energy, g.plain_runtime_s, (nd[t].compute_time_s for t in range(n)), page_t, budget, pairs)


def priced(steps, energy_j: float, compute_s: float, stage_compute_s, stage_page_s, budget: Budget, pairs: int):
    """A pass's result, its runtime priced as the budget's paging model says from each stage's compute
    and paging seconds (``compute_s``: their compute total); nothing when the paging overruns the deadline."""
    if budget.paging_time == PAGING_HIDDEN:
        runtime = compute_s
    elif budget.paging_time == PAGING_OVERLAP:
        runtime = math.fsum(max(c, p) for c, p in zip(stage_compute_s, stage_page_s, strict=True))
    else:
        runtime = compute_s + math.fsum(stage_page_s)
    if budget.runtime_s is not None and runtime > budget.runtime_s:
        return StreamResult((), None, runtime, pairs)  # the paging it needs overruns the deadline
    return StreamResult(tuple(steps), energy_j, runtime, pairs)
