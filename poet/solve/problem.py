"""What to solve: the costed graph and the budget, and the tiled graph when the budget needs one.

:func:`tiled_problem` prices the source (a zoo model name, a generated graph's spec, a Graph, a
CostedGraph or a ``poet-graph/1`` path), turns the budgets into bytes and seconds against the *untiled*
graph (so ``3x`` means three plain untiled forward+backward passes, tiled or not), and, when the RAM
budget is below the untiled minimum and tiling is not off, swaps in the tiled graph of
:func:`poet.graph.tiling_plan.plan_tiling`.  :func:`tiling_costs` says afterwards what tiling cost the
schedule that was found.  The front door (:func:`poet.solve.api.solve`) and ``poet solve`` start here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..graph.core import CostedGraph, Graph, GraphError
from ..graph.io import load_graph
from ..graph.tiling_plan import TILE_AUTO, TILE_OFF, TilingPlan, parse_tile_option, plan_tiling
from ..graph.weight_traffic import staging_default
from ..graph.weights import FLASH, PLACEMENTS, STREAM, WeightStore
from ..graph.zoo import build_model
from ..hardware.cost import linear_cost_model
from ..hardware.weights_cost import place_weights, weight_store
from ..schedule.core import PAGING_MODES, PAGING_SERIAL, Budget, Schedule
from ..units import MAX_BYTES, BudgetError, parse_bytes, parse_percent, parse_runtime
from .baselines.keep_all import keep_all_peak

# fixed RAM given as a multiple of the model's parameters: the weights, + gradients (SGD), + two moments (Adam)
PARAMETER_MULTIPLES = {"params": 1, "sgd": 2, "adam": 4}


def costed_graph(graph, device=None, *, batch_size: int = 1) -> CostedGraph:
    """Accept a CostedGraph, a structural Graph (+device), a zoo model name (+device) or a JSON path."""
    if isinstance(graph, CostedGraph):
        g = graph
    elif isinstance(graph, Graph):
        if device is None:
            raise BudgetError("a structural graph needs a device to be priced (device='a72', ...)")
        g = linear_cost_model(graph, device)
    elif isinstance(graph, (str, Path)) and (str(graph).endswith(".json") or Path(graph).is_file()):
        g = load_graph(graph)
    elif isinstance(graph, str):
        if device is None:
            raise BudgetError(f"model {graph!r} needs a device (device='a72', see `poet devices`)")
        g = linear_cost_model(build_model(graph, batch_size=batch_size), device)
    else:
        raise TypeError(f"cannot make a costed graph from {type(graph).__name__}")
    return g


def fixed_ram_of(value, g: CostedGraph) -> int | None:
    """Fixed RAM in bytes: bytes (``1200000``, ``"1.2MB"``), or a multiple of the model's parameters
    (``params``, ``sgd``: with gradients, ``adam``: with gradients and two moments); None: none given."""
    if value is None:
        return None
    mult = PARAMETER_MULTIPLES.get(value.lower()) if isinstance(value, str) else None
    if mult is None:
        return parse_bytes(value, "fixed RAM", allow_zero=True)
    pb = g.meta.get("param_bytes")
    if not pb:
        raise BudgetError(
            f"fixed RAM {value!r} (--fixed-ram {value}) needs the model's parameter bytes, which this graph "
            f"does not carry; give bytes instead (e.g. --fixed-ram 1.2MB, or fixed_ram='1.2MB' from Python)"
        )
    return mult * int(pb)


def make_budget(g: CostedGraph, memory, runtime=None, paging_time: str = PAGING_SERIAL) -> Budget:
    if paging_time not in PAGING_MODES:
        raise BudgetError(f"paging_time must be one of {', '.join(PAGING_MODES)}, got {paging_time!r}")
    if isinstance(memory, str) and memory.strip().endswith("%"):
        frac = parse_percent(memory)
        ram = int(g.fixed_ram_bytes + frac * (keep_all_peak(g) - g.fixed_ram_bytes))
        if ram > MAX_BYTES:
            raise BudgetError(f"memory budget {memory} is above 2^53 B (9 PB), more than any device holds")
    else:
        ram = parse_bytes(memory)
    return Budget(ram_bytes=ram, runtime_s=parse_runtime(runtime, g.plain_runtime_s), paging_time=paging_time)


@dataclass(frozen=True)
class TiledProblem:
    """What to solve: the (maybe tiled) costed graph and the budget, and how it came about."""

    graph: CostedGraph  # what the solver schedules
    budget: Budget
    untiled: CostedGraph  # the model's untiled graph on the same device
    plan: TilingPlan | None  # None: the source has no layer shapes (a poet-graph/1 file), never tiled
    device: str | None

    @property
    def tiled(self) -> bool:
        """The graph to solve is the tiling planner's rewrite (the rules for tiled graphs apply)."""
        return self.plan is not None and self.plan.tiled


def tiled_problem(
    source,
    device=None,
    *,
    memory,
    runtime=None,
    paging_time: str = PAGING_SERIAL,
    batch_size: int = 1,
    fixed_ram=None,
    tile=TILE_AUTO,
    weights: str = FLASH,
    staging=None,
    max_tile_nodes: int | None = None,
    max_tile_seconds: float | None = None,
    max_tile_nodes_why: str = "",
    progress=None,
) -> TiledProblem:
    """Price ``source`` (a zoo model name, a Graph, a CostedGraph or a poet-graph/1 path) and tile it if needed.

    ``fixed_ram``: bytes, or ``params``/``sgd``/``adam`` (:func:`fixed_ram_of`).  Only zoo models carry the
    shapes, kernels and strides tiling needs; for any other source ``tile`` must be ``auto`` or ``off``
    and the graph is used as given.  ``weights``/``staging``: where the parameters live
    (:mod:`poet.graph.weights`; ``stream`` needs the layers' parameters: a zoo model or a Graph).
    ``max_tile_nodes`` / ``max_tile_seconds``: auto tiling's caps
    (:func:`~poet.graph.tiling_plan.plan_tiling`'s ``max_nodes`` / ``max_seconds``; None: its defaults),
    ``max_tile_nodes_why`` why the node cap is what it is, ``progress`` told what planning is doing.
    """
    from ..graph.generate import is_spec

    mode = parse_tile_option(tile)
    g0 = costed_graph(source, device, batch_size=batch_size)
    fixed = fixed_ram_of(fixed_ram, g0)
    if fixed is not None:
        if weights != FLASH and isinstance(fixed_ram, str) and fixed_ram.lower() in PARAMETER_MULTIPLES:
            raise BudgetError(
                f"--fixed-ram {fixed_ram} counts the parameters in RAM, and --weights {weights} places them "
                f"too; give one (--weights ram is --fixed-ram params), or --fixed-ram in bytes"
            )
        g0 = g0.with_fixed_ram(fixed)
    # a generated graph (layered:250:1) has no layer shapes either
    is_zoo = isinstance(source, str) and not (source.endswith(".json") or Path(source).is_file() or is_spec(source))
    structure = placed = None
    if g0.weights is not None and g0.placement != FLASH:  # a graph priced with a placement already
        if weights not in (FLASH, g0.placement) or staging is not None:
            raise BudgetError(
                f"this graph was priced with --weights {g0.placement} (its file records it); it cannot be "
                f"placed again: drop --weights/--staging, or price the model again with --model NAME"
            )
    elif weights != FLASH or staging is not None:
        structure = _structure(source, weights, staging, batch_size)
    if structure is not None:
        first = make_budget(g0, memory, runtime, paging_time)
        stage = staging_default(first.ram_bytes) if staging is None else parse_bytes(staging, "--staging")
        placed = weight_store(structure, device, weights, stage)
        g0 = place_weights(g0, structure, placed)
    budget = make_budget(g0, memory, runtime, paging_time)
    if not is_zoo:
        if mode not in (TILE_AUTO, TILE_OFF):
            raise GraphError(
                f"--tile {mode} needs a built-in model (--model): a graph file or a structural graph "
                f"does not record the shapes, kernels and strides tiling needs"
            )
        return TiledProblem(g0, budget, g0, None, device if isinstance(device, str) else None)
    plan = plan_tiling(
        source,
        budget.ram_bytes,
        batch_size=batch_size,
        fixed_ram_bytes=g0.fixed_ram_bytes,
        tile=mode,
        max_nodes=max_tile_nodes,
        max_seconds=max_tile_seconds,
        nodes_why=max_tile_nodes_why,
        progress=progress,
    )
    g = g0
    if plan.tiled:
        if progress is not None:
            progress(f"pricing the tiled graph ({plan.nodes_after:,} nodes)")
        g = linear_cost_model(plan.graph, device, g0.fixed_ram_bytes)
        if placed is not None:  # the staging buffer / parameters are in g0's fixed RAM already
            g = place_weights(g.with_fixed_ram(g0.fixed_ram_bytes - _placed_ram(placed)), plan.graph, placed)
    return TiledProblem(g, budget, g0, plan, device if isinstance(device, str) else None)


def _placed_ram(store: WeightStore) -> int:
    return store.param_bytes if store.placement == "ram" else store.staging_bytes if store.streamed else 0


def _structure(source, weights: str, staging, batch_size: int) -> Graph | None:
    """The structural graph whose layers' parameters a placement needs; a clear error when there is none."""
    if weights not in PLACEMENTS:
        raise BudgetError(f"--weights {weights!r}: choose one of {', '.join(PLACEMENTS)}")
    if staging is not None and weights != STREAM:
        raise BudgetError(f"--staging is the staging buffer of --weights stream; it means nothing with {weights}")
    if isinstance(source, Graph):
        return source
    if isinstance(source, str) and not (source.endswith(".json") or Path(source).is_file()):
        from ..graph.generate import is_spec

        if not is_spec(source):
            return build_model(source, batch_size=batch_size)
    raise BudgetError(
        f"--weights {weights} needs each layer's parameters, which a costed graph or a generated graph does "
        f"not carry; use --model NAME (or pass a structural poet.graph.Graph), or --weights flash"
    )


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
    plain = build_model(plan.model, plan.graph.meta.get("batch_size", 1))
    return math.fsum(nd.flops for nd in plan.graph.nodes) - math.fsum(nd.flops for nd in plain.nodes)
