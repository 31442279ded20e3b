"""The ``capuchin`` strategy: the Capuchin-style swap-or-recompute heuristic, judged against the budgets."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import HEURISTIC, NO_SOLUTION, Budget, Schedule
from ...units import fmt_bytes, fmt_seconds
from ..baselines.capuchin import capuchin_plan
from ..baselines.keep_all import judged

DESCRIPTION = "Capuchin-style greedy: evict across idle gaps, per tensor swap or recompute, cheaper wins"


def solve_capuchin(g: CostedGraph, budget: Budget, opts) -> Schedule:
    found = capuchin_plan(g, budget, time_limit=opts.time_limit_s, stop=opts.stop)
    s = judged(g, budget, list(found.steps), "capuchin", HEURISTIC, found.facts())
    facts = s.report.strategy_facts
    if not s.steps and found.stopped:
        # stopped before the peak fit: nothing is proven, and the unfinished plan is not returned
        rep = s.report.with_(
            message=(
                f"capuchin stopped at its {found.stopped} after {found.evictions} evictions, before its schedule "
                f"fit (it needs {fmt_bytes(facts['strategy_peak_ram_bytes'])} of RAM, budget "
                f"{fmt_bytes(budget.ram_bytes)}); a longer time limit may help"
            )
        )
        return Schedule(graph=g, budget=budget, steps=(), status=NO_SOLUTION, strategy="capuchin", report=rep)
    if s.steps:  # judged() leaves its own message on an infeasible result
        s.report = s.report.with_(
            message=(
                f"{found.evictions} evictions ({found.swap_evictions} swapped, {found.recompute_evictions} "
                f"recomputed); peak {fmt_bytes(facts['strategy_peak_ram_bytes'])}, runtime "
                f"{fmt_seconds(facts['strategy_runtime_s'])}"
            )
        )
    return s
