"""What every strategy's answer goes through: the gap arithmetic and the validator's replay."""

from __future__ import annotations

from ..schedule.core import Schedule
from ..schedule.validate import ScheduleError, validate
from .errors import SolveError


def relative_gap(energy: float, bound: float) -> float:
    """How far above ``bound`` a schedule of ``energy`` is, relative to its energy."""
    return max(0.0, (energy - bound) / max(energy, 1e-300))


def checked(s: Schedule) -> Schedule:
    """Replay through the validator; the schedule's totals are the validator's."""
    if not s.steps:
        return s
    try:
        totals = validate(s.graph, s.steps, s.budget)
    except ScheduleError as e:
        raise SolveError(f"strategy {s.strategy!r} produced an invalid schedule: {e}") from e
    s.totals = totals
    return s
