"""``poet.plan``: a real PyTorch module in, an executable schedule out.

import poet
plan = poet.plan(model, (x,), loss_fn=torch.nn.CrossEntropyLoss(), targets=(y,),
                 device="m4", memory="256KB", runtime="2x")
print(plan)                     # budget, status, predicted peak / time / energy
plan.save("plan.json")          # poet-schedule/1
result = plan.run()             # executes on real tensors; gradients land in .grad
print(result.table())           # predicted vs measured
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .graph.tile_option import tile_count
from .report.text import cache_note
from .schedule.core import FEASIBLE, PAGING_SERIAL, Schedule
from .units import fmt_bytes, fmt_energy, fmt_seconds

if TYPE_CHECKING:  # types only: importing these needs torch
    from .execute.executor import Executor
    from .execute.tiled import TilingChoice
    from .graph.torch_program import TorchProgram


@dataclass
class Plan:
    """A traced training step, its costed graph and the schedule chosen for it."""

    program: TorchProgram  # the traced step (tiled when tiling was needed)
    schedule: Schedule
    device: str
    executor_options: dict = field(default_factory=dict)
    tiling: TilingChoice | None = None  # when tiling was considered
    untiled: TorchProgram | None = None  # the program before tiling (a compiled tiled step's reference)
    # (ram_bytes, seconds) -> (program, schedule): the step planned again for less RAM, tiled again
    replan: Callable[[int, float], tuple[TorchProgram, Schedule]] | None = field(default=None, repr=False)
    _executor: Executor | None = field(default=None, repr=False)
    threads: int = 0  # torch threads to run with (a measured profile's); 0: leave torch's setting

    # ---- inspection
    @property
    def graph(self):
        """The costed graph the schedule is for."""
        return self.schedule.graph

    @property
    def feasible(self) -> bool:
        return self.schedule.feasible

    @property
    def steps(self):
        return self.schedule.steps

    @property
    def totals(self):
        return self.schedule.totals

    def __str__(self) -> str:
        s, g, p = self.schedule, self.schedule.graph, self.program
        lines = [
            p.summary(),
            f"device {self.device}; budget {fmt_bytes(s.budget.ram_bytes)} RAM"
            + (f", {fmt_seconds(s.budget.runtime_s)}" if s.budget.runtime_s else ", no deadline")
            + f"; strategy {s.strategy}: {s.status}"
            + (f" (gap {s.report.gap:.2%})" if s.status == FEASIBLE and s.report.gap is not None else "")
            + (f"; {cache_note(s.report)}" if s.report.cache is not None else ""),
        ]
        if self.tiling is not None:
            lines += self.tiling.lines()
        if s.totals:
            t = s.totals
            lines.append(
                f"predicted: peak {fmt_bytes(t.peak_ram_bytes)} (fixed {fmt_bytes(g.fixed_ram_bytes)}), "
                f"time {fmt_seconds(t.runtime_s)} (plain {fmt_seconds(g.plain_runtime_s)}), "
                f"energy {fmt_energy(t.energy_j)}; {len(s.steps)} instructions, "
                f"{t.recomputes} recomputes, {t.page_outs} page-outs, {t.page_ins} page-ins"
            )
        else:
            lines.append(s.report.message or "no schedule")
        return "\n".join(lines)

    def save(self, path) -> None:
        """Write the schedule (with its costed graph) as a ``poet-schedule/1`` JSON file."""
        from .schedule.io import save_schedule

        save_schedule(self.schedule, Path(path))

    # ---- execution
    @property
    def executor(self):
        if self._executor is None:
            from .execute.executor import Executor

            self._executor = Executor(self.program, **self.executor_options)
        return self._executor

    def run(self, inputs=None, targets=(), *, optimizer=None, apply: bool = True, callback=None):
        """Execute one training step (default batch: the example batch) -> :class:`RunResult`.

        After the whole schedule succeeded: buffers updated, ``.grad`` set
        (accumulated like ``backward()``), ``optimizer.step()`` if given.
        """
        batch = None
        if inputs is not None:
            inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
            targets = tuple(targets) if isinstance(targets, (tuple, list)) else (targets,)
            batch = inputs + targets
        if not self.threads:
            return self.executor.run(self.schedule, batch, optimizer=optimizer, apply=apply, callback=callback)
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)  # as the profile that priced the plan was measured
        try:
            return self.executor.run(self.schedule, batch, optimizer=optimizer, apply=apply, callback=callback)
        finally:
            torch.set_num_threads(before)

    execute = run

    def compile(self, target: str = "host", out=None, *, run: bool = False, check: bool = False, **options):
        """Compile the schedule to a C project in ``out`` for ``target`` (``host`` or ``qemu-m4``),
        and optionally build, run and check it against PyTorch -> :class:`poet.cbackend.CompileResult`.

        ``options`` go to :func:`poet.cbackend.compiler.compile_program` (``batches``, ``steps``,
        ``lr``, ``momentum``, ``params_in_ram``, ``force``, ``progress`` ...).  When the schedule's
        arena does not fit the budget, the step is planned again for less RAM (tiled again if need be).
        """
        from .cbackend.compiler import compile_program

        if out is None:
            raise ValueError("plan.compile needs out=: the folder to write the C project to")
        options.setdefault("replan", self.replan)
        return compile_program(
            self.program,
            self.schedule,
            target=target,
            out=out,
            run=run,
            check=check,
            reference_program=self.untiled,
            **options,
        )

    def train_step(self, inputs, targets=(), optimizer=None):
        """``optimizer.zero_grad(); loss.backward(); optimizer.step()`` via the schedule; returns the result."""
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        return self.run(inputs, targets, optimizer=optimizer)


def plan(
    model,
    example_inputs,
    loss_fn=None,
    *,
    targets=(),
    device="m4",
    memory="100%",
    runtime=None,
    strategy: str = "poet",
    granularity: str = "aten",
    paging_time: str = PAGING_SERIAL,
    optimizer=None,
    time_limit: float | None = 60.0,
    fixed_ram=None,
    paging_dir=None,
    swap_file=None,
    max_nodes=None,
    costs: str = "model",
    measure_runs: int = 20,
    tile="auto",
    runtime_ram_bytes: int = 0,
    **solve_options,
) -> Plan:
    """Trace ``model`` with its loss, price it on ``device``, schedule it within the budgets.

    example_inputs: the model's positional inputs (a tensor or tuple);
    loss_fn(output, *targets) -> scalar loss (omit if the model returns the loss).
    memory/runtime/strategy/paging_time: as in :func:`poet.solve`; memory counts
    the fixed bytes too (params, grads, buffers, the batch, optimizer state).
    granularity: ``"aten"`` (every aten op a node) or ``"layer"`` (grouped by module).
    optimizer: an optimizer instance or 'sgd'/'adam', only to count its state in fixed RAM.
    paging_dir / swap_file: where paged tensors go when the plan runs (default: a temp dir).
    costs: ``"model"`` prices nodes with ``device``'s cost model (FLOPs, or a measured profile's operator
    families); ``"measured"`` times every node of this program on this machine (``measure_runs``
    executions, medians) and prices paging with ``device``'s storage (docs/devices.md).
    A measured profile (``poet profile``) also sets how the plan runs: its torch thread count, and
    pages fsync'd and dropped from the page cache, as its storage was measured.
    tile: ``"auto"`` (default) tiles the ops that must be split when the budget is below the
    untiled minimum (:func:`poet.execute.tiled.tile_for_budget`); ``"off"`` never tiles; an
    integer forces that many tiles.  Tiled plans match autograd within the bound in docs/torch.md.
    runtime_ram_bytes: RAM the step's runtime holds besides the tensors (a compiled step's stack and
    statics, ``poet train --target qemu-m4``), counted as fixed RAM ("runtime").
    """
    from .graph.torch_export import export_training_graph

    if granularity not in ("aten", "layer", "module"):
        raise ValueError(f"granularity must be 'aten' or 'layer', got {granularity!r}")
    prog = export_training_graph(model, example_inputs, loss_fn, targets, optimizer=optimizer)
    if granularity in ("layer", "module"):
        prog = prog.coarsen(max_nodes=max_nodes)
    return plan_program(
        prog,
        device=device,
        memory=memory,
        runtime=runtime,
        strategy=strategy,
        paging_time=paging_time,
        time_limit=time_limit,
        fixed_ram=fixed_ram,
        paging_dir=paging_dir,
        swap_file=swap_file,
        costs=costs,
        measure_runs=measure_runs,
        tile=tile,
        runtime_ram_bytes=runtime_ram_bytes,
        **solve_options,
    )


def plan_program(
    prog,
    *,
    device="m4",
    memory="100%",
    runtime=None,
    strategy: str = "poet",
    paging_time: str = PAGING_SERIAL,
    time_limit: float | None = 60.0,
    fixed_ram=None,
    paging_dir=None,
    swap_file=None,
    costs: str = "model",
    measure_runs: int = 20,
    tile="auto",
    runtime_ram_bytes: int = 0,
    **solve_options,
) -> Plan:
    """:func:`plan` for a program already traced (``export_training_graph``, or a tiled one): no
    second trace when the same step is planned at several budgets or with several strategies.
    A tiled program is planned as it is (pass ``tile="off"``, or it may be tiled again)."""
    from .hardware import costed_program, load_device
    from .solve import solve
    from .units import parse_bytes

    if runtime_ram_bytes:
        prog.fixed_breakdown["runtime"] = int(runtime_ram_bytes)
    granularity = prog.granularity
    untiled = prog
    dev = load_device(device)
    fixed = None if fixed_ram is None else parse_bytes(fixed_ram)
    if costs not in ("model", "measured"):
        raise ValueError(f"costs must be 'model' or 'measured', got {costs!r}")

    def price(p):
        return _measured(p, dev, fixed, measure_runs) if costs == "measured" else costed_program(p, dev, fixed)

    cg = price(prog)
    tiling = None
    count = tile_count(tile)
    if count != 0:
        from .execute.tiled import tile_for_budget
        from .solve.api import make_budget

        budget = make_budget(cg, memory, runtime, paging_time)
        if count is not None and granularity != "aten":
            raise ValueError("tiling needs granularity 'aten'; use --tile off with --granularity layer")
        if granularity == "aten" and (count is not None or budget.ram_bytes < cg.min_ram_bytes()):
            tiling = tile_for_budget(prog, dev, budget.ram_bytes, fixed_ram_bytes=fixed, count=count)
            if tiling.tiled:
                prog = tiling.program
                cg = price(prog)
                # the same bytes and seconds as asked of the untiled step
                memory, runtime = budget.ram_bytes, budget.runtime_s
    sched = solve(
        cg,
        memory=memory,
        runtime=runtime,
        strategy=strategy,
        paging_time=paging_time,
        time_limit=time_limit,
        **solve_options,
    )
    opts = {}
    if paging_dir is not None:
        opts["paging_dir"] = paging_dir
    if swap_file is not None:
        opts["swap_file"] = swap_file
    if dev.paging_sync:
        opts.update(fsync=True, drop_cache=True)

    def replan(ram_bytes: int, seconds: float):
        """The step planned again for ``ram_bytes`` (tiled again for it when it needs tiles), with the
        same strategy, deadline and paging model: a smaller arena when the first one's does not fit."""
        p2 = untiled
        if granularity == "aten" and count != 0:
            from .execute.tiled import tile_for_budget

            t2 = tile_for_budget(untiled, dev, ram_bytes, fixed_ram_bytes=fixed, count=count)
            p2 = t2.program if t2.tiled else untiled
        s2 = solve(
            price(p2),
            memory=ram_bytes,
            runtime=sched.budget.runtime_s,
            strategy=strategy,
            paging_time=paging_time,
            time_limit=seconds if time_limit is None else min(seconds, time_limit),  # as long as the first solve
            find_min_budgets=False,
        )
        return p2, s2

    if tiling is not None and tiling.tiled:  # how to tile the traced program again (poet compile --schedule)
        rep = tiling.report
        sched.report = sched.report.with_(
            tiling={"kind": "torch", "count": rep.count, "threshold_bytes": rep.threshold_bytes}
        )
    return Plan(
        program=prog,
        schedule=sched,
        device=dev.name,
        executor_options=opts,
        threads=dev.threads,
        tiling=tiling,
        untiled=untiled if prog is not untiled else None,
        replan=replan,
    )


def _measured(prog, dev, fixed, runs: int):
    """The program priced from measurements of its own nodes, with the device's thread count."""
    import torch

    from .execute.measure import measured_costs

    before = torch.get_num_threads()
    if dev.threads:
        torch.set_num_threads(dev.threads)
    try:
        return measured_costs(prog, dev, runs=runs, fixed_ram_bytes=fixed)
    finally:
        torch.set_num_threads(before)


__all__ = ["Plan", "plan", "plan_program"]
