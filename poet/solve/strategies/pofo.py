"""The ``pofo`` strategy: POFO's dynamic program for chains (Beaumont et al., NeurIPS 2021).

It minimises the iteration's time (as published), energy breaking ties, at the RAM budget, and
is then judged against the deadline like every fixed baseline.  A graph that is not a chain is
refused as ``infeasible``, naming the first node that breaks the chain.
"""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import HEURISTIC, INFEASIBLE, NO_SOLUTION, Budget, Schedule
from ...schedule.report import SolveReport
from ...units import fmt_bytes
from ..baselines.chain import NotAChain
from ..baselines.keep_all import judged
from ..baselines.pofo import PofoStopped, pofo_plan

DESCRIPTION = "POFO (Beaumont et al. 2021): dynamic program over remat and offload on a chain, fastest schedule"


def _refused(g: CostedGraph, budget: Budget, status: str, message: str) -> Schedule:
    return Schedule(
        graph=g,
        budget=budget,
        steps=(),
        status=status,
        strategy="pofo",
        report=SolveReport(method="pofo", message=message),
    )


def solve_pofo(g: CostedGraph, budget: Budget, opts) -> Schedule:
    try:
        plan = pofo_plan(
            g,
            budget.ram_bytes,
            objective="time",
            paging_time=budget.paging_time,
            time_limit=opts.time_limit_s,
            stop=opts.stop,
        )
    except NotAChain as e:
        return _refused(g, budget, INFEASIBLE, f"not a chain: {e}")
    except PofoStopped as e:
        return _refused(g, budget, NO_SOLUTION, f"pofo stopped at its {e} before its tables were complete")
    resolution = "" if plan.exact else f" (sizes rounded up to {fmt_bytes(plan.slot_bytes)} slots)"
    if not plan.steps:
        return _refused(
            g,
            budget,
            INFEASIBLE,
            f"POFO's program has no schedule within {fmt_bytes(budget.ram_bytes)}{resolution}",
        )
    info = {
        "message": f"POFO's fastest schedule{resolution}",
        "slot_bytes": plan.slot_bytes,
        "slots": plan.slots,
        "exact": plan.exact,
    }
    return judged(g, budget, list(plan.steps), "pofo", HEURISTIC, info)
