"""Solving a zoo schedule again for a tighter RAM budget: tile the network again for it, then solve.

:func:`poet.cbackend.fit.fit_arena` solves again with a lower budget when an arena does not fit
(holes between blocks, or a target whose RAM region also holds the stack and statics).  A zoo
network's schedule is of a graph tiled *for its budget*: below the tiled minimum of that graph no
schedule exists, so the same graph cannot be solved for less.  :func:`zoo_resolver` tiles the
network again for the lower budget (:func:`poet.graph.tiling_plan.plan_tiling`: finer rows, or
channel groups where rows are already single) and solves that graph with the schedule's device,
deadline, paging model and strategy, as ``poet solve`` does (the streaming page rule for very large
graphs).  The schedule it returns names its tiling in its graph's meta, so the compiled program is
built from it (:func:`poet.cbackend.lower_zoo.zoo_program`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..graph.tiling_plan import plan_tiling
from ..graph.zoo import MODELS, build_model
from ..schedule.core import NO_SOLUTION, Budget, Schedule
from ..schedule.report import SolveReport

__all__ = ["zoo_resolver"]

MAX_SOLVE_SECONDS = 240.0  # as poet solve gives a tiled graph


def zoo_resolver(program, progress: Callable[[str], None] | None = None):
    """A ``solver(schedule, ram_bytes, seconds_left)`` for :func:`~poet.cbackend.fit.fit_arena` that
    tiles ``program``'s network (a :class:`~poet.cbackend.lower_zoo.ZooProgram`) again for
    ``ram_bytes`` (no schedule when the schedule's graph does not name its device: it cannot be priced
    again)."""
    from ..hardware.cost import linear_cost_model
    from ..hardware.weights_cost import place_weights
    from ..solve.api import SolveOptions
    from ..solve.tiled import TiledProblem, solve_tiled
    from .fit import refit_policy

    def solve_again(schedule: Schedule, ram: int, left: float) -> Schedule:
        device = (schedule.graph.meta or {}).get("device")
        fixed = schedule.graph.fixed_ram_bytes
        budget = Budget(ram, schedule.budget.runtime_s, schedule.budget.paging_time)
        if device is None:
            why = "the schedule's graph does not name the device it was priced for: it cannot be tiled again"
            return Schedule(schedule.graph, budget, (), NO_SOLUTION, schedule.strategy, report=SolveReport(message=why))
        model = program.name if program.name in MODELS else program.layers
        plan = plan_tiling(model, ram, batch_size=program.batch_size, fixed_ram_bytes=fixed)
        n_ch = sum(1 for k in plan.counts if k.endswith(":channels"))
        if progress:
            progress(
                f"tiled {program.name} again for {ram:,} B: {len(plan.graph):,} nodes"
                + (f", {n_ch} layers split into channel groups" if n_ch else "")
                + f", tiled minimum {plan.tiled_min_bytes:,} B"
            )
        store = schedule.graph.weights
        placed = store is not None and store.placement != "flash"
        # the parameters or the staging buffer are in the fixed RAM already; place_weights adds them again
        own = (store.param_bytes if store.placement == "ram" else store.staging_bytes) if placed else 0

        def price(graph):
            c = linear_cost_model(graph, device, fixed - own)
            return place_weights(c, graph, store) if placed else c

        g = price(plan.graph)
        if not plan.fits:
            report = SolveReport(method="tiling", message=f"below the tiled minimum: {plan.limit}")
            return Schedule(g, budget, (), NO_SOLUTION, schedule.strategy, report=report)
        plain = build_model(program.name, program.batch_size) if program.name in MODELS else None
        untiled = price(plain) if plain is not None else g
        problem = TiledProblem(g, budget, untiled, plan, device)
        opts = SolveOptions(time_limit_s=max(1.0, min(left, MAX_SOLVE_SECONDS)), policy=refit_policy())
        s = solve_tiled(problem, schedule.strategy, opts)
        s.report = s.report.with_(tiling=plan.summary())
        return s

    return solve_again
