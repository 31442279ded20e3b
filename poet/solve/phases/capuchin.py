"""The ``poet`` strategy's prelude: the Capuchin-style schedule, an incumbent the stage form cannot express.

The Capuchin-style heuristic (:mod:`poet.solve.baselines.capuchin`) orders instructions freely (not in
the MILP's stage form) and at loose budgets on expensive storage sometimes beats an unfinished MILP;
its energy is also an incumbent that lets the phases after it skip the searches and the MILP when it
already meets the proven bound.  The cheaper answer wins (:func:`poet.solve.phases.answer.answer`).
"""

from __future__ import annotations

from types import MappingProxyType

from ...schedule.core import HEURISTIC, Schedule
from ...schedule.report import PhaseRecord
from ...schedule.validate import ScheduleError, validate
from ..baselines.capuchin import capuchin_plan
from ..baselines.keep_all import judged
from ..policy import SolvePolicy
from .state import SolveState


class CapuchinPrelude:
    name = "capuchin"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        n = len(state.g.nodes)
        if state.strategy != "poet":
            return f"the {state.strategy} strategy keeps the stage form (only poet adds this heuristic)"
        if state.method == "faithful":
            return "the faithful method runs the MILP alone"
        if state.size_rule:
            return state.size_rule
        if n > policy.capuchin_max_nodes:
            return f"{n:,} nodes (policy.capuchin_max_nodes)"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        """It gets ``policy.capuchin_share`` of the time limit (``policy.capuchin_seconds`` without one)
        and is dropped when it does not finish or does not fit; the phases after it share what is left."""
        opts, policy = state.opts, state.policy
        since = opts.clock()
        state.progress("Capuchin-style schedule")
        limit = opts.time_limit_s
        share = policy.capuchin_seconds if limit is None else policy.capuchin_share * limit
        state.capuchin = validated(state, capuchin_plan(state.g, state.budget, time_limit=share, stop=opts.stop).steps)
        spent = opts.clock() - since
        if limit is not None:  # the time limit covers the heuristic too
            state.restart_clock(max(0.1, limit - spent))
        energy = None if state.capuchin is None else state.capuchin.totals.energy_j
        return PhaseRecord(self.name, spent, energy, MappingProxyType({"found": state.capuchin is not None}))


def validated(state: SolveState, steps) -> Schedule | None:
    """The heuristic's schedule when it fits the budgets and the validator replays it, else None."""
    g, budget = state.g, state.budget
    h = judged(g, budget, list(steps), "capuchin", HEURISTIC, {})
    if not h.steps:
        return None
    try:
        h.totals = validate(g, h.steps, budget)
    except ScheduleError:
        return None
    return h
