"""The ``poet-schedule/1`` file (documented in docs/formats.md)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..fileio import atomic_write_text, json_text, read_json
from ..graph.io import graph_from_dict, graph_to_dict
from .compact import STEPS_ENCODING, check_compact, decode_steps, encode_steps, is_compact
from .core import (
    FEASIBLE,
    HEURISTIC,
    INFEASIBLE,
    NO_SOLUTION,
    OPS,
    OPTIMAL,
    PAGING_SERIAL,
    STATUSES,
    Budget,
    Schedule,
    Step,
    Totals,
)
from .report import SolveReport
from .validate import ScheduleError, check_budget, validate

SCHEDULE_FORMAT = "poet-schedule/1"
COMPACT_MIN_STEPS = 100_000  # save_schedule writes schedules this long in the compact step encoding


def steps_to_dicts(steps) -> list[dict]:
    """Steps in their JSON form: ``{"op", "node"}``, and ``"stage"`` where known."""
    return [{"op": st.op, "node": st.node, **({"stage": st.stage} if st.stage is not None else {})} for st in steps]


def schedule_to_dict(s: Schedule, compact: bool = False) -> dict:
    """The file's JSON object; ``compact``: the steps in the compact encoding (:mod:`.compact`), the graph's
    nodes and edges as columns (:mod:`poet.graph.io_columns`)."""
    steps = encode_steps(s.steps) if compact else steps_to_dicts(s.steps)
    return {
        "format": SCHEDULE_FORMAT,
        "strategy": s.strategy,
        "status": s.status,
        "graph": graph_to_dict(s.graph, compact),
        "budget": {
            "ram_bytes": s.budget.ram_bytes,
            "runtime_s": s.budget.runtime_s,
            "paging_time": s.budget.paging_time,
        },
        "steps": steps,
        "totals": dataclasses.asdict(s.totals) if s.totals else None,
        "solver": s.report.to_dict(),
    }


def schedule_from_dict(d: dict, source: str = "schedule") -> Schedule:
    """Parse and re-validate: totals are recomputed, never trusted from the file.

    The file's own claims are checked where they can be: a status that says no schedule exists next
    to steps that replay, or ``optimal`` with a gap that the replayed energy and the file's bound do
    not give, are corrected (see :func:`checked_claims`).
    """
    if not isinstance(d, dict) or d.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(
            f'{source}: not a {SCHEDULE_FORMAT} file ("format" is '
            f"{str(d.get('format'))[:40] if isinstance(d, dict) else None!r})"
        )
    g = graph_from_dict(d.get("graph"), source=f"{source} graph")
    b = d.get("budget")
    if not isinstance(b, dict):
        raise ScheduleError(
            f'{source}: "budget" must be an object like {{"ram_bytes": 3000000, '
            f'"runtime_s": 2.5, "paging_time": "serial"}}, got {str(b)[:40]}'
        )
    if isinstance(b.get("ram_bytes"), bool) or not isinstance(b.get("ram_bytes"), int):
        raise ScheduleError(
            f"{source}: budget.ram_bytes must be an integer number of bytes, got {str(b.get('ram_bytes'))[:40]}"
        )
    budget = Budget(
        ram_bytes=b["ram_bytes"], runtime_s=b.get("runtime_s"), paging_time=b.get("paging_time", PAGING_SERIAL)
    )
    try:
        check_budget(budget)
    except ScheduleError as e:
        raise ScheduleError(f"{source}: {e}") from None
    steps = _read_steps(d.get("steps"), source)
    status = d.get("status", "feasible")
    if not isinstance(status, str) or status not in STATUSES:
        raise ScheduleError(f"{source}: unknown status {str(status)[:40]!r}; one of {', '.join(STATUSES)}")
    try:
        totals = validate(g, steps, budget) if steps else None
    except ScheduleError as e:
        raise ScheduleError(f"{source}: {e}", e.step_index) from None
    solver = d.get("solver")
    s = Schedule(
        graph=g,
        budget=budget,
        steps=steps,
        status=status,
        strategy=str(d.get("strategy", "unknown"))[:100],
        totals=totals,
        report=SolveReport.from_dict(_plain_facts(solver)),
    )
    return checked_claims(s)


def _read_steps(raw_steps, source: str) -> tuple[Step, ...]:
    """The file's ``steps``: a list of ``{"op", "node"}`` objects, or the compact object."""
    if raw_steps is None:
        return ()
    if is_compact(raw_steps):
        check_compact(raw_steps, source)
        return tuple(decode_steps(raw_steps))
    if not isinstance(raw_steps, list):
        raise ScheduleError(
            f'{source}: "steps" must be a list of {{"op", "node"}} objects, or a compact object '
            f'{{"encoding": "{STEPS_ENCODING}", ...}} (docs/formats.md)'
        )
    steps = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict) or raw.get("op") not in OPS or not isinstance(raw.get("node"), int):
            raise ScheduleError(f'{source}: steps[{i}] must be {{"op": one of {list(OPS)}, "node": int}}', i)
        steps.append(Step(raw["op"], raw["node"], raw.get("stage")))
    return tuple(steps)


# solver facts that are counts or measures: reports format them as numbers
_NUMERIC_FACTS = ("gap", "variables", "constraints")
_NUMERIC_SUFFIXES = ("_seconds", "_s", "_bytes", "_j", "_gap")


def _plain_facts(solver) -> dict:
    """The file's solver facts, less any measure that is not a finite number (a report would choke on
    it, and it is not what POET writes): their keys are listed in ``dropped_facts``."""
    if not isinstance(solver, dict):
        return {}
    out, dropped = {}, []
    for k, v in solver.items():
        numeric = k in _NUMERIC_FACTS or str(k).endswith(_NUMERIC_SUFFIXES)
        if numeric and v is not None and _number(v) is None:
            dropped.append(str(k)[:60])
        else:
            out[str(k)] = v
    if dropped:
        out["dropped_facts"] = dropped
    return out


def _number(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        x = float(x)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def checked_claims(s: Schedule) -> Schedule:
    """``s`` with the status, gap and bound its file claims replaced by what its replay supports.

    The replayed energy is known, and so is one lower bound anyone can re-check: every node is
    computed at least once (the plain energy).  A better bound in the file is the word of whoever
    wrote it: it is kept as ``bound_energy_j`` with ``bound_checked`` false (a bound above the
    replayed energy is false and dropped), and the gap is recomputed from it.  ``optimal`` stays
    only when that gap is within the gap the file claims or asked for; a "no schedule" status
    next to steps that replay becomes ``feasible``.  What the file said is kept as ``claimed_*``.
    """
    r = s.report
    if not s.steps:
        if s.status in (OPTIMAL, FEASIBLE, HEURISTIC):
            s.report = r.with_(claimed_status=r.claimed_status or s.status)
            s.status = NO_SOLUTION
        return s
    claimed_gap, bound = r.gap, r.bound_energy_j
    energy, plain = s.totals.energy_j, s.graph.plain_energy_j
    changes: dict = {"bound_energy_j": plain, "bound_checked": True}
    if claimed_gap is not None and r.claimed_gap is None:
        changes["claimed_gap"] = claimed_gap
    if bound is not None and bound > plain:
        if bound <= energy * (1 + 1e-9):
            changes.update(bound_energy_j=bound, bound_checked=False)
        elif r.claimed_bound_energy_j is None:
            changes["claimed_bound_energy_j"] = bound  # above the replayed energy: false
    changes["gap"] = max(0.0, (energy - changes["bound_energy_j"]) / max(energy, 1e-300))
    if s.status in (INFEASIBLE, NO_SOLUTION):
        changes["claimed_status"] = r.claimed_status or s.status
        s.status = FEASIBLE
    limit = max(claimed_gap or 0.0, r.requested_gap or 1e-3)
    if s.status == OPTIMAL and changes["gap"] > min(limit, 1.0) * (1 + 1e-6) + 1e-12:
        changes["claimed_status"] = r.claimed_status or OPTIMAL
        s.status = FEASIBLE
    s.report = r.with_(**changes)
    return s


def save_schedule(s: Schedule, path: str | Path, compact: bool | None = None) -> None:
    """Write ``s`` as ``poet-schedule/1`` JSON, atomically (a failed write leaves the old file).

    ``compact``: the steps in the compact encoding; by default when there are
    :data:`COMPACT_MIN_STEPS` or more (shorter files stay readable as they were)."""
    if compact is None:
        compact = len(s.steps) >= COMPACT_MIN_STEPS
    # a compact file is one line: indenting would put every node difference on a line of its own
    text = json_text(schedule_to_dict(s, compact), f"schedule for {s.graph.name}", indent=None if compact else 1)
    atomic_write_text(path, text)


def load_schedule(path: str | Path) -> Schedule:
    """The ``poet-schedule/1`` file at ``path``, replayed by the validator (see :func:`schedule_from_dict`)."""
    return schedule_from_dict(read_json(path, "schedule file", ScheduleError), source=str(path))


__all__ = [
    "COMPACT_MIN_STEPS",
    "SCHEDULE_FORMAT",
    "Totals",
    "checked_claims",
    "load_schedule",
    "save_schedule",
    "schedule_from_dict",
    "schedule_to_dict",
    "steps_to_dicts",
]
