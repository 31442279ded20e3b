"""The ``chen`` strategy: the cheapest of Chen et al.'s checkpoint plans that meets the budgets."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import HEURISTIC, Budget, Schedule
from ...schedule.report import MinBudgets
from ...schedule.validate import simulate
from ...units import fmt_seconds
from ..baselines.chen import chen_plans, segment_steps
from ..baselines.keep_all import judged

DESCRIPTION = "Chen et al. 2016: segment checkpointing (sqrt(n) and memory-greedy plans), segments recomputed"


def solve_chen(g: CostedGraph, budget: Budget, opts) -> Schedule:
    """Among Chen's checkpoint plans, the least-energy one that meets the budgets.

    Every plan is a fixed rule (no optimisation), so the status is
    ``heuristic``; when no plan fits, ``infeasible`` with the smallest peak
    and runtime any plan needs.
    """
    nob = Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)
    tried = []
    for name, cps in chen_plans(g).items():
        steps = segment_steps(g, cps)
        t = simulate(g, steps, nob).totals
        tried.append((name, cps, steps, t))
    fits = [
        x
        for x in tried
        if x[3].peak_ram_bytes <= budget.ram_bytes
        and (budget.runtime_s is None or x[3].runtime_s <= budget.runtime_s * (1 + 1e-6))
    ]
    if fits:
        name, cps, steps, t = min(fits, key=lambda x: (x[3].energy_j, x[3].peak_ram_bytes))
    else:
        name, cps, steps, t = min(tried, key=lambda x: (x[3].peak_ram_bytes, x[3].energy_j))
    info = {
        "checkpoints": cps,
        "plan": name,
        "plans_tried": len(tried),
        "message": f"{name}: {len(cps)} checkpoints",
        "min_plan_peak_ram_bytes": min(x[3].peak_ram_bytes for x in tried),
    }
    s = judged(g, budget, steps, "chen", HEURISTIC, info)
    if not s.steps and budget.runtime_s is not None:
        # the smallest RAM at which some plan also meets the deadline, if any plan does
        meets = [x[3].peak_ram_bytes for x in tried if x[3].runtime_s <= budget.runtime_s * (1 + 1e-6)]
        if meets:
            s.report = s.report.with_(min_budgets=MinBudgets(ram_bytes=min(meets)))
        else:
            fastest = min(x[3].runtime_s for x in tried)
            s.report = s.report.with_(
                min_budgets=MinBudgets(
                    ram_note=(
                        f"no RAM budget helps: none of chen's {len(tried)} plans meets this deadline "
                        f"(the fastest needs {fmt_seconds(fastest)}); "
                        f"give --runtime {fastest * (1 + 1e-6):.6g}s or more"
                    )
                )
            )
    return s
