"""The window re-solve: the one-pass paging schedule (and, at the end, the best plan's schedule) improved a
window of stages at a time.

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
from ..search.windows import WindowResult, improve_windows
from ..stage.emit import emit
from .state import SolveState


class WindowResolve:
    name = "window re-solve"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.stream is None:
            return "no one-pass schedule held"
        if len(state.g.nodes) < policy.stream_min_nodes:  # (a small tiled graph's)
            return "a graph under policy.stream_min_nodes: the later phases search it whole"
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
        r = windows(state, held.steps, share * (60.0 if left is None else max(0.0, left)))
        facts, better = checked(state, r, held.energy_j)
        if better is not None:
            state.stream = StreamResult(better.steps, better.energy_j, better.runtime_s, held.resident_pairs)
        return state.phase_record(self.name, since, **facts)


class WindowPolish:
    """The same on the best plan held, in the time the phases before it left: its steps re-solved a window
    at a time, held (``state.polished``) when cheaper than every schedule held."""

    name = "window polish"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.size_rule:
            return state.size_rule
        if state.plan is None:
            return "no plan held"
        if state.milp_result is not None and state.milp_result.x is not None:
            return "the MILP's answer is the schedule"
        if state.plan_proven():
            return "the plan held is within the gap of the bound"
        if state.budget.paging_time == PAGING_OVERLAP:
            return "overlapped paging: the window MILP counts serial or hidden paging only"
        if state.stopped():
            return "asked to stop"
        left = state.time.left()
        if left is not None and left < 1.0:
            return f"{max(left, 0.0):.1f} s left"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        since, left = state.time.elapsed(), state.time.left()
        state.progress("window polish", objective=state.plan_e)
        r = windows(state, emit(state.g, state.plan), 60.0 if left is None else max(0.0, left))
        best = min(e for e in (state.plan_e, state.stream and state.stream.energy_j) if e is not None)
        facts, better = checked(state, r, best)
        if better is not None:
            state.polished = better
        return state.phase_record(self.name, since, **facts)


def windows(state: SolveState, steps, seconds: float) -> WindowResult:
    policy = state.policy
    return improve_windows(
        state.g,
        steps,
        state.budget,
        window=policy.window_stages,
        time_limit=seconds,
        window_time_limit=policy.window_seconds,
        patience=policy.window_patience,
        stop=state.opts.stop,
        clock=state.opts.clock,
    )


def checked(state: SolveState, r: WindowResult, than: float) -> tuple[dict, StreamResult | None]:
    """The phase's facts, and the improved schedule when the validator accepts it and it costs less than
    ``than``."""
    facts = {"tried": r.windows_tried, "kept": r.windows_kept, "ended": r.why_stopped}
    if not r.windows_kept:
        return facts, None
    try:
        totals = validate(state.g, r.steps, state.budget)
    except ScheduleError as e:  # never expected: each window was replayed; the old schedule stays
        facts["rejected"] = str(e)
        return facts, None
    if totals.energy_j >= than:
        return facts, None
    facts["saved_j"] = than - totals.energy_j
    return facts, StreamResult(r.steps, totals.energy_j, totals.runtime_s, None)
