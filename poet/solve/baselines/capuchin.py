"""A Capuchin-style greedy baseline: per evicted tensor, swap or recompute.

Capuchin (Peng et al., ASPLOS 2020) watches the tensor access sequence of a
training iteration and, while memory is short, evicts tensors across the
long idle gaps between two accesses.  For each candidate it weighs the two
ways of getting the tensor back -- swapping (page out after the access that
opens the gap, page in before the access that closes it) or recomputing it
from resident ancestors -- and keeps the cheaper one.

This module adapts that policy to POET's setting (energy objective, RAM and
deadline budgets, the validator's instruction list):

1. Start from plain backprop (every output freed after its last reader).  The
   access sequence of tensor ``i`` is its own compute stage and the stages of
   its readers; every pair of consecutive accesses ``(a, b)`` with ``b > a + 1``
   is an eviction candidate: RAM is relieved in the stages strictly between.
2. Replay the current plan, find the stages whose RAM exceeds the budget, and
   price every candidate gap that covers one of them both ways: swapping
   (page-out + page-in energy; only a page-in if the tensor already has a copy
   on storage) and recomputation (the compute energy of the tensor and of every
   ancestor that is neither resident nor on storage at stage ``b``, ancestors on
   storage being paged in).  The cheaper option that keeps the deadline wins
   (times are judged under the budget's paging model: serial adds paging time,
   overlap charges each stage max(compute, paging), hidden ignores it).
3. Take the candidate with the most memory relief per joule (bytes times the
   number of over-budget stages it relieves, divided by its energy), re-emit
   and replay; undo and ban an option that breaks the deadline.  Repeat until
   the replayed peak fits, or report ``infeasible`` when no candidate is left.

The result is a fixed-rule schedule: status ``heuristic``, no optimality claim (the
``capuchin`` strategy, :mod:`poet.solve.strategies.capuchin`, judges it against the budgets).
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, PAGING_OVERLAP, Budget, Op, Step
from ...schedule.validate import simulate

SWAP = "swap"
RECOMPUTE = "recompute"


class _Plan:
    """Eviction decisions and the instruction list they produce."""

    def __init__(self, g: CostedGraph):
        self.g = g
        n = len(g.nodes)
        self.access = [[i, *sorted(g.succs[i])] for i in range(n)]
        self.last_use = [a[-1] for a in self.access]
        # (i, a) -> (b, method): i leaves RAM after stage a and is back at the start of stage b
        self.decisions: dict[tuple[int, int], tuple[int, str]] = {}
        self.by_node: dict[int, list[tuple[int, int, str]]] = defaultdict(list)

    def decide(self, i: int, a: int, b: int, method: str):
        self.decisions[(i, a)] = (b, method)
        self.by_node[i].append((a, b, method))

    def undo(self, i: int, a: int):
        del self.decisions[(i, a)]
        self.by_node[i] = [x for x in self.by_node[i] if x[0] != a]

    # -- residency model used to price recomputation --------------------------
    def stored_before(self, p: int, t: int) -> bool:
        return any(a < t and m == SWAP for a, _b, m in self.by_node.get(p, ()))

    def resident_at(self, p: int, t: int, before: int) -> bool:
        """p in RAM when node ``before`` is brought back at the start of stage t."""
        if p >= t or self.last_use[p] < t:
            return False
        for a, b, _m in self.by_node.get(p, ()):
            if a < t < b:
                return False
            if b == t:
                return p < before  # returns at t, in ascending order
        return True

    def recompute_cost(self, i: int, t: int) -> tuple[float, float, int]:
        """(energy, compute time, paging time) of recomputing i at stage t from what is at hand."""
        nodes = self.g.nodes
        seen: set[int] = set()
        e = tc = tp = 0.0

        # depth first, inputs before their readers, without recursion (a chain thousands deep)
        stack = [(i, iter(self.g.preds[i]))]
        while stack:
            x, inputs = stack[-1]
            for p in inputs:
                if p in seen or self.resident_at(p, t, i):
                    continue
                seen.add(p)
                if self.stored_before(p, t):
                    e += nodes[p].pagein_energy_j
                    tp += nodes[p].pagein_time_s
                else:
                    stack.append((p, iter(self.g.preds[p])))
                    break
            else:
                stack.pop()
                if stack:
                    e += nodes[x].compute_energy_j
                    tc += nodes[x].compute_time_s
        e += nodes[i].compute_energy_j
        tc += nodes[i].compute_time_s
        return e, tc, tp

    def swap_cost(self, i: int, a: int) -> tuple[float, float, float, float]:
        """(energy, page-out time at a, page-in time at b, 0) of swapping i over a gap opened at a."""
        nd = self.g.nodes[i]
        out_needed = not self.stored_before(i, a + 1)
        e = nd.pagein_energy_j + (nd.pageout_energy_j if out_needed else 0.0)
        return e, (nd.pageout_time_s if out_needed else 0.0), nd.pagein_time_s

    # -- emission --------------------------------------------------------------
    def steps(self) -> list[Step]:
        g = self.g
        n = len(g.nodes)
        returns: dict[int, list[tuple[int, str]]] = defaultdict(list)
        evicts: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for (i, a), (b, m) in self.decisions.items():
            returns[b].append((i, m))
            evicts[a].append((i, m))
        resident: set[int] = set()
        stored: set[int] = set()
        out: list[Step] = []
        # (last use, tensor) of every tensor put in RAM: what to free after each stage is found here, not
        # by scanning what is resident (that made each replay quadratic: 50 s on a 20,000-node chain)
        ending: list[tuple[int, int]] = []
        last_use = self.last_use

        def put(x: int):
            resident.add(x)
            heapq.heappush(ending, (last_use[x], x))

        def temp_back(x: int, k: int):
            """Bring x back only for the recomputation at hand; the caller frees it."""
            if x in stored:
                out.append(Step(Op.PAGE_IN, x, k))
                put(x)
            else:
                recompute(x, k)

        def recompute(x: int, k: int):
            temps = []
            for p in g.preds[x]:
                if p not in resident:
                    temp_back(p, k)
                    temps.append(p)
            out.append(Step(Op.COMPUTE, x, k))
            put(x)
            for p in temps:
                resident.discard(p)
                out.append(Step(Op.FREE, p, k))

        for k in range(n):
            for i, m in sorted(returns[k]):
                if i in resident:
                    continue  # already brought back as a temporary's neighbour (cannot happen in order)
                if m == SWAP:
                    out.append(Step(Op.PAGE_IN, i, k))
                    put(i)
                else:
                    recompute(i, k)
            for p in g.preds[k]:
                if p not in resident:  # defensive: plan inconsistency, fetch it anyway
                    temp_back(p, k)
            out.append(Step(Op.COMPUTE, k, k))
            put(k)
            for i, m in sorted(evicts[k]):
                if i not in resident:
                    continue
                if m == SWAP and i not in stored:
                    out.append(Step(Op.PAGE_OUT, i, k))
                    stored.add(i)
                resident.discard(i)
                out.append(Step(Op.FREE, i, k))
            done = set()
            while ending and ending[0][0] <= k:
                i = heapq.heappop(ending)[1]
                if i in resident:
                    done.add(i)
            for i in sorted(done):
                resident.discard(i)
                out.append(Step(Op.FREE, i, k))
        return out


def _stage_profile(steps: list[Step], trace: list[int]) -> dict[int, int]:
    peak: dict[int, int] = {}
    for s, r in zip(steps, trace):
        peak[s.stage] = max(peak.get(s.stage, 0), r)
    return peak


def _stage_times(g: CostedGraph, steps: list[Step]) -> tuple[dict, dict]:
    comp: dict[int, float] = defaultdict(float)
    page: dict[int, float] = defaultdict(float)
    for s in steps:
        nd = g.nodes[s.node]
        if s.op == Op.COMPUTE:
            comp[s.stage] += nd.compute_time_s
        elif s.op == Op.PAGE_IN:
            page[s.stage] += nd.pagein_time_s
        elif s.op == Op.PAGE_OUT:
            page[s.stage] += nd.pageout_time_s
    return comp, page


def _delta_time(mode: str, comp, page, adds: list[tuple[int, float, float]]) -> float:
    """Runtime increase of adding (stage, compute s, paging s) amounts."""
    if mode == PAGING_HIDDEN:
        return sum(c for _t, c, _p in adds)
    if mode != PAGING_OVERLAP:
        return sum(c + p for _t, c, p in adds)
    d = 0.0
    per: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for t, c, p in adds:
        per[t][0] += c
        per[t][1] += p
    for t, (c, p) in per.items():
        d += max(comp[t] + c, page[t] + p) - max(comp[t], page[t])
    return d


@dataclass(frozen=True)
class CapuchinResult:
    """The heuristic's steps (they may not fit the budgets: the caller judges them) and what it did."""

    steps: tuple[Step, ...]
    evictions: int
    swap_evictions: int
    recompute_evictions: int
    reverted: int  # evictions undone because they broke the deadline
    rounds: int
    candidates: int  # the idle gaps it could evict across
    stopped: str | None  # why it stopped before its peak fit ("time limit (...)", "stop request"), if it did

    def facts(self) -> dict:
        """Its facts as the report gives them (``stopped`` only when it stopped)."""
        out = {
            "evictions": self.evictions,
            "swap_evictions": self.swap_evictions,
            "recompute_evictions": self.recompute_evictions,
            "reverted": self.reverted,
            "rounds": self.rounds,
            "candidates": self.candidates,
        }
        if self.stopped:
            out["stopped"] = self.stopped
        return out


def eviction_candidates(g: CostedGraph, plan: _Plan) -> list[tuple[int, int, int]]:
    """(tensor, access a, next access b) of every idle gap worth evicting across: b > a + 1, bytes > 0."""
    return [
        (i, acc[j], acc[j + 1])
        for i, acc in enumerate(plan.access)
        for j in range(len(acc) - 1)
        if acc[j + 1] > acc[j] + 1 and g.nodes[i].ram_bytes > 0
    ]


def out_of_time_check(t0: float, time_limit: float | None, stop):
    """A function saying why to stop now (the time limit since ``t0``, or a stop request), or None."""

    def out_of_time() -> str | None:
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            return f"time limit ({time_limit:.3g} s)"
        if stop is not None and stop():
            return "stop request"
        return None

    return out_of_time


def capuchin_plan(
    g: CostedGraph, budget: Budget, max_rounds: int | None = None, time_limit: float | None = None, stop=None
) -> CapuchinResult:
    """Greedy swap-or-recompute evictions until the replayed peak fits (or nothing is left).

    Each round replays the whole plan, so the work grows about as the cube of the graph's size
    (3.5 s on 658 nodes, 41 s on 1,618); past ``time_limit`` seconds, or once ``stop()`` is true,
    it stops where it is (within a round, which takes seconds on a dense 1,000-node DAG) and says
    so (``stopped``).
    """
    t0 = time.perf_counter()
    plan = _Plan(g)
    nob = Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)
    deadline = budget.runtime_s
    mode = budget.paging_time
    cands = eviction_candidates(g, plan)
    banned: set[tuple[int, int, str]] = set()
    steps = plan.steps()
    rep = simulate(g, steps, nob)
    rounds = swaps = recomputes = reverted = 0
    limit = max_rounds if max_rounds is not None else 4 * len(cands) + 10
    stopped = None
    out_of_time = out_of_time_check(t0, time_limit, stop)

    while rounds < limit:
        rounds += 1
        prof = _stage_profile(steps, rep.ram_after_step)
        over = sorted(t for t, r in prof.items() if r > budget.ram_bytes)
        if not over:
            break
        stopped = out_of_time()
        if stopped:
            break
        comp, page = _stage_times(g, steps)
        runtime = rep.totals.runtime_s
        best = None
        for k, (i, a, b) in enumerate(cands):
            if k % 64 == 63 and (stopped := out_of_time()):
                break
            if (i, a) in plan.decisions:
                continue
            relieved = bisect_left(over, b) - bisect_right(over, a)  # over-budget stages strictly inside
            if not relieved:
                continue
            options = []
            if (i, a, SWAP) not in banned:
                e, t_out, t_in = plan.swap_cost(i, a)
                dt = _delta_time(mode, comp, page, [(a, 0.0, t_out), (b, 0.0, t_in)])
                options.append((e, dt, SWAP))
            if (i, a, RECOMPUTE) not in banned:
                e, tc, tp = plan.recompute_cost(i, b)
                dt = _delta_time(mode, comp, page, [(b, tc, tp)])
                options.append((e, dt, RECOMPUTE))
            if deadline is not None:
                options = [o for o in options if runtime + o[1] <= deadline * (1 + 1e-6)]
            if not options:
                continue
            e, dt, m = min(options)
            score = g.nodes[i].ram_bytes * relieved / max(e, 1e-30)
            key = (score, b - a, -i)
            if best is None or key > best[0]:
                best = (key, i, a, b, m)
        if best is None or stopped:
            break
        _k, i, a, b, m = best
        plan.decide(i, a, b, m)
        new_steps = plan.steps()
        new_rep = simulate(g, new_steps, nob)
        if deadline is not None and new_rep.totals.runtime_s > deadline * (1 + 1e-6):
            plan.undo(i, a)
            banned.add((i, a, m))
            reverted += 1
            continue
        steps, rep = new_steps, new_rep
        if m == SWAP:
            swaps += 1
        else:
            recomputes += 1
    return CapuchinResult(
        tuple(steps), len(plan.decisions), swaps, recomputes, reverted, rounds, len(cands), stopped or None
    )


# The published policy (:mod:`.capuchin_paper`) replays its plans with the same machinery.
EvictionPlan = _Plan
stage_profile = _stage_profile
stage_times = _stage_times
delta_time = _delta_time
