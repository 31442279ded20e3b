"""The idle-gap recomputation plan (:mod:`poet.solve.search.gap_drops`), held from the start.

It takes little time and is feasible where the rules' recomputations cascade (dense DAGs, where every
rule can fail): it is what a stop or the time limit returns when nothing else is.  Its plan holds every
kept tensor at every stage, so where that is more (tensor, stage) pairs than ``policy.stage_pairs_max``
it is not tried.
"""

from __future__ import annotations

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..search.gap_drops import gap_drop_plan
from ..stage.plan import live_pairs
from .state import Origin, SolveState


class GapDrops:
    name = "gap drops"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.size_rule:
            return state.size_rule
        if not state.remat:
            return "no recomputation in the paging strategy"
        if state.method == "faithful":
            return "the faithful method runs the MILP alone"
        pairs = live_pairs(state.g)
        if pairs > policy.stage_pairs_max:
            return f"{pairs:,} (tensor, stage) pairs"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        state.progress("recomputation across idle gaps")
        since, limit = state.time.elapsed(), state.time.limit_s
        share = None if limit is None else state.policy.gap_drops_share * limit
        plan = gap_drop_plan(state.g, state.budget, stop=state.opts.stop, time_limit=share)
        state.offer(plan, Origin.GAP_DROPS)
        return state.phase_record(
            self.name, since, found=plan is not None, energy_j=None if plan is None else state.energy(plan)
        )
