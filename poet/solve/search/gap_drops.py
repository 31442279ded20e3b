"""A recomputation plan for large dense graphs: drop tensors across idle gaps, recompute from live inputs.

The greedy rules (:mod:`poet.solve.search.greedy`) evict at each stage's peak and recompute
whatever is missing, recursively.  On dense DAGs with skip connections (the generated
``layered`` family) the recomputations they start cascade: a backward stage recomputes most of
the forward pass, no longer fits, and the rule fails.  This plan avoids cascades by
construction.  A tensor is dropped only across an *idle gap*, two consecutive uses with stages
in between (typically its last forward read and its first backward read), and is recomputed
in the stage that ends the gap, from inputs that are in RAM at that stage anyway.  So every
recomputation computes one node, and its inputs are never brought back for it.

It is a greedy cover: while some stage's RAM (kept tensors plus the stage's output, as the
MILP charges it) is over the budget, drop the tensor whose gap spans that stage and whose
recomputation costs the least energy per byte.  A dropped tensor's inputs are pinned at its
recomputation stage (never dropped across it).  The plan is then replayed by the validator;
where the replay's peak differs from the estimate, the cover is redone against a lower cap.

It needs no time to speak of (well under a second on 1,000 nodes) and makes no optimality
claim; the strategies use it as a start and a fallback when no rule finds a plan.
"""

from __future__ import annotations

import math
import random
import time
from bisect import bisect_right
from dataclasses import dataclass

from ...graph.core import CostedGraph
from ...schedule.core import Budget
from ...schedule.validate import ScheduleError, simulate
from ..errors import SolveError
from ..stage.emit import emit
from ..stage.plan import Plan, plan_costs, ram_cap

# replays against a lower cap when the estimate of a stage's RAM was below the replay's
RETRIES = 6
# The covers tried, cheapest plan kept: how many inputs deep and how many nodes in all a recomputation
# may bring back (inputs no longer in RAM), and whether one may push its own stage over the cap.  Each
# fails somewhere the others do not (the generated layered family at 80% of its peak: 250:1 needs the
# loose one, 250:2 a strict one, 500:3 the deeper strict one).
VARIANTS = ((3, 12, True), (3, 12, False), (5, 30, True), (1, 1, False))
# Where none of them fits and nothing else is held, the randomized covers of gap_drop_search draw the depth,
# the size and the strictness from these, and scale each candidate's price per byte by a random factor in
# SEARCH_JITTER: on the layered family at 80% of its peak, remat, the four covers failed on 7 of 60
# 250-node seeds (11, 19, 28, 39, 42, 52, 57), and every greedy rule on 6 of those; randomized covers alone
# fitted 5 of the 7 within 15 s (4 within 0.6 s; not 39 and 57 in 30 s).
SEARCH_DEPTHS = (1, 2, 3, 5, 8)
SEARCH_SIZES = (1, 3, 6, 12, 30, 60)
SEARCH_JITTER = (0.3, 3.0)


def _cover(
    g: CostedGraph,
    cap: int,
    deadline_s: float | None,
    out_of_time,
    depth: int,
    max_nodes: int,
    strict: bool,
    jitter: random.Random | None = None,
) -> Plan | None:
    n, mem, nd = len(g.nodes), g.ram, g.nodes
    uses = [[x, *g.succs[x]] for x in range(n)]  # the stage computing x, then its readers
    last = [u[-1] for u in uses]
    # RAM at stage t: fixed, every tensor carried into t (made before t, used at t or later), and t's output
    delta = [0] * (n + 1)
    for x in range(n):
        if last[x] > x:
            delta[x + 1] += mem[x]
            delta[last[x] + 1] -= mem[x]
    ram, cur = [0] * n, g.fixed_ram_bytes
    for t in range(n):
        cur += delta[t]
        ram[t] = cur + mem[t]
    gaps: dict[int, list[tuple[int, int]]] = {}  # tensor -> [(a, b)]: absent in stages a+1 .. b-1
    needed_at: dict[int, set[int]] = {}  # tensor -> stages where a recomputation reads it
    recomputed: dict[int, set[int]] = {}  # stage -> tensors recomputed there
    runtime = g.plain_runtime_s

    def absent(x: int, t: int) -> bool:
        gx = gaps.get(x)
        return gx is not None and any(a < t < b for a, b in gx)

    def closure(x: int, b: int) -> list[int] | None:
        """What recomputing x in stage b computes: x, and the inputs not in RAM then, up to
        ``depth`` inputs deep and ``max_nodes`` nodes (None beyond)."""
        out, seen, frontier = [x], {x}, [x]
        for _depth in range(depth):
            nxt = []
            for v in frontier:
                for p in g.preds[v]:
                    if p not in seen and (last[p] < b or (p in gaps and absent(p, b))):
                        seen.add(p)
                        nxt.append(p)
            if not nxt:
                return out
            out += nxt
            if len(out) > max_nodes:
                return None
            frontier = nxt
        return None

    live_at: dict[int, list[int]] = {}  # stage -> tensors made before it and used after it
    t = max(range(n), key=ram.__getitem__)
    while ram[t] > cap:
        if out_of_time():
            return None
        best, best_key = None, None
        spans = []  # (x's own energy per byte: a closure's least, x, a, b)
        if t not in live_at:
            live_at[t] = [x for x in range(t) if last[x] > t and mem[x] > 0]
        for x in live_at[t]:
            if x in gaps and absent(x, t):
                continue
            u = uses[x]
            k = bisect_right(u, t)
            a, b = u[k - 1], u[k]
            if a == t:
                continue  # read at t: no gap spans it
            if any(a < s < b for s in needed_at.get(x, ())):
                continue  # another recomputation reads x inside the gap
            spans.append((nd[x].compute_energy_j / mem[x], x, a, b))
        spans.sort()
        for least, x, a, b in spans:
            if jitter is None and best_key is not None and least > best_key[0]:
                break  # no closure from here on can be cheaper per byte
            c = closure(x, b)
            if c is None:
                continue
            extra_ram = sum(mem[v] for v in c[1:] if v not in recomputed.get(b, ()))
            if strict and extra_ram and ram[b] + extra_ram > cap:
                continue  # it would push the stage that recomputes it over the budget
            extra_t = math.fsum(nd[v].compute_time_s for v in c)
            if deadline_s is not None and runtime + extra_t > deadline_s:
                continue
            price = math.fsum(nd[v].compute_energy_j for v in c) / mem[x]
            if jitter is not None:
                price *= jitter.uniform(*SEARCH_JITTER)
            key = (price, len(c), -(b - a))
            if best_key is None or key < best_key:
                best, best_key = (x, a, b, c, extra_t), key
        if best is None:
            return None
        x, a, b, c, extra_t = best
        gaps.setdefault(x, []).append((a, b))
        at_b = recomputed.setdefault(b, set())
        for v in c:
            if v not in at_b:
                at_b.add(v)
                if v != x:
                    ram[b] += mem[v]  # brought back for x in stage b only (counted as held at its peak)
            for p in g.preds[v]:
                if p not in c:
                    needed_at.setdefault(p, set()).add(b)
        runtime += extra_t
        for s in range(a + 1, b):
            ram[s] -= mem[x]
        t = max(range(n), key=ram.__getitem__)
    plan = Plan.empty(n)
    for t in range(n):
        plan.comp[t] = sorted(recomputed.get(t, ())) + [t]
    for x in range(n):
        start = x + 1
        for a, b in sorted(gaps.get(x, ())) + [(last[x], last[x] + 1)]:
            for t in range(start, a + 1):  # absent in a+1 .. b, recomputed in stage b, kept after
                plan.keep[t].add(x)
            start = b + 1
    return plan


def gap_drop_plan(g: CostedGraph, budget: Budget, *, time_limit: float | None = None, stop=None) -> Plan | None:
    """The cheapest recomputation-only plan of the covers (``VARIANTS``) within the RAM budget and the
    deadline, if any, replayed by the validator; None when none fits (or time ran out first).

    ``stop`` ends the covers after the first: that one runs to its end (or ``time_limit``), since its
    plan is what a stop returns when nothing else is held (it takes seconds on 1,000 nodes)."""
    t_end = None if time_limit is None else time.perf_counter() + time_limit

    def out_of_time() -> bool:
        return t_end is not None and time.perf_counter() > t_end

    def out_of_time_or_stopped() -> bool:
        return out_of_time() or (stop is not None and bool(stop()))

    best, best_e = None, math.inf
    for k, (depth, max_nodes, strict) in enumerate(VARIANTS):
        if (out_of_time_or_stopped if k else out_of_time)():
            break
        plan = _fitted(
            g, budget, out_of_time_or_stopped if k or best is not None else out_of_time, depth, max_nodes, strict
        )
        if plan is not None:
            e = plan_costs(g, plan, budget.paging_time)[0]
            if e < best_e:
                best, best_e = plan, e
    return best


@dataclass(frozen=True)
class GapDropSearch:
    """What :func:`gap_drop_search` found: the first plan that fitted (None: none in its time), after how
    many randomized covers."""

    plan: Plan | None
    tries: int


def gap_drop_search(
    g: CostedGraph, budget: Budget, rnd: random.Random, *, time_limit: float, stop=None, clock=time.perf_counter
) -> GapDropSearch:
    """Randomized covers (``SEARCH_DEPTHS``, ``SEARCH_SIZES``, ``SEARCH_JITTER``) until one fits the budgets,
    ``time_limit`` seconds pass or ``stop()`` is true: for a solve that holds no schedule yet, where the
    covers of :func:`gap_drop_plan` and the greedy rules failed.  ``rnd`` draws every choice: a search
    resumed with the same generator goes on where it stopped."""
    t_end = clock() + time_limit

    def out_of_time() -> bool:
        return clock() > t_end or (stop is not None and bool(stop()))

    tries = 0
    while not out_of_time():
        tries += 1
        depth, max_nodes, strict = rnd.choice(SEARCH_DEPTHS), rnd.choice(SEARCH_SIZES), rnd.random() < 0.5
        plan = _fitted(g, budget, out_of_time, depth, max_nodes, strict, jitter=rnd)
        if plan is not None:
            return GapDropSearch(plan, tries)
    return GapDropSearch(None, tries)


def _fitted(
    g: CostedGraph,
    budget: Budget,
    out_of_time,
    depth: int,
    max_nodes: int,
    strict: bool,
    jitter: random.Random | None = None,
) -> Plan | None:
    """One cover's plan, replayed; redone against a lower cap while the replay's peak is over the budget."""
    cap = ram_cap(budget.ram_bytes)
    free = Budget(10**30, None, budget.paging_time)
    for _ in range(RETRIES):
        plan = _cover(g, cap, budget.runtime_s, out_of_time, depth, max_nodes, strict, jitter)
        if plan is None:
            return None
        try:
            steps = emit(g, plan)
            peak = simulate(g, steps, free).totals.peak_ram_bytes
            if peak <= budget.ram_bytes:
                if budget.runtime_s is not None and plan_costs(g, plan, budget.paging_time)[1] > budget.runtime_s:
                    return None
                simulate(g, steps, budget)
                plan.rule = None  # no greedy rule re-makes it: a guide search cannot start from it
                return plan
        except (ScheduleError, SolveError):
            return None
        cap -= max(1, peak - budget.ram_bytes)
        if cap <= 0:
            return None
    return None
