"""Retention intervals on CP-SAT (:mod:`poet.solve.search.intervals`), from the guide search's plan, on
mid-sized graphs: a different neighbourhood (any tensor's lives may move), slower per gain, but it goes
on gaining where the guide search stalls (resnet18_cifar/m4 at 20% RAM, bench/results.md)."""

from __future__ import annotations

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..result import relative_gap
from ..search import intervals
from ..search.pool import worker_count
from .state import Origin, SolveState


class IntervalSearch:
    name = "interval search"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches is None:
            return "the guide search did not run"
        if state.searches.intervals_skip is not None:
            return state.searches.intervals_skip
        if state.plan_proven():
            return "the plan held is within the gap of the bound"
        if state.stopped():
            return "asked to stop"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        lb, opts, start_e = state.lb, state.opts, state.plan_e
        since = state.time.elapsed()
        state.progress("interval search", objective=start_e, bound=lb, gap=state.gap())
        found = intervals.interval_plan(
            state.g,
            state.budget,
            start=state.plan,
            time_limit=state.interval_seconds(),
            threads=worker_count(opts.threads),
            remat=state.remat,
            paging=state.paging,
            target_energy=state.target(),
            stop=opts.stop,
            progress=None if opts.progress is None else CpProgress(state, start_e),
        )
        state.offer(found.plan, Origin.INTERVALS)
        state.note(heuristic_energy_j=state.plan_e)
        return state.phase_record(self.name, since, start_energy_j=start_e, **found.facts(), energy_j=state.plan_e)


class CpProgress:
    """Each better solution CP-SAT finds, as its model prices it (before the plan is read back and
    validated: never shown above the plan it started from), on the progress line."""

    def __init__(self, state: SolveState, start_e: float):
        self.state, self.start_e = state, start_e

    def __call__(self, e: float) -> None:
        e = min(e, self.start_e)
        lb = self.state.lb
        self.state.progress("interval search", objective=e, bound=lb, gap=relative_gap(e, lb))
