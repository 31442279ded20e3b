"""The ``poet`` strategy: the Capuchin-style schedule first, then the pipeline, and the cheaper answer.

The Capuchin-style heuristic orders instructions freely (not in the MILP's stage form) and at
loose budgets on expensive storage sometimes beats an unfinished MILP; its energy is also an
incumbent that lets the pipeline skip the MILP when it already meets the proven bound.
"""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType

from ...graph.core import CostedGraph
from ...schedule.core import FEASIBLE, INFEASIBLE, OPTIMAL, Budget, Schedule
from ...schedule.report import PhaseRecord
from ...schedule.validate import ScheduleError, validate
from ..pipeline import solve_milp
from ..progress import report_progress
from ..result import checked, relative_gap
from .capuchin import solve_capuchin

DESCRIPTION = "POET MILP: rematerialization and paging chosen jointly for minimum energy"


def solve_poet(g: CostedGraph, budget: Budget, opts) -> Schedule:
    if (getattr(opts, "method", "auto") or "auto") == "faithful":
        return solve_milp(g, budget, opts, remat=True, paging=True, strategy="poet")
    t0 = opts.clock()
    h, skipped = None, len(g.nodes) > opts.policy.capuchin_max_nodes
    if not skipped:
        report_progress(opts, "Capuchin-style schedule")
        h = capuchin_incumbent(g, budget, opts)
    capuchin = PhaseRecord(
        "capuchin",
        opts.clock() - t0,
        None if h is None else h.totals.energy_j,
        MappingProxyType(
            {"skipped": f"{len(g.nodes):,} nodes (policy.capuchin_max_nodes)"} if skipped else {"found": h is not None}
        ),
    )
    if opts.time_limit_s is not None:  # the time limit covers the heuristic too
        opts = dataclasses.replace(opts, time_limit_s=max(0.1, opts.time_limit_s - (opts.clock() - t0)))
    s = solve_milp(
        g,
        budget,
        opts,
        remat=True,
        paging=True,
        strategy="poet",
        incumbent_energy=None if h is None else h.totals.energy_j,
    )
    s = best_of(s, h, opts)
    s.report = s.report.with_(
        solve_seconds=opts.clock() - t0, phases=(capuchin, *s.report.phases)
    )  # the Capuchin-style schedule's time included
    return s


def capuchin_incumbent(g: CostedGraph, budget: Budget, opts) -> Schedule | None:
    """The Capuchin-style heuristic's schedule, validated; an extra incumbent for POET.

    It gets ``policy.capuchin_share`` of the time limit (``policy.capuchin_seconds`` without
    one) and is dropped when it does not finish.
    """
    policy = opts.policy
    share = policy.capuchin_seconds if opts.time_limit_s is None else policy.capuchin_share * opts.time_limit_s
    h = solve_capuchin(g, budget, dataclasses.replace(opts, time_limit_s=share))
    if not h.steps:
        return None
    try:
        h.totals = validate(g, h.steps, budget)
    except ScheduleError:
        return None
    return h


def best_of(s: Schedule, h: Schedule | None, opts) -> Schedule:
    """POET's result, or the heuristic's schedule where that is cheaper, with an honest gap."""
    if h is None:
        return s
    g = s.graph
    mine = checked(s).totals.energy_j if s.steps else math.inf
    if h.totals.energy_j >= mine:
        return s
    rep = s.report
    e = h.totals.energy_j
    if s.status == INFEASIBLE and not s.steps:
        # proven impossible in the stage model, yet a freely ordered schedule fits
        rep = rep.with_(
            gap=None,
            bound_energy_j=None,
            message=(
                "the MILP's stage model has no schedule here, but the Capuchin-style heuristic's "
                "freely ordered one fits; optimality unknown"
            ),
        )
        status = FEASIBLE
    else:
        lb = max(x for x in (rep.bound_energy_j, rep.structural_bound_energy_j, g.plain_energy_j) if x is not None)
        gap = relative_gap(e, lb)
        status = OPTIMAL if gap <= opts.gap else FEASIBLE
        rep = rep.with_(
            gap=gap,
            bound_energy_j=lb,
            message=(
                f"the Capuchin-style heuristic's schedule beat the solver's best ({mine:.6g} J); "
                f"gap {gap:.2%} to the proven bound"
            ),
        )
    # the schedule is the heuristic's; say so, and how it was proven when it was
    rep = rep.with_(
        energy_j=e,
        incumbent="capuchin",
        superseded_method=rep.method,
        method="capuchin+bound" if status == OPTIMAL else "capuchin",
    )
    return Schedule(graph=g, budget=s.budget, steps=h.steps, status=status, strategy=s.strategy, report=rep)
