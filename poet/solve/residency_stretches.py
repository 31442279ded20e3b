"""The residency bound stretch by stretch: a lower bound on graphs whose whole residency ILP is too large.

The residency ILP (:mod:`poet.solve.residency_bound`) grows with the moments times the tensors alive
across each: resnet18_cifar at 32 KiB on the ``m4`` (2,922 nodes) needs 60.8 million nonzeros, which
HiGHS cannot even presolve in the time a solve has.  Here the moments are cut into *stretches*
``[b_k, b_k+1]`` (consecutive stretches share their boundary moment; every gap is in exactly one) and the
ILP of each stretch is solved on its own (``ResidencyILP(span=...)``).

**The argument.**  A stretch's ILP is the whole ILP's rows on its moments and gaps, with four
relaxations, each of which only drops or weakens rows:

* a tensor may be absent for free once past its last reader *in the stretch* (it is left out of the RAM
  rows from there, which is the same as letting it be absent at no cost): its later readers are later
  stretches', which price its restoration;
* at the stretch's first moment any tensor may be absent, and one held for a recomputation there needs
  no history (only its RAM at that moment);
* each tensor's page-out is priced in one stretch only, the one holding the gap just before its last
  reader (its page-ins elsewhere cost their page-in alone);
* the deadline row bounds the stretch's restorations alone (a part of the whole schedule's).

So the columns of any stage-form schedule, read off within one stretch, meet that stretch's rows at a
cost of that stretch's share of its extra energy: the page-ins and recomputations of its gaps, and the
page-outs it prices.  The shares add up to at most the schedule's extra energy (every gap and every
page-out is in one stretch), so the sum of the stretches' proven dual bounds is a lower bound on every
stage-form schedule, as the whole ILP's is.  A stretch left unsolved (time ran out) counts 0, which
keeps it valid.  What is lost is the coupling between stretches: what is resident where one ends.
Measured in docs/tiling.md ("The residency bound stretch by stretch").
"""

from __future__ import annotations

import bisect
import math
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

from ..graph.core import CostedGraph
from ..schedule.core import Budget
from .lp.bound_process import dual_bound
from .lp.highs import solve_highs
from .residency_bound import ResidencyILP, last_readers_by, proven_extra

STRETCH = 100  # moments per stretch


@dataclass(frozen=True)
class StretchedBound:
    """The bound on the energy (None: no stretch gave one; ``inf``: a stretch has no schedule), in how many
    stretches the moments were cut, how many gave a bound (the rest count 0), the largest stretch's ILP
    and the wall seconds."""

    bound: float | None
    stretches: int
    solved: int
    max_nonzeros: int
    seconds: float
    ended: str  # "solved" (every stretch ran), "time limit" or "stopped"


def stretches_of(n: int, size: int) -> list[tuple[int, int]]:
    """The moments 0..n-1 cut into stretches of ``size`` gaps, as (first, last) moments."""
    if size < 1:
        raise ValueError(f"a stretch must hold at least one gap, got {size}")
    cuts = list(range(0, max(n - 1, 0), size)) + [max(n - 1, 0)]
    return list(zip(cuts[:-1], cuts[1:]))


def stretched_residency_bound(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float | None = 60.0,
    size: int = STRETCH,
    max_depth: int = 8,
    stop=None,
    workers: int = 1,
    child_past: int | None = None,
    progress=None,
    clock=time.perf_counter,
) -> StretchedBound:
    """The bound of the module docstring.  Each stretch gets a share of the time left in proportion to its
    size (:func:`stretch_weights`) among the stretches still to solve.  With ``workers`` > 1 that many are
    solved at once, each in a child process (:mod:`~poet.solve.lp.bound_process`), while the next ILP is
    built; with one, a stretch's ILP of more than ``child_past`` nonzeros goes to a child process (so the
    time limit and ``stop`` hold while HiGHS presolves), a smaller one is solved here.  ``progress`` is told
    each stretch as it starts."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    t_start = clock()
    spans = stretches_of(len(g.nodes), size)
    homes = page_out_homes(g, spans)
    weight = stretch_weights(g, spans)
    run = _Stretches(stop)
    with ThreadPoolExecutor(max_workers=workers) as pool:

        def left() -> float | None:
            return None if time_limit is None else time_limit - (clock() - t_start)

        for k, span in enumerate(spans):
            if run.halted(left()):
                break
            if progress is not None:
                progress(f"residency bound, stretch {k + 1} of {len(spans)} (moments {span[0]}-{span[1]})")
            ilp = ResidencyILP(g, budget, remat=remat, paging=paging, max_depth=max_depth, span=span, charged=homes[k])
            if not ilp.build(math.inf, stop):  # built while the stretches before it are solved
                run.ended = "stopped"
                break
            p = ilp.b.problem()
            run.widest = max(run.widest, p.num_nonzeros)
            if p.num_rows == 0:
                run.solved += 1
                continue
            while len(run.pending) >= workers and not run.over():
                run.collect(wait_s=0.2)
            now = left()
            if run.halted(now):
                break
            # the time left, spread over the stretches still to solve by their size (on `workers` cores)
            share = None if now is None else min(now, now * workers * weight[k] / sum(weight[k:]))
            if workers > 1 or (child_past is not None and p.num_nonzeros > child_past and share is not None):
                limit = 1e9 if share is None else share
                run.pending.add(pool.submit(_in_child, p, limit, stop, ilp.unit))
            else:
                r = solve_highs(p, time_limit=share, gap=1e-6, stop=stop, options=BOUND_OPTIONS)
                run.add(r.status == "infeasible", r.bound, ilp.unit)
        while run.pending:
            run.collect(wait_s=None)
    if stop is not None and stop() and run.ended == "solved":
        run.ended = "stopped"
    bound = math.inf if run.infeasible else (g.plain_energy_j + run.total if run.solved else None)
    return StretchedBound(bound, len(spans), run.solved, run.widest, clock() - t_start, run.ended)


def page_out_homes(g: CostedGraph, spans: list[tuple[int, int]]) -> list[frozenset[int]]:
    """Per stretch, the tensors whose page-out it prices: those whose last reader follows one of its gaps."""
    first = [a for a, _ in spans]
    homes: list[set[int]] = [set() for _ in spans]
    for p, r in enumerate(g.last_reader):
        if r > p:
            homes[max(0, bisect.bisect_right(first, r - 1) - 1)].add(p)
    return [frozenset(h) for h in homes]


def stretch_weights(g: CostedGraph, spans: list[tuple[int, int]]) -> list[int]:
    """Per stretch, the moments its tensors are alive in it, summed (what its ILP grows with), at least 1."""
    out = []
    for t0, t1 in spans:
        last = last_readers_by(g, t1)
        out.append(max(1, sum(last[q] - max(q + 1, t0) for q in range(t1) if last[q] > max(q, t0))))
    return out


# HiGHS for a stretch's bound: no presolve, no primal heuristics (on resnet18_cifar at 32 KiB a
# backward stretch of 1.35M nonzeros proves 88.4 mJ in 11 s so, 75.5 mJ in 14 s with them; its LP
# relaxation 68.8 mJ in 6 s)
BOUND_OPTIONS = {"presolve": "off", "mip_heuristic_effort": 0.0}


def _in_child(p, limit: float, stop, unit: float):
    r = dual_bound(p, time_limit=limit, stop=stop, lp_first=True, options=BOUND_OPTIONS)
    return r.infeasible, r.bound, unit


class _Stretches:
    """The bounds summed so far, and the solves still running."""

    def __init__(self, stop):
        self.stop, self.total, self.solved, self.widest = stop, 0.0, 0, 0
        self.infeasible, self.ended = False, "solved"
        self.pending: set = set()

    def over(self) -> bool:
        if self.stop is not None and self.stop():
            self.ended = "stopped"
        return self.infeasible or self.ended == "stopped"

    def halted(self, left: float | None) -> bool:
        """Stopped, a stretch without schedules, or ``left`` seconds (None: no limit) used up; ``ended`` says
        which."""
        if self.over():
            return True
        if left is not None and left <= 0:
            self.ended = "time limit"
            return True
        return False

    def add(self, infeasible: bool, bound: float | None, unit: float) -> None:
        if infeasible:
            self.infeasible = True  # no stage-form schedule: nor of the whole graph
        elif bound is not None and math.isfinite(bound):
            self.total += proven_extra(bound) * unit
            self.solved += 1

    def collect(self, wait_s: float | None) -> None:
        done, self.pending = wait(self.pending, timeout=wait_s, return_when=FIRST_COMPLETED)
        for f in done:
            self.add(*f.result())
