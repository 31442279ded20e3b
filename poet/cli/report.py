"""``poet report``: the tables and plots of a sweep (``render_sweep``, which ``poet sweep`` uses
too) or the summary of one schedule.

``poet sweep`` itself lives in :mod:`.sweep`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..units import BudgetError


def register(subparsers) -> None:
    """Add ``report`` to an argparse subparsers object (``sweep``: :mod:`.sweep`)."""
    r = subparsers.add_parser(
        "report",
        help="tables and plots of a saved schedule (or re-plot a sweep directory)",
        description="Render a poet-schedule/1 file: summary and per-node tables, the schedule picture "
        "(stages x nodes) and RAM over the steps against the budget.  Given a sweep directory "
        "(or its sweep.json) it redraws the sweep's tables and plots.",
    )
    r.add_argument("path", help="schedule JSON, or a sweep directory / sweep.json")
    r.add_argument("--out", help="output directory (default: SCHEDULE-report/, or the sweep directory)")
    r.add_argument("--force", action="store_true", help="write into --out even if it holds other files")
    r.add_argument("--point", help="for a sweep: the schedule to draw, STRATEGY|MEMORY|RUNTIME")
    r.set_defaults(func=cmd_report)


def render_sweep(
    out: Path, doc: dict, point: str | None = None, plots: bool = True, source: Path | None = None
) -> list[Path]:
    """Write the sweep's summary and plots into ``out`` (schedules are read from ``source``, by default
    ``out``).  ``--point`` is checked (and its schedule loaded) before anything is written: a bad point
    changes no file."""
    from ..fileio import atomic_write_text
    from ..report import tables

    sched, key = None, None
    if plots:
        key = point or choose_point(doc)
        if key:
            row = next((r for r in doc["points"] if r.get("key") == key), None)
            if row is None:
                keys = [r.get("key") for r in doc["points"] if r.get("schedule_file")][:5]
                raise BudgetError(
                    f"--point {key!r} is not a point of this sweep; points with a schedule are "
                    f"written STRATEGY|MEMORY|RUNTIME, e.g. {', '.join(map(str, keys)) or 'none'}"
                )
            if not row.get("schedule_file"):
                raise BudgetError(
                    f"--point {key!r} has no schedule ({row.get('status')}); choose a point with a schedule"
                )
            from ..schedule.io import load_schedule

            sched = load_schedule((source or out) / row["schedule_file"])
    written = []
    md = tables.sweep_markdown(doc)
    written.append(atomic_write_text(out / "summary.md", md))
    if plots:
        from ..report import plots as P

        written += P.sweep_plots(doc, out)
        if sched is not None:
            written += P.schedule_plots(sched, out, stem="point", title=key)
    return written


def choose_point(doc: dict) -> str | None:
    """The POET point saving most over the best single technique; else the tightest feasible POET point."""
    from ..sweep import best_single

    rows = [r for r in doc["points"] if r.get("schedule_file")]
    single = best_single(doc["points"])
    best, best_gain = None, 0.0
    for r in rows:
        if r["strategy"] != "poet":
            continue
        k = (r["memory"], r["runtime"])
        ref = single.get(k, (None,))[0]
        gain = (ref - float(r["energy_j"])) / ref if ref else (1.0 if k not in single else 0.0)
        if best is None or gain > best_gain + 1e-12:
            best, best_gain = r, gain
    if best is not None and best_gain <= 1e-9:
        # no saving anywhere: show the tightest POET schedule instead (most recomputes/paging)
        poet_rows = [r for r in rows if r["strategy"] == "poet"]
        best = min(poet_rows, key=lambda r: (int(r["ram_budget_bytes"]), float(r.get("runtime_budget_s") or 1e300)))
    if best is None and rows:
        best = min(rows, key=lambda r: int(r["ram_budget_bytes"]))
    return best["key"] if best else None


def cmd_report(a) -> int:
    from ..schedule.io import load_schedule
    from ..sweep import load_sweep

    p = Path(a.path)
    if p.is_dir() or p.name == "sweep.json" or (p.suffix == ".json" and _is_sweep(p)):
        doc = load_sweep(p)
        _check_sweep_doc(doc, p)
        out = Path(a.out) if a.out else (p if p.is_dir() else p.parent)
        src = p if p.is_dir() else p.parent
        if a.out:
            _check_out(out, a.force, marker="summary.md")
            out.mkdir(parents=True, exist_ok=True)
        written = render_sweep(out, doc, point=a.point, source=src)
        if a.out and out != src:
            # schedules are referenced relative to the sweep directory
            import shutil

            if (src / "schedules").is_dir() and not (out / "schedules").exists():
                shutil.copytree(src / "schedules", out / "schedules")
        from ..report.tables import sweep_markdown

        print(sweep_markdown(doc))
        for w in written:
            print(f"  wrote {w}")
        return 0
    sched = load_schedule(p)
    out = Path(a.out) if a.out else p.with_name(p.stem + "-report")
    _check_out(out, a.force, marker="report.md")
    out.mkdir(parents=True, exist_ok=True)
    from ..report import plots as P
    from ..report import tables

    md = tables.schedule_markdown(sched, source=str(p))
    from ..fileio import atomic_write_text

    written = [atomic_write_text(out / "report.md", md), atomic_write_text(out / "nodes.csv", tables.nodes_csv(sched))]
    if sched.steps:
        written += P.schedule_plots(sched, out, stem="schedule", title=f"{sched.strategy} ({sched.status})")
    print(md)
    for w in written:
        print(f"  wrote {w}")
    return 0


# what the tables and plots read from a sweep document, and of what type
_SWEEP_FIELDS = {"context": dict, "identity": dict, "points": list}
_POINT_FIELDS = {
    "key": str,
    "strategy": str,
    "memory": str,
    "runtime": str,
    "status": str,
    "ram_budget_bytes": (int, float, str),
}


def _check_sweep_doc(doc: dict, path: Path) -> None:
    """A sweep document fit to render; BudgetError naming the file and field otherwise (a damaged or
    hand-edited sweep.json), before anything is written."""

    def bad(what: str) -> BudgetError:
        return BudgetError(f"{path}: {what}; the sweep.json is damaged: re-run the sweep command to rebuild it")

    for k, t in _SWEEP_FIELDS.items():
        if not isinstance(doc.get(k), t):
            raise bad(f'"{k}" must be a{"n object" if t is dict else " list"}')
    if not isinstance(doc["context"].get("plain_energy_j"), (int, float)):
        raise bad("context.plain_energy_j must be a number")
    for i, r in enumerate(doc["points"]):
        if not isinstance(r, dict):
            raise bad(f"points[{i}] is not an object")
        for k, t in _POINT_FIELDS.items():
            if not isinstance(r.get(k), t) or isinstance(r.get(k), bool):
                raise bad(f"points[{i}].{k} is missing or not a {getattr(t, '__name__', 'number')}")


def _is_sweep(p: Path) -> bool:
    try:
        return json.loads(p.read_text()).get("format", "").startswith("poet-sweep")
    except (OSError, ValueError, AttributeError, RecursionError):
        return False  # not a sweep: loading it as a schedule says what is wrong with it


def _check_out(out: Path, force: bool, marker: str):
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists() and not force:
        raise FileExistsError(f"{out} is not empty and holds no earlier report; choose another --out or pass --force")


if __name__ == "__main__":  # pragma: no cover - handy for running without the main CLI
    import argparse

    ap = argparse.ArgumentParser(prog="poet")
    register(ap.add_subparsers())
    ns = ap.parse_args()
    sys.exit(ns.func(ns))
