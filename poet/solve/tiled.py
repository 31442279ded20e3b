"""Automatic tiling at the solve entry: the graph to schedule for a model, a device and budgets.

:func:`tiled_problem` is the one call every command uses (``poet solve`` here;
``plan``/``train`` can call it the same way): it prices the untiled graph,
turns the budgets into bytes and seconds against *that* graph (so ``3x`` means
three plain untiled forward+backward passes, tiled or not), and, when the RAM
budget is below the untiled minimum and tiling is not off, swaps in the tiled
graph of :func:`poet.graph.tiling_plan.plan_tiling`.  :func:`tiling_costs`
says afterwards what tiling cost the schedule that was found.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

from ..graph.core import CostedGraph, GraphError
from ..graph.tiling_plan import (
    TILE_AUTO,
    TILE_OFF,
    TilingPlan,
    parse_tile_option,
    plan_tiling,
)
from ..schedule.core import FEASIBLE, NO_SOLUTION, OPTIMAL, PAGING_SERIAL, Budget, Schedule
from .api import costed_graph, make_budget
from .search.stream import stream_schedule


@dataclass(frozen=True)
class TiledProblem:
    """What to solve: the (maybe tiled) costed graph and the budget, and how it came about."""

    graph: CostedGraph  # what the solver schedules
    budget: Budget
    untiled: CostedGraph  # the model's untiled graph on the same device
    plan: TilingPlan | None  # None: the source has no layer shapes (a poet-graph/1 file), never tiled
    device: str | None


def tiled_problem(
    source,
    device=None,
    *,
    memory,
    runtime=None,
    paging_time: str = PAGING_SERIAL,
    batch_size: int = 1,
    fixed_ram_bytes: int | None = None,
    tile=TILE_AUTO,
) -> TiledProblem:
    """Price ``source`` (a zoo model name, a Graph, a CostedGraph or a poet-graph/1 path) and tile it if needed.

    Only zoo models carry the shapes, kernels and strides tiling needs; for any
    other source ``tile`` must be ``auto`` or ``off`` and the graph is used as given.
    """
    from ..hardware.cost import linear_cost_model

    mode = parse_tile_option(tile)
    g0 = costed_graph(source, device, batch_size=batch_size)
    if fixed_ram_bytes is not None:
        g0 = g0.with_fixed_ram(fixed_ram_bytes)
    budget = make_budget(g0, memory, runtime, paging_time)
    from ..graph.generate import is_spec

    # a generated graph (layered:250:1) has no layer shapes either
    is_zoo = isinstance(source, str) and not (source.endswith(".json") or Path(source).is_file() or is_spec(source))
    if not is_zoo:
        if mode not in (TILE_AUTO, TILE_OFF):
            raise GraphError(
                f"--tile {mode} needs a built-in model (--model): a graph file or a structural graph "
                f"does not record the shapes, kernels and strides tiling needs"
            )
        return TiledProblem(g0, budget, g0, None, device if isinstance(device, str) else None)
    plan = plan_tiling(source, budget.ram_bytes, batch_size=batch_size, fixed_ram_bytes=g0.fixed_ram_bytes, tile=mode)
    g = g0
    if plan.tiled:
        g = linear_cost_model(plan.graph, device, g0.fixed_ram_bytes)
    return TiledProblem(g, budget, g0, plan, device if isinstance(device, str) else None)


@dataclass(frozen=True)
class TilingCosts:
    """What tiling cost one schedule, against plain untiled backprop (each node once, nothing paged)."""

    plain_energy_j: float  # untiled forward+backward, every node once
    plain_runtime_s: float
    extra_compute_energy_j: float  # statistics passes, partial sums and the schedule's recomputes
    extra_compute_time_s: float
    paging_energy_j: float  # all page-ins and page-outs of the schedule
    paging_time_s: float
    page_ops: int
    latency_energy_j: float  # the per-operation latency part of paging (what small tiles multiply)
    latency_time_s: float
    graph_extra_flops: float  # FLOPs the tiled graph adds to one plain pass (stats passes, partial sums)


def tiling_costs(
    p: TiledProblem, s: Schedule, read_latency_s: float, write_latency_s: float, storage_power_w: float
) -> TilingCosts | None:
    """Tiling's share of a schedule's energy and time, or None when there is no schedule."""
    t = s.totals
    if t is None:
        return None
    lat_t = t.page_ins * read_latency_s + t.page_outs * write_latency_s
    return TilingCosts(
        plain_energy_j=p.untiled.plain_energy_j,
        plain_runtime_s=p.untiled.plain_runtime_s,
        extra_compute_energy_j=_beyond(t.compute_energy_j, p.untiled.plain_energy_j),
        extra_compute_time_s=_beyond(t.compute_time_s, p.untiled.plain_runtime_s),
        paging_energy_j=t.paging_energy_j,
        paging_time_s=t.paging_time_s,
        page_ops=t.page_ins + t.page_outs,
        latency_energy_j=lat_t * storage_power_w,
        latency_time_s=lat_t,
        graph_extra_flops=_extra_flops(p.plan),
    )


def _beyond(x: float, plain: float) -> float:
    """x - plain, with summation noise (a part in 10^12 of plain) shown as the 0 it is."""
    d = x - plain
    return 0.0 if abs(d) <= 1e-12 * abs(plain) else d


def _extra_flops(plan: TilingPlan | None) -> float:
    if plan is None or not plan.tiled:
        return 0.0
    from ..graph.zoo import build_model

    plain = build_model(plan.model, plan.graph.meta.get("batch_size", 1))
    return math.fsum(nd.flops for nd in plan.graph.nodes) - math.fsum(nd.flops for nd in plain.nodes)


FALLBACK_SECONDS = 60.0
# above this many nodes the portfolio (MILP, covers, guided rules) is not tried: its phases do not answer a
# graph this size within minutes, and the streaming page rule (linear in the graph) answers it in seconds
PORTFOLIO_MAX_NODES = 12_000


def stream_page_schedule(p: TiledProblem, strategy: str, opts, why: str) -> Schedule:
    """The streaming page rule's schedule for the problem, validated, with its gap to plain backprop
    energy (every node once, nothing paged: a lower bound of any schedule); ``why`` it was used."""
    from ..schedule.report import SolveReport
    from .result import checked, relative_gap

    t0 = time.perf_counter()
    found = stream_schedule(p.graph, p.budget, time_limit=opts.time_limit_s, stop=opts.stop)
    bound = p.graph.plain_energy_j
    if found is None:
        return Schedule(
            graph=p.graph,
            budget=p.budget,
            steps=(),
            status=NO_SOLUTION,
            strategy=strategy,
            report=SolveReport(
                method="streaming page rule",
                message=f"{why}; the streaming page rule found no schedule within the budgets "
                "(paging breaks the deadline, or its time ran out): a longer deadline or more RAM will help",
                bound_energy_j=bound,
                solve_seconds=time.perf_counter() - t0,
                time_limit_s=opts.time_limit_s,
            ),
        )
    s = checked(Schedule(graph=p.graph, budget=p.budget, steps=tuple(found[0]), status=FEASIBLE, strategy=strategy))
    gap = relative_gap(s.totals.energy_j, bound)
    s.status = OPTIMAL if gap <= opts.gap else FEASIBLE
    s.report = SolveReport(
        method="streaming page rule",
        message=f"{why}; the streaming page rule's schedule is {gap:.2%} above the lower bound "
        "(plain backprop: every node once, nothing paged)",
        energy_j=s.totals.energy_j,
        bound_energy_j=bound,
        gap=gap,
        solve_seconds=time.perf_counter() - t0,
        time_limit_s=opts.time_limit_s,
    )
    return s


def solve_tiled(p: TiledProblem, strategy: str, opts) -> Schedule:
    """``solve_costed`` on the problem's graph, with the streaming page rule for large tiled graphs.

    A tiled graph above :data:`PORTFOLIO_MAX_NODES` nodes goes to the streaming page rule
    (:func:`~poet.solve.search.stream.stream_schedule`, the portfolio's one-pass paging schedule)
    alone: validated, reported as what it is, with its gap to plain
    backprop energy.  A smaller one goes to the portfolio; when that ends its time without a
    schedule (it can spend a short limit on its lower bound and guided rules), the page rule is
    tried as well and reported as ``streaming page rule (tiling fallback)``, with its gap to the
    best proven bound.
    """
    from .api import solve_costed
    from .result import relative_gap

    tiled = strategy == "poet" and p.plan is not None and p.plan.tiled
    if tiled and len(p.graph) > PORTFOLIO_MAX_NODES and p.budget.ram_bytes >= p.graph.min_ram_bytes():
        return stream_page_schedule(
            p,
            strategy,
            opts,
            f"the tiled graph has {len(p.graph):,} nodes, more than the portfolio answers in minutes "
            f"({PORTFOLIO_MAX_NODES:,})",
        )
    s = solve_costed(p.graph, p.budget, strategy, opts)
    if s.steps or s.status != NO_SOLUTION or not tiled:
        return s
    t0 = time.perf_counter()
    fallback = stream_page_schedule(p, strategy, dataclasses.replace(opts, time_limit_s=FALLBACK_SECONDS), "fallback")
    if not fallback.steps:
        return s
    # every node is computed at least once: plain energy is a lower bound, the cover's may be higher
    bound = max(p.graph.plain_energy_j, s.report.structural_bound_energy_j or 0.0, s.report.bound_energy_j or 0.0)
    gap = relative_gap(fallback.totals.energy_j, bound)
    fallback.status = OPTIMAL if gap <= opts.gap else FEASIBLE
    fallback.report = s.report.with_(
        method="streaming page rule (tiling fallback)",
        energy_j=fallback.totals.energy_j,
        bound_energy_j=bound,
        gap=gap,
        solve_seconds=s.report.solve_seconds + time.perf_counter() - t0,
        message=(
            f"the portfolio found no schedule in its time ({s.report.message}); the page rule on the tiled "
            f"graph's streaming order did, {gap:.2%} above the proven lower bound"
        ),
    )
    return fallback
