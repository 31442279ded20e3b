"""The ``capuchin-paper`` strategy: Capuchin's published hybrid policy, judged against the budgets."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import HEURISTIC, NO_SOLUTION, Budget, Schedule
from ...units import fmt_bytes
from ..baselines.capuchin_paper import capuchin_paper_plan
from ..baselines.keep_all import judged

DESCRIPTION = "Capuchin as published (Peng et al. 2020): free swaps first, then by memory saved per second, time only"


def solve_capuchin_paper(g: CostedGraph, budget: Budget, opts) -> Schedule:
    steps, info = capuchin_paper_plan(g, budget, time_limit=opts.time_limit_s, stop=opts.stop)
    info["message"] = (
        f"{info['evictions']} evictions ({info['swap_evictions']} swapped, {info['recompute_evictions']} recomputed)"
    )
    s = judged(g, budget, steps, "capuchin-paper", HEURISTIC, info)
    if not s.steps and info.get("stopped"):
        peak = s.report.strategy_facts["strategy_peak_ram_bytes"]
        msg = (
            f"capuchin-paper stopped at its {info['stopped']} after {info['evictions']} evictions, before its "
            f"schedule fit (it needs {fmt_bytes(peak)} of RAM, budget {fmt_bytes(budget.ram_bytes)})"
        )
        return s.with_(status=NO_SOLUTION, report=s.report.with_(message=msg))
    return s
