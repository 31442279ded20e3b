"""The ``poet-schedule/1`` file (documented in docs/formats.md)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..graph.io import graph_from_dict, graph_to_dict
from .core import OPS, PAGING_SERIAL, STATUSES, Budget, Schedule, Step, Totals
from .validate import ScheduleError, validate

SCHEDULE_FORMAT = "poet-schedule/1"


def steps_to_dicts(steps) -> list[dict]:
    """Steps in their JSON form: ``{"op", "node"}``, and ``"stage"`` where known."""
    return [{"op": st.op, "node": st.node, **({"stage": st.stage} if st.stage is not None else {})}
            for st in steps]


def schedule_to_dict(s: Schedule) -> dict:
    steps = steps_to_dicts(s.steps)
    return {
        "format": SCHEDULE_FORMAT,
        "strategy": s.strategy,
        "status": s.status,
        "graph": graph_to_dict(s.graph),
        "budget": {"ram_bytes": s.budget.ram_bytes, "runtime_s": s.budget.runtime_s,
                   "paging_time": s.budget.paging_time},
        "steps": steps,
        "totals": dataclasses.asdict(s.totals) if s.totals else None,
        "solver": s.solver,
    }


def schedule_from_dict(d: dict, source: str = "schedule") -> Schedule:
    """Parse and re-validate: totals are recomputed, never trusted from the file."""
    if not isinstance(d, dict) or d.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(f"{source}: not a {SCHEDULE_FORMAT} file (\"format\" is "
                            f"{d.get('format') if isinstance(d, dict) else None!r})")
    g = graph_from_dict(d.get("graph"), source=f"{source} graph")
    b = d.get("budget") or {}
    if not isinstance(b.get("ram_bytes"), int):
        raise ScheduleError(f"{source}: budget.ram_bytes must be an integer number of bytes")
    budget = Budget(ram_bytes=b["ram_bytes"], runtime_s=b.get("runtime_s"),
                    paging_time=b.get("paging_time", PAGING_SERIAL))
    steps = []
    for i, raw in enumerate(d.get("steps") or []):
        if not isinstance(raw, dict) or raw.get("op") not in OPS or not isinstance(raw.get("node"), int):
            raise ScheduleError(f"{source}: steps[{i}] must be {{\"op\": one of {list(OPS)}, \"node\": int}}", i)
        steps.append(Step(raw["op"], raw["node"], raw.get("stage")))
    status = d.get("status", "feasible")
    if status not in STATUSES:
        raise ScheduleError(f"{source}: unknown status {status!r}")
    totals = validate(g, steps, budget) if steps else None
    return Schedule(graph=g, budget=budget, steps=tuple(steps), status=status,
                    strategy=str(d.get("strategy", "unknown")), totals=totals,
                    solver=d.get("solver") or {})


def save_schedule(s: Schedule, path: str | Path) -> None:
    Path(path).write_text(json.dumps(schedule_to_dict(s), indent=1))


def load_schedule(path: str | Path) -> Schedule:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise ScheduleError(f"cannot read schedule file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ScheduleError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from None
    return schedule_from_dict(d, source=str(path))


__all__ = ["SCHEDULE_FORMAT", "Totals", "load_schedule", "save_schedule", "schedule_from_dict", "schedule_to_dict",
           "steps_to_dicts"]
