"""The ``poet sweep`` and ``poet report`` subcommands (registered into the main CLI)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..units import BudgetError

SWEEP_EXAMPLE = ("poet sweep --model resnet18_cifar --device a72 --memory 10%..100% --steps 10 "
                 "--runtime 1.0x,1.2x,2x --out sweeps/resnet18_cifar-a72")


def register(subparsers) -> None:
    """Add ``sweep`` and ``report`` to an argparse subparsers object."""
    from ..schedule.core import PAGING_MODES
    from ..sweep import DEFAULT_STRATEGIES

    s = subparsers.add_parser(
        "sweep", help="solve a grid of RAM x runtime budgets for several strategies, with plots",
        description="Solve every (strategy, RAM budget, runtime budget) point of a grid in parallel, "
                    "write DIR/sweep.csv, DIR/sweep.json and plots.  Re-running the same command resumes: "
                    "finished points are skipped.  Example: " + SWEEP_EXAMPLE)
    s.add_argument("--model", required=True, help="zoo model name (see `poet models`) or a poet-graph/1 JSON file")
    s.add_argument("--device", help="device profile (see `poet devices`); not needed for a costed graph file")
    s.add_argument("--memory", default="10%..100%",
                   help="RAM budgets: a range LO%%..HI%% (with --steps) or a list like 20%%,50%%,3MB "
                        "(percent = of the way from fixed RAM to the keep-all peak; default %(default)s)")
    s.add_argument("--steps", type=int, default=10, help="points in a --memory range (default %(default)s)")
    s.add_argument("--runtime", default="1.0x,1.2x,2x",
                   help="deadlines, comma-separated: multiples of one plain pass (1.2x), seconds (30s) or "
                        "none (default %(default)s)")
    s.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES),
                   help="comma-separated strategies (default %(default)s)")
    s.add_argument("--out", help="output directory (default sweep-MODEL-DEVICE)")
    s.add_argument("--jobs", type=int, default=None, help="points solved in parallel (default: CPU cores)")
    s.add_argument("--time-limit", type=float, default=60.0, help="seconds per MILP point (default %(default)s)")
    s.add_argument("--paging-time", choices=PAGING_MODES, default="serial",
                   help="how paging time counts against the deadline (default %(default)s)")
    s.add_argument("--batch-size", type=int, default=1)
    s.add_argument("--gap", type=float, default=1e-3, help="relative MIP gap counted as optimal")
    s.add_argument("--method", default="auto",
                   help="MILP solve variant for poet/remat/paging (see poet.solve.milp.METHODS; default %(default)s)")
    s.add_argument("--retry", action="store_true", help="on resume, solve again points that ended without a "
                                                      "proof (no_solution, feasible, error)")
    s.add_argument("--force", action="store_true",
                   help="write into --out even if it holds other files or a different sweep")
    s.add_argument("--no-plots", action="store_true", help="only the CSV and JSON files")
    s.add_argument("--point", help="schedule to draw, as STRATEGY|MEMORY|RUNTIME (default: the POET point "
                                   "with the largest saving over the best single technique)")
    s.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    s.set_defaults(func=cmd_sweep)

    r = subparsers.add_parser(
        "report", help="tables and plots of a saved schedule (or re-plot a sweep directory)",
        description="Render a poet-schedule/1 file: summary and per-node tables, the schedule picture "
                    "(stages x nodes) and RAM over the steps against the budget.  Given a sweep directory "
                    "(or its sweep.json) it redraws the sweep's tables and plots.")
    r.add_argument("path", help="schedule JSON, or a sweep directory / sweep.json")
    r.add_argument("--out", help="output directory (default: SCHEDULE-report/, or the sweep directory)")
    r.add_argument("--force", action="store_true", help="write into --out even if it holds other files")
    r.add_argument("--point", help="for a sweep: the schedule to draw, STRATEGY|MEMORY|RUNTIME")
    r.set_defaults(func=cmd_report)


def cmd_sweep(a) -> int:
    from ..sweep import SweepSpec, parse_list, parse_memory_range, run_sweep

    if a.jobs is not None and a.jobs < 1:
        raise BudgetError("--jobs must be at least 1")
    jobs = a.jobs or os.cpu_count() or 1
    spec = SweepSpec(model=a.model, device=a.device, memories=parse_memory_range(a.memory, a.steps),
                     runtimes=parse_list(a.runtime), strategies=parse_list(a.strategies),
                     paging_time=a.paging_time, time_limit_s=a.time_limit, batch_size=a.batch_size, gap=a.gap,
                     threads=None, method=a.method)
    out = Path(a.out or f"sweep-{Path(a.model).stem}-{a.device or 'graph'}")
    doc = run_sweep(spec, out, jobs=jobs, force=a.force, retry=a.retry, progress=not a.quiet)
    written = render_sweep(out, doc, point=a.point, plots=not a.no_plots)
    print(f"{len(doc['points'])} points in {out / 'sweep.csv'} and {out / 'sweep.json'}")
    for w in written:
        print(f"  wrote {w}")
    return 0


def render_sweep(out: Path, doc: dict, point: str | None = None, plots: bool = True) -> list[Path]:
    from . import tables
    written = []
    md = tables.sweep_markdown(doc)
    (out / "summary.md").write_text(md)
    written.append(out / "summary.md")
    if plots:
        from . import plots as P
        written += P.sweep_plots(doc, out)
        key = point or choose_point(doc)
        if key:
            row = next((r for r in doc["points"] if r["key"] == key), None)
            if row is None:
                raise BudgetError(f"--point {key!r} is not a point of this sweep")
            if not row.get("schedule_file"):
                raise BudgetError(f"point {key!r} has no schedule ({row.get('status')})")
            from ..schedule.io import load_schedule
            sched = load_schedule(out / row["schedule_file"])
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
        out = Path(a.out) if a.out else (p if p.is_dir() else p.parent)
        if a.out:
            _check_out(out, a.force, marker="summary.md")
            out.mkdir(parents=True, exist_ok=True)
            if out != (p if p.is_dir() else p.parent):
                # schedules are referenced relative to the sweep directory
                import shutil
                src = p if p.is_dir() else p.parent
                if (src / "schedules").is_dir() and not (out / "schedules").exists():
                    shutil.copytree(src / "schedules", out / "schedules")
        written = render_sweep(out, doc, point=a.point)
        from .tables import sweep_markdown
        print(sweep_markdown(doc))
        for w in written:
            print(f"  wrote {w}")
        return 0
    sched = load_schedule(p)
    out = Path(a.out) if a.out else p.with_name(p.stem + "-report")
    _check_out(out, a.force, marker="report.md")
    out.mkdir(parents=True, exist_ok=True)
    from . import tables
    from . import plots as P
    md = tables.schedule_markdown(sched, source=str(p))
    (out / "report.md").write_text(md)
    (out / "nodes.csv").write_text(tables.nodes_csv(sched))
    written = [out / "report.md", out / "nodes.csv"]
    if sched.steps:
        written += P.schedule_plots(sched, out, stem="schedule", title=f"{sched.strategy} ({sched.status})")
    print(md)
    for w in written:
        print(f"  wrote {w}")
    return 0


def _is_sweep(p: Path) -> bool:
    try:
        return json.loads(p.read_text()).get("format", "").startswith("poet-sweep")
    except (OSError, ValueError, AttributeError):
        return False


def _check_out(out: Path, force: bool, marker: str):
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists() and not force:
        raise FileExistsError(f"{out} is not empty and holds no earlier report; choose another --out "
                              f"or pass --force")


if __name__ == "__main__":  # pragma: no cover - handy for running without the main CLI
    import argparse
    ap = argparse.ArgumentParser(prog="poet")
    register(ap.add_subparsers())
    ns = ap.parse_args()
    sys.exit(ns.func(ns))
