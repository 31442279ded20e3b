"""Capuchin's hybrid policy as published (Peng et al., ASPLOS 2020), on POET's instruction list.

Capuchin minimises *time*: it evicts tensors across the idle gaps between two accesses until the
peak fits, and knows no energy and no deadline.  Its hybrid policy (the paper's Sec. 4.3):

1. **Swap first, while it is free.**  Candidates are sorted by their *free time* (FT): the idle
   time of the gap left once the tensor's page-out and page-in are done.  In descending FT order,
   a swap is taken while it adds no time (FT >= 0 where paging overlaps compute; under POET's
   ``serial`` paging model no swap is ever free, under ``hidden`` every one is).
2. **Then by memory saving per second.**  While the peak still exceeds the budget, the candidate
   with the largest MSPS (bytes saved per second of recomputation, with the recomputation source
   re-derived from the current plan each round) is taken, and swapped or recomputed, whichever
   adds *less time*.

What the paper leaves open is filled as POET's own Capuchin-style variant fills it (the gaps are
between consecutive accesses, a gap counts only while it covers an over-budget stage, and the plan
is replayed after each choice).  The variant (:mod:`.capuchin`) differs by ranking candidates by
bytes relieved per *joule*, choosing swap or recompute by *energy*, and refusing choices that would
break the deadline; docs/paper.md compares the two.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, PAGING_OVERLAP, Budget, Step
from ...schedule.validate import simulate
from .capuchin import (
    RECOMPUTE,
    SWAP,
    EvictionPlan,
    delta_time,
    eviction_candidates,
    out_of_time_check,
    stage_profile,
    stage_times,
)


def _gap_compute_time(prefix: list[float], a: int, b: int) -> float:
    """Compute time of the stages strictly between a and b."""
    return prefix[b] - prefix[a + 1] if b > a + 1 else 0.0


def capuchin_paper_plan(
    g: CostedGraph, budget: Budget, time_limit: float | None = None, stop=None
) -> tuple[list[Step], dict]:
    """The published hybrid policy until the replayed peak fits (or no candidate is left)."""
    t0 = time.perf_counter()
    plan = EvictionPlan(g)
    nob = Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)
    mode = budget.paging_time
    nodes = g.nodes
    cands = eviction_candidates(g, plan)
    prefix = [0.0]
    for nd in nodes:
        prefix.append(prefix[-1] + nd.compute_time_s)

    def free_time(i: int, a: int, b: int) -> float:
        swap = nodes[i].pageout_time_s + nodes[i].pagein_time_s
        if mode == PAGING_HIDDEN:
            return float("inf")
        if mode != PAGING_OVERLAP:
            return -swap  # serial: paging never overlaps compute, no swap is free
        return _gap_compute_time(prefix, a, b) - swap

    steps = plan.steps()
    rep = simulate(g, steps, nob)
    stopped = None
    swaps = recomputes = 0

    def over_stages():
        prof = stage_profile(steps, rep.ram_after_step)
        return sorted(t for t, r in prof.items() if r > budget.ram_bytes)

    def relieves(over, a, b) -> bool:
        return bisect_left(over, b) - bisect_right(over, a) > 0

    out_of_time = out_of_time_check(t0, time_limit, stop)

    def take(i, a, b, m):
        nonlocal steps, rep, swaps, recomputes
        plan.decide(i, a, b, m)
        steps = plan.steps()
        rep = simulate(g, steps, nob)
        if m == SWAP:
            swaps += 1
        else:
            recomputes += 1

    # phase 1: free swaps, largest free time first
    for ft, i, a, b in sorted(((free_time(i, a, b), i, a, b) for i, a, b in cands), key=lambda x: (-x[0], x[1], x[2])):
        over = over_stages()
        if not over or ft < 0 or (stopped := out_of_time()):
            break
        if (i, a) not in plan.decisions and relieves(over, a, b):
            take(i, a, b, SWAP)
    # phase 2: by memory saving per second of recomputation; swap or recompute, whichever adds less time
    while not stopped:
        over = over_stages()
        if not over or (stopped := out_of_time()):
            break
        comp, page = stage_times(g, steps)
        best = None
        for k, (i, a, b) in enumerate(cands):
            if k % 64 == 63 and (stopped := out_of_time()):
                break
            if (i, a) in plan.decisions or not relieves(over, a, b):
                continue
            _e, tc, tp = plan.recompute_cost(i, b)
            t_re = delta_time(mode, comp, page, [(b, tc, tp)])
            _e, t_out, t_in = plan.swap_cost(i, a)
            t_sw = delta_time(mode, comp, page, [(a, 0.0, t_out), (b, 0.0, t_in)])
            msps = nodes[i].ram_bytes / max(tc, 1e-30)
            key = (msps, -i, -a)
            if best is None or key > best[0]:
                best = (key, i, a, b, SWAP if t_sw < t_re else RECOMPUTE)
        if best is None or stopped:
            break
        take(*best[1:])
    info = {"evictions": len(plan.decisions), "swap_evictions": swaps, "recompute_evictions": recomputes}
    if stopped:
        info["stopped"] = stopped
    return steps, info
