"""One point of a sweep: solving it (in a worker process, a Ray task or in turn) and its CSV row.

Everything here is picklable in and out, so any backend can run it: a point goes out as plain
strings and the spec as a dict; a row (a dict of :data:`COLUMNS`) and the schedule's JSON form come
back.  The driver validates that schedule again before it writes it (see :mod:`.runner`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..graph.tiling_plan import split_items
from .grid import COLUMNS, TOTALS_COLUMNS, point_key, point_tiles

_GRAPHS: dict = {}


@dataclass(frozen=True)
class SolverFields:
    """What a sweep row keeps of a schedule's solver report."""

    gap: float | None
    bound_energy_j: float | None
    method: str | None
    message: str
    solve_seconds: float | None


def solver_fields(s) -> SolverFields:
    """The solver report of schedule ``s``, read in this one place (its type may change)."""
    r = s.report
    return SolverFields(
        gap=r.gap, bound_energy_j=r.bound_energy_j, method=r.method, message=r.message, solve_seconds=r.solve_seconds
    )


def graph_of(spec_d: dict):
    """The costed graph of a sweep, built once per process."""
    from ..solve.api import costed_graph

    k = (spec_d["model"], spec_d["device"], spec_d["batch_size"])
    if k not in _GRAPHS:
        _GRAPHS[k] = costed_graph(spec_d["model"], spec_d["device"], batch_size=spec_d["batch_size"])
    return _GRAPHS[k]


def budget_of(g, spec_d: dict, memory: str, runtime: str):
    from ..solve.api import make_budget

    return make_budget(g, memory, None if runtime in ("none", "inf", "") else runtime, spec_d["paging_time"])


def solve_point(spec_d: dict, strategy: str, memory: str, runtime: str, graph=None) -> tuple[dict, dict | None]:
    """Solve one point; returns (row, schedule dict or None).  ``graph``: the costed graph, if the
    caller ships it (a Ray cluster's machines may not have the model's file); else it is built here."""
    from ..schedule.io import schedule_to_dict
    from ..solve.api import SolveOptions, solve_costed

    g = graph if graph is not None else graph_of(spec_d)
    b = budget_of(g, spec_d, memory, runtime)
    opts = SolveOptions(
        time_limit_s=spec_d["time_limit_s"],
        threads=spec_d["threads"],
        gap=spec_d["gap"],
        method=spec_d.get("method", "auto"),
        find_min_budgets=False,
    )
    t0 = time.perf_counter()
    plan = None
    try:
        if point_tiles(spec_d, g.min_ram_bytes(), b.ram_bytes):
            plan, s = solve_tiled_point(spec_d, g, strategy, memory, runtime, opts)
        else:
            s = solve_costed(g, b, strategy, opts)
    except Exception as e:  # noqa: BLE001 - a failing point must not kill the sweep; it is recorded
        row = make_row(spec_d, g, strategy, memory, runtime, b, None)
        row.update(status="error", message=f"{type(e).__name__}: {e}", solve_seconds=time.perf_counter() - t0)
        return row, None
    row = make_row(spec_d, g, strategy, memory, runtime, b, s)
    if plan is not None and plan.tiled:
        row.update(tiled_nodes=len(plan.graph), tiling=tiling_text(plan.counts))
    sf = solver_fields(s)
    row["solve_seconds"] = sf.solve_seconds if sf.solve_seconds is not None else time.perf_counter() - t0
    return row, (schedule_to_dict(s) if s.steps else None)


def tiled_graph(spec_d: dict, memory: str, runtime: str):
    """The ``TiledProblem`` of a point (``poet solve``'s automatic tiling, with the sweep's ``--tile``)."""
    from ..solve.tiled import tiled_problem

    return tiled_problem(
        spec_d["model"],
        spec_d["device"],
        memory=memory,
        runtime=None if runtime in ("none", "inf", "") else runtime,
        paging_time=spec_d["paging_time"],
        batch_size=spec_d["batch_size"],
        tile=spec_d.get("tile", "auto"),
    )


def solve_tiled_point(spec_d: dict, g, strategy: str, memory: str, runtime: str, opts):
    """``(tiling plan, schedule)`` of a point solved as ``poet solve`` would: on the tiled graph when
    the plan splits something (the plan's facts go into the schedule's solver record), else on ``g``."""
    from ..solve.api import solve_costed
    from ..solve.tiled import solve_tiled

    p = tiled_graph(spec_d, memory, runtime)
    if p.plan is None or not p.plan.tiled:
        return p.plan, solve_costed(g, p.budget, strategy, opts)
    s = solve_tiled(p, strategy, opts)
    s.report = s.report.with_(tiling=p.plan.summary())
    return p.plan, s


def tiling_text(counts: dict) -> str:
    """What a tiling split, short enough for a CSV cell."""
    split = split_items(counts)
    items = [f"{k} {text}" for k, _, text in split]
    more = f", ... and {len(items) - 3} more" if len(items) > 3 else ""
    return f"{len(items)} layers split into up to {max(n for _, n, _ in split)} tiles: " + ", ".join(items[:3]) + more


def make_row(spec_d: dict, g, strategy: str, memory: str, runtime: str, b, s) -> dict:
    """The CSV row of a point: its budgets always, and the schedule's numbers when ``s`` is given."""
    from ..solve.baselines import keep_all_peak

    span = keep_all_peak(g) - g.fixed_ram_bytes
    row = {c: None for c in COLUMNS}
    row.update(
        key=point_key(strategy, memory, runtime),
        model=spec_d["model"],
        device=spec_d["device"],
        strategy=strategy,
        paging_time=b.paging_time,
        memory=memory,
        ram_budget_bytes=b.ram_bytes,
        ram_fraction=(b.ram_bytes - g.fixed_ram_bytes) / span if span > 0 else None,
        runtime=runtime,
        runtime_budget_s=b.runtime_s,
        runtime_budget_x=(b.runtime_s / g.plain_runtime_s) if b.runtime_s and g.plain_runtime_s else None,
    )
    if s is None:
        return row
    sf = solver_fields(s)
    row.update(
        status=s.status, gap=sf.gap, bound_energy_j=sf.bound_energy_j, method=sf.method, message=sf.message[:300]
    )
    set_totals(row, s.totals)
    return row


def set_totals(row: dict, t) -> None:
    """Copy a validated schedule's totals into its row (nothing when there is no schedule)."""
    if t is None:
        return
    row.update({k: getattr(t, k) for k in TOTALS_COLUMNS})


def clear_totals(row: dict) -> None:
    """Empty a row's totals: its schedule was refused."""
    row.update(dict.fromkeys(TOTALS_COLUMNS))
