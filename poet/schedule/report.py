"""What a solve reports about itself: :class:`SolveReport`, typed, frozen, every field always present.

It travels with its :class:`~poet.schedule.core.Schedule` (``schedule.report``) and is written into
the ``poet-schedule/1`` file as its ``"solver"`` object, in the same flat JSON form older files
have, so both read each other.  Fields that do not apply to the path a solve took hold None (or
an empty tuple); a fact of one strategy alone (Chen's checkpoints, the Capuchin heuristic's
eviction counts) is in ``strategy_facts``; what each phase of the portfolio did (or why it did not
run) is in ``phases``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(d: Mapping | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d)) if d else _EMPTY


def _plain(x):
    """A JSON-ready copy of a (possibly read-only) mapping or sequence; a number that is not finite (an
    unbounded gap, a bound that does not exist) is written as null."""
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass(frozen=True)
class PhaseRecord:
    """One phase of the portfolio (:data:`poet.solve.phases.PHASES`) or a step within one: what it was, how
    long it took, the best energy held when it ended, and its own facts (the guide search's rounds,
    CP-SAT's status, ...; ``skipped``: why it did not run)."""

    name: str
    seconds: float
    energy_j: float | None = None
    facts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def to_dict(self) -> dict:
        return {"name": self.name, "seconds": self.seconds, "energy_j": self.energy_j, "facts": _plain(self.facts)}

    @classmethod
    def from_dict(cls, d: Mapping) -> PhaseRecord:
        return cls(str(d.get("name", "")), float(d.get("seconds") or 0.0), d.get("energy_j"), _frozen(d.get("facts")))


@dataclass(frozen=True)
class MinBudgets:
    """The smallest feasible budgets, where a solve with no schedule computed them (None: not computed)."""

    ram_bytes: int | None = None  # the smallest RAM budget meeting the deadline
    ram_bytes_lower_bound: int | None = None  # a proven lower bound on it
    ram_note: str | None = None  # "proven", or why not / how it was found
    runtime_s: float | None = None  # the shortest deadline at the RAM budget
    runtime_s_lower_bound: float | None = None  # a proven lower bound on any schedule's runtime
    runtime_note: str | None = None


@dataclass(frozen=True)
class MilpStats:
    """The MILP that ran (None in ``SolveReport.milp`` when none did)."""

    backend: str
    variables: int
    integer_variables: int
    constraints: int
    nonzeros: int
    seconds: float  # HiGHS's own time


@dataclass(frozen=True)
class CacheHit:
    """Where an answer read from the cache came from."""

    file: str
    solved_at: str | None
    solve_seconds: float | None  # the original solve's time
    time_limit_s: float | None  # the time limit it was found with
    recheck: str | None = None  # how its status and gap were re-derived on reuse (nothing is trusted)


@dataclass(frozen=True)
class SolveReport:
    """A solve's account of itself.  Energies in joules, times in seconds."""

    method: str = ""  # what produced the schedule: greedy+bound, milp-fast, capuchin, bound, ...
    message: str = ""  # one sentence for people
    energy_j: float | None = None  # the schedule's energy as the solver priced it
    bound_energy_j: float | None = None  # the proven lower bound its gap is measured against
    gap: float | None = None  # relative gap to that bound (None: no schedule, or none proven)
    structural_bound_energy_j: float | None = None  # the eviction cover's bound
    heuristic_energy_j: float | None = None  # the best plan of the searches, before any MILP
    solve_seconds: float = 0.0
    stopped_early: bool = False  # ended on request (stop= / Ctrl-C): the best schedule found by then
    status_detail: str | None = None  # the MILP solver's own status, or why the MILP did not start
    milp: MilpStats | None = None
    milp_skipped: bool = False  # not started: too little time left to set it up
    warm_start: str | None = None  # what the MILP was started from ("greedy", "intervals", "none (why)")
    deadline_bound: bool | None = None  # the cover's evictions took the deadline's whole slack
    nearest_runtime_s: float | None = None  # no plan met the deadline: the nearest one's runtime
    incumbent: str | None = None  # "capuchin" or "one-pass paging" when that schedule beat the portfolio's
    superseded_method: str | None = None  # and what the portfolio's method was
    phases: tuple[PhaseRecord, ...] = ()
    min_budgets: MinBudgets = field(default_factory=MinBudgets)
    cache: CacheHit | None = None  # answered from the cache
    cache_error: str | None = None  # why the answer could not be kept in the cache
    cache_note: str | None = None  # why a cache entry was not used (unreadable, not re-checkable)
    # read from a file: what it claimed where its replay did not support it (nothing in a file is trusted)
    bound_checked: bool = True  # False: the bound is the file's word, not re-derived
    claimed_status: str | None = None
    claimed_gap: float | None = None
    claimed_bound_energy_j: float | None = None
    dropped_facts: tuple[str, ...] = ()  # facts of the file that were not finite numbers where numbers belong
    requested_method: str | None = None
    requested_gap: float | None = None
    time_limit_s: float | None = None
    threads: int | None = None
    strategy_facts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)  # one strategy's own facts (baselines)
    tiling: Mapping[str, Any] | None = None  # what automatic tiling did (poet solve)

    def phase(self, name: str) -> PhaseRecord | None:
        """The last record of the phase ``name`` that ran, or None when it did not run (a phase skipped
        has a record too, whose ``facts["skipped"]`` says why: :meth:`skipped`)."""
        return next((p for p in reversed(self.phases) if p.name == name and "skipped" not in p.facts), None)

    def skipped(self, name: str) -> str | None:
        """Why the phase ``name`` did not run, or None when it ran (or has no record)."""
        records = (p for p in reversed(self.phases) if p.name == name and "skipped" in p.facts)
        return next((p.facts["skipped"] for p in records), None)

    def with_(self, **changes) -> SolveReport:
        return dataclasses.replace(self, **changes)

    # -- the JSON form: the flat "solver" object of poet-schedule/1 ---------------------------------
    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "method": self.method,
            "message": self.message,
            "objective_energy_j": self.energy_j,
            "bound_energy_j": self.bound_energy_j,
            "gap": self.gap,
            "solve_seconds": self.solve_seconds,
        }
        optional = {
            "structural_bound_energy_j": self.structural_bound_energy_j,
            "heuristic_energy_j": self.heuristic_energy_j,
            "status_detail": self.status_detail,
            "warm_start": self.warm_start,
            "deadline_bound": self.deadline_bound,
            "nearest_runtime_s": self.nearest_runtime_s,
            "incumbent": self.incumbent,
            "superseded_method": self.superseded_method,
            "cache_error": self.cache_error,
            "cache_note": self.cache_note,
            "claimed_status": self.claimed_status,
            "claimed_gap": self.claimed_gap,
            "claimed_bound_energy_j": self.claimed_bound_energy_j,
            "requested_method": self.requested_method,
            "requested_gap": self.requested_gap,
            "time_limit_s": self.time_limit_s,
            "threads": self.threads,
            "min_ram_bytes": self.min_budgets.ram_bytes,
            "min_ram_bytes_lower_bound": self.min_budgets.ram_bytes_lower_bound,
            "min_ram_note": self.min_budgets.ram_note,
            "min_runtime_s": self.min_budgets.runtime_s,
            "min_runtime_s_lower_bound": self.min_budgets.runtime_s_lower_bound,
            "min_runtime_note": self.min_budgets.runtime_note,
            "tiling": _plain(self.tiling) if self.tiling is not None else None,
        }
        d.update({k: v for k, v in optional.items() if v is not None})
        d = {k: _plain(v) for k, v in d.items()}
        if self.stopped_early:
            d["stopped_early"] = True
        if self.milp_skipped:
            d["milp_skipped"] = True
        if not self.bound_checked:
            d["bound_checked"] = False
        if self.dropped_facts:
            d["dropped_facts"] = list(self.dropped_facts)
        if self.milp is not None:
            m = self.milp
            d.update(
                backend=m.backend,
                variables=m.variables,
                integer_variables=m.integer_variables,
                constraints=m.constraints,
                nonzeros=m.nonzeros,
                mip_seconds=m.seconds,
            )
        if self.cache is not None:
            d["cache"] = dataclasses.asdict(self.cache)
        if self.phases:
            d["phases"] = [p.to_dict() for p in self.phases]
        for k, v in self.strategy_facts.items():
            d.setdefault(k, _plain(v))
        return d

    @classmethod
    def from_dict(cls, d: Mapping | None) -> SolveReport:
        """Read the JSON form back (this version's or an older file's); keys it does not know are kept in
        ``strategy_facts``, so nothing a file held is lost.  A fact of the wrong type reads as absent."""
        d = dict(d) if isinstance(d, Mapping) else {}
        num, text, whole = _number, _text, _whole
        cache = d.get("cache")
        milp = None
        if whole(d.get("nonzeros")) is not None and whole(d.get("variables")):
            milp = MilpStats(
                text(d.get("backend")) or "",
                whole(d.get("variables")) or 0,
                whole(d.get("integer_variables")) or 0,
                whole(d.get("constraints")) or 0,
                whole(d.get("nonzeros")) or 0,
                num(d.get("mip_seconds")) or 0.0,
            )
        phases = d.get("phases") if isinstance(d.get("phases"), (list, tuple)) else ()
        tiling = d.get("tiling")
        return cls(
            method=text(d.get("method")) or "",
            message=text(d.get("message")) or "",
            energy_j=num(d.get("objective_energy_j")),
            bound_energy_j=num(d.get("bound_energy_j")),
            gap=num(d.get("gap")),
            structural_bound_energy_j=num(d.get("structural_bound_energy_j")),
            heuristic_energy_j=num(d.get("heuristic_energy_j")),
            solve_seconds=num(d.get("solve_seconds")) or 0.0,
            stopped_early=d.get("stopped_early") is True,
            status_detail=text(d.get("status_detail")),
            milp=milp,
            milp_skipped=d.get("milp_skipped") is True,
            warm_start=text(d.get("warm_start")),
            deadline_bound=d.get("deadline_bound") if isinstance(d.get("deadline_bound"), bool) else None,
            nearest_runtime_s=num(d.get("nearest_runtime_s")),
            incumbent=text(d.get("incumbent")),
            superseded_method=text(d.get("superseded_method")),
            phases=tuple(
                PhaseRecord(
                    text(p.get("name")) or "",
                    num(p.get("seconds")) or 0.0,
                    num(p.get("energy_j")),
                    _frozen(p.get("facts") if isinstance(p.get("facts"), Mapping) else None),
                )
                for p in phases
                if isinstance(p, Mapping)
            ),
            min_budgets=MinBudgets(
                whole(d.get("min_ram_bytes")),
                whole(d.get("min_ram_bytes_lower_bound")),
                text(d.get("min_ram_note")),
                num(d.get("min_runtime_s")),
                num(d.get("min_runtime_s_lower_bound")),
                text(d.get("min_runtime_note")),
            ),
            cache=CacheHit(
                text(cache.get("file")) or "",
                text(cache.get("solved_at")),
                num(cache.get("solve_seconds")),
                num(cache.get("time_limit_s")),
                text(cache.get("recheck")),
            )
            if isinstance(cache, Mapping)
            else None,
            cache_error=text(d.get("cache_error")),
            cache_note=text(d.get("cache_note")),
            bound_checked=d.get("bound_checked") is not False,
            claimed_status=text(d.get("claimed_status")),
            claimed_gap=num(d.get("claimed_gap")),
            claimed_bound_energy_j=num(d.get("claimed_bound_energy_j")),
            dropped_facts=tuple(
                str(k) for k in d.get("dropped_facts") or () if isinstance(d.get("dropped_facts"), (list, tuple))
            ),
            requested_method=text(d.get("requested_method")),
            requested_gap=num(d.get("requested_gap")),
            time_limit_s=num(d.get("time_limit_s")),
            threads=whole(d.get("threads")),
            strategy_facts=_frozen({k: v for k, v in d.items() if k not in _KNOWN}),
            tiling=_frozen(tiling) if isinstance(tiling, Mapping) else None,
        )


def _text(x) -> str | None:
    return x if isinstance(x, str) else None


def _whole(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _number(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        v = float(x)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


# keys of the JSON form that are fields (or parts of fields), not strategy facts
_KNOWN = (
    "method",
    "message",
    "objective_energy_j",
    "bound_energy_j",
    "gap",
    "structural_bound_energy_j",
    "heuristic_energy_j",
    "solve_seconds",
    "stopped_early",
    "status_detail",
    "milp_skipped",
    "warm_start",
    "deadline_bound",
    "nearest_runtime_s",
    "incumbent",
    "superseded_method",
    "phases",
    "min_ram_bytes",
    "min_ram_bytes_lower_bound",
    "min_ram_note",
    "min_runtime_s",
    "min_runtime_s_lower_bound",
    "min_runtime_note",
    "cache",
    "cache_error",
    "requested_method",
    "requested_gap",
    "time_limit_s",
    "threads",
    "backend",
    "variables",
    "integer_variables",
    "constraints",
    "nonzeros",
    "mip_seconds",
    "tiling",
    "cache_note",
    "bound_checked",
    "claimed_status",
    "claimed_gap",
    "claimed_bound_energy_j",
    "dropped_facts",
)
