"""The ``capuchin`` strategy: the Capuchin-style swap-or-recompute heuristic, judged against the budgets."""
from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import HEURISTIC, NO_SOLUTION, Budget, Schedule
from ...units import fmt_bytes, fmt_seconds
from ..baselines.capuchin import capuchin_plan
from ..baselines.keep_all import judged

DESCRIPTION = "Capuchin-style greedy: evict across idle gaps, per tensor swap or recompute, cheaper wins"


def solve_capuchin(g: CostedGraph, budget: Budget, opts) -> Schedule:
    plan, steps, info = capuchin_plan(g, budget, time_limit=opts.time_limit_s)
    s = judged(g, budget, steps, "capuchin", HEURISTIC, info)
    if not s.steps and info.get("stopped"):
        # stopped before the peak fit: nothing is proven, and the unfinished plan is not returned
        sv = dict(s.solver)
        sv["message"] = (f"capuchin stopped at its {info['stopped']} after {info['evictions']} evictions, "
                         f"before its schedule fit (it needs {fmt_bytes(sv['strategy_peak_ram_bytes'])} of RAM, "
                         f"budget {fmt_bytes(budget.ram_bytes)}); a longer time limit may help")
        return Schedule(graph=g, budget=budget, steps=(), status=NO_SOLUTION, strategy="capuchin", solver=sv)
    if s.steps:   # judged() leaves its own message on an infeasible result
        sv = s.solver
        sv["message"] = (f"{info['evictions']} evictions ({info['swap_evictions']} swapped, "
                         f"{info['recompute_evictions']} recomputed); peak {fmt_bytes(sv['strategy_peak_ram_bytes'])}, "
                         f"runtime {fmt_seconds(sv['strategy_runtime_s'])}")
    return s
