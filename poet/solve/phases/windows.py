"""The window re-solve: the one-pass paging schedule improved a window of stages at a time.

:func:`~poet.solve.search.windows.improve_windows` fixes the schedule outside a window, re-solves the
window exactly (a small MILP, the residency at its edges as boundary conditions), keeps it only when
its steps replay and cost less, and moves on, the most expensive windows first, until its share of the
time is up.  The improved schedule goes through the validator here before it replaces the one held.
"""

from __future__ import annotations

from ...schedule.core import PAGING_OVERLAP
from ...schedule.report import PhaseRecord
from ...schedule.validate import ScheduleError, validate
from ..policy import SolvePolicy
from ..search.stream import StreamResult
from ..search.windows import improve_windows
from .state import SolveState


class WindowResolve:
    name = "window re-solve"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.stream is None:
            return "no one-pass schedule held"
        if state.budget.paging_time == PAGING_OVERLAP:
            return "overlapped paging: the window MILP counts serial or hidden paging only"
        if state.stopped():
            return "asked to stop"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        """``window_share`` of the time left when the one-pass schedule is the answer, else
        ``window_portfolio_share`` (no limit: as with a 60-s one)."""
        since, policy, held = state.time.elapsed(), state.policy, state.stream
        state.progress("window re-solve", objective=held.energy_j)
        left = state.time.left()
        share = policy.window_share if state.size_rule else policy.window_portfolio_share
        r = improve_windows(
            state.g,
            held.steps,
            state.budget,
            window=policy.window_stages,
            time_limit=share * (60.0 if left is None else max(0.0, left)),
            window_time_limit=policy.window_seconds,
            stop=state.opts.stop,
            clock=state.opts.clock,
        )
        facts = {"tried": r.windows_tried, "kept": r.windows_kept, "ended": r.why_stopped}
        if r.windows_kept:
            try:
                totals = validate(state.g, r.steps, state.budget)
            except ScheduleError as e:  # never expected: each window was replayed; the old schedule stays
                facts["rejected"] = str(e)
            else:
                if totals.energy_j < held.energy_j:
                    state.stream = StreamResult(r.steps, totals.energy_j, totals.runtime_s, held.resident_pairs)
                    facts["saved_j"] = held.energy_j - totals.energy_j
        return state.phase_record(self.name, since, **facts)
