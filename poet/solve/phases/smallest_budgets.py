"""No schedule meets the budgets, proven: the smallest RAM budget and the shortest deadline that have one
(two MILPs, :mod:`poet.solve.min_budgets`), in what is left of the time limit."""

from __future__ import annotations

import dataclasses

from ...schedule.core import INFEASIBLE
from ...schedule.report import PhaseRecord
from ..min_budgets import min_budgets
from ..policy import SolvePolicy
from .state import SolveState


class SmallestBudgets:
    name = "smallest budgets"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if not state.opts.find_min_budgets:
            return "not asked for (find_min_budgets)"
        res = state.milp_result
        if state.infeasible:
            n = len(state.g.nodes)
            return None if n <= policy.auto_max_nodes else f"{n:,} nodes, above policy.auto_max_nodes"
        if res is not None and res.x is None and res.status == INFEASIBLE:
            return None
        return "the budgets are not proven infeasible"

    def run(self, state: SolveState) -> PhaseRecord:
        since = state.time.elapsed()
        found = min_budgets(
            state.g, state.budget, state.opts, remat=state.remat, paging=state.paging, time_budget=state.full_time
        )
        if found.runtime_s_lower_bound is None:  # the runtime cover's, where it ran on the way
            found = dataclasses.replace(found, runtime_s_lower_bound=state.t_min)
        state.note(min_budgets=found)
        return state.phase_record(self.name, since)
