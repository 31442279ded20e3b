"""The tiling fallback: a tiled graph the portfolio found no schedule for gets the streaming page rule.

The portfolio can spend a short limit on its lower bound and guided rules and end with nothing on a tiled
graph (below ``policy.stream_min_nodes``, the one-pass schedule is not among its phases); the page rule
(:func:`~poet.solve.search.stream.stream_schedule`) is linear in the graph and gets
``policy.tiled_fallback_seconds`` of its own.
"""

from __future__ import annotations

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..search.stream import stream_schedule
from .state import SolveState


class StreamFallback:
    name = "tiling fallback"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if not state.tiled_rules:
            return "not a tiled graph solved by the poet strategy"
        if state.size_rule:
            return state.size_rule
        if state.has_schedule():
            return "a schedule is held"
        if state.infeasible or (state.milp_result is not None and state.milp_result.status == "infeasible"):
            return "the budgets are proven infeasible"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        since = state.time.elapsed()
        state.progress("streaming page rule (tiling fallback)")
        limit = state.policy.tiled_fallback_seconds
        state.fallback = stream_schedule(state.g, state.budget, time_limit=limit, stop=state.opts.stop)
        return state.phase_record(self.name, since, found=state.fallback.found, energy_j=state.fallback.energy_j)
