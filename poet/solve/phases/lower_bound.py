"""The eviction cover (:mod:`poet.solve.bounds`): the proven bound every gap is measured against, and
the guide the greedy rules follow first.  When no eviction set meets the deadline the answer is
``infeasible`` at once, with the shortest runtime any schedule needs (the runtime cover)."""

from __future__ import annotations

import math

from ...schedule.report import PhaseRecord
from ..bounds import eviction_cover
from ..policy import SolvePolicy
from .state import SolveState


class LowerBound:
    name = "lower bound"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        return state.size_rule

    def run(self, state: SolveState) -> PhaseRecord:
        state.progress("lower bound")
        since = state.time.elapsed()
        state.cover = cover = eviction_cover(
            state.g,
            state.budget,
            remat=state.remat,
            paging=state.paging,
            time_limit=state.cover_seconds(0.5),
            stop=state.opts.stop,
            policy=state.policy,
        )
        rec = state.phase_record(
            self.name, since, bound_energy_j=cover.bound, evictions=len(cover.guide), **cover.facts()
        )
        if math.isfinite(cover.bound):
            state.note(structural_bound_energy_j=cover.bound)
        else:
            state.runtime_cover()  # the answer says how short a deadline any schedule needs
        return rec
