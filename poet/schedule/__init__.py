"""The schedule type, its JSON file, the solver's report, and the independent validator."""

from .core import (
    FEASIBLE,
    HEURISTIC,
    INFEASIBLE,
    NO_SOLUTION,
    OPTIMAL,
    PAGING_HIDDEN,
    PAGING_MODES,
    PAGING_OVERLAP,
    PAGING_SERIAL,
    Budget,
    Op,
    Schedule,
    Step,
    Totals,
)
from .io import load_schedule, save_schedule, schedule_from_dict, schedule_to_dict
from .report import CacheHit, MilpStats, MinBudgets, PhaseRecord, SolveReport
from .validate import ScheduleError, simulate, validate

__all__ = [
    "Budget",
    "CacheHit",
    "FEASIBLE",
    "HEURISTIC",
    "INFEASIBLE",
    "MilpStats",
    "MinBudgets",
    "NO_SOLUTION",
    "OPTIMAL",
    "Op",
    "PAGING_HIDDEN",
    "PAGING_MODES",
    "PAGING_OVERLAP",
    "PAGING_SERIAL",
    "PhaseRecord",
    "Schedule",
    "ScheduleError",
    "SolveReport",
    "Step",
    "Totals",
    "load_schedule",
    "save_schedule",
    "schedule_from_dict",
    "schedule_to_dict",
    "simulate",
    "validate",
]
