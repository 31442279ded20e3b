"""``compile_program``: a validated schedule of a traced step to a C project, built, run and checked.

The steps, each refusing bad input before the next starts: validate the schedule against its graph
and budget; lower the program (every op must have a kernel); plan the arena (and, when it does not
fit what the budget leaves after fixed RAM, solve again with a tighter budget: :mod:`.fit`); write
the project; then, as asked, build it for the target, run it on batches, and compare its results
with PyTorch's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..schedule.core import Schedule
from ..schedule.io import save_schedule
from ..schedule.validate import validate
from .check import CheckReport, compare, dropout_reference, reference_run
from .check_zoo import zoo_reference
from .fit import ArenaFit
from .instructions import InstructionComparison, InstructionModel, measure_program, measured_per_kind
from .instructions_zoo import measure_zoo
from .ir import LoweringError
from .layout import StepResults, read_out, write_batches
from .lower import lower_program
from .lower_zoo import ZooProgram, lower_zoo
from .placing import ArenaTooLarge, place_step
from .project import Project, write_project
from .qemu_m4 import board_misfit
from .ram_region import FirmwareNeeds, build_within
from .target_table import get_target
from .targets import Build, RunOutput, TargetError
from .wstore import WeightTraffic, moved_traffic, priced_traffic

__all__ = ["ArenaTooLarge", "CompileResult", "compile_program"]


@dataclass(frozen=True)
class CompileResult:
    """What compiling (and, if asked, building, running and checking) a step gave."""

    project: Project
    schedule: Schedule  # the schedule compiled (re-solved when the first one's arena did not fit)
    fit: ArenaFit
    target: str
    build: Build | None
    run: RunOutput | None
    results: StepResults | None
    check: CheckReport | None
    seconds: dict  # 'compile', 'build', 'run', 'check'
    # qemu-m4 runs: predicted beside measured instructions per iteration and per kind
    instructions: InstructionComparison | None = None
    ram_region: FirmwareNeeds | None = None  # qemu-m4: what its RAM region holds besides the arena, measured
    not_run: str = ""  # why a run that was asked for did not happen (an image the board cannot hold)
    weight_traffic: WeightTraffic | None = None  # --weights stream runs: what the step moved beside the price
    # qemu-m4 runs of zoo programs: instructions per kind, measured (streamed ones are predicted too: instructions)
    measured_instructions: dict | None = None

    @property
    def arena_bytes(self) -> int:
        return self.fit.plan.arena_bytes

    @property
    def peak_bytes(self) -> int:
        """The schedule's peak of live activation bytes (fixed RAM left out)."""
        return self.schedule.totals.peak_ram_bytes - self.schedule.graph.fixed_ram_bytes

    @property
    def ok(self) -> bool:
        moved_ok = self.weight_traffic is None or self.weight_traffic.equal
        ran_ok = (self.run is None or self.run.ok) and not self.not_run
        return ran_ok and (self.check is None or self.check.ok) and moved_ok

    def lines(self) -> list[str]:
        lay = self.project.layout
        where = "in RAM" if lay.params_in_ram else "in flash (const), gradients outside the RAM budget"
        if self.schedule.graph.placement == "stream":
            where = "streamed from weights.bin, gradients to grads.bin (storage; a staging buffer in RAM)"
        out = [
            f"arena {self.arena_bytes:,} B for a schedule peak of {self.peak_bytes:,} B of activations "
            f"({self.fit.available:,} B available after {self.schedule.graph.fixed_ram_bytes:,} B fixed); "
            f"planner order: {self.fit.plan.order}",
            f"parameters {where}: {lay.param_bytes:,} B; buffers {lay.buffer_bytes:,} B; batch {lay.batch_bytes:,} B"
            + (" (in flash, constant: one step on it)" if lay.batch_in_flash else " (read from batch.bin each step)"),
        ]
        if self.ram_region is not None:
            out += self.ram_region.lines()
        if len(self.fit.attempts) > 1:
            out.append("the first schedule's arena did not fit; solved again:")
            out += self.fit.lines()
            out.append(f"  the schedule compiled: {self.project.path / 'schedule.json'}")
        if self.build is not None:
            out.append(f"built for {self.target}: {self.build.memory.describe()}")
            out += self.build.notes
        if self.not_run:
            out.append(self.not_run + ("; the same project was run on the host instead" if self.run else ""))
        if self.run is not None:
            why = self.run.problem()
            out.append(f"ran on {'host' if self.not_run else self.target}: " + (why or "ok"))
        if self.weight_traffic is not None:
            out += self.weight_traffic.lines()
        if self.instructions is not None:
            out += self.instructions.lines()
        elif self.measured_instructions is not None:
            m = self.measured_instructions
            out.append(
                "instructions on qemu-m4, measured (a zoo program's prediction is built with --weights stream only): "
                + ", ".join(f"{k} {v:,}" for k, v in m.items())
                + f"; total {sum(m.values()):,}"
            )
        if self.check is not None:
            out.append("against PyTorch: " + ("match within the bounds" if self.check.ok else "MISMATCH"))
            out += ["  " + x for x in self.check.lines()]
        return out


def _say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def compile_program(
    program,
    schedule: Schedule,
    *,
    out,
    target: str = "host",
    run: bool = False,
    check: bool = False,
    batches: Sequence | None = None,
    steps: int = 1,
    params_in_ram: bool | None = None,
    lr: float = 0.05,
    momentum: float = 0.0,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 600.0,
    fit_time_limit_s: float = 300.0,
    reference_program=None,
    rng_seed: int = 0,
    run_dir=None,
    replan=None,
    instruction_model: InstructionModel | None = None,
) -> CompileResult:
    """Compile ``schedule`` of the traced ``program`` into a C project in ``out`` for ``target``.

    ``program`` is a traced program, or a :class:`~poet.cbackend.lower_zoo.ZooProgram` for the
    schedule of a zoo network's layer graph (``zoo_program(schedule.graph)``; checked against
    :func:`~poet.cbackend.check_zoo.zoo_reference`).

    params_in_ram: None decides by the schedule's budget: parameters in RAM when it counts fixed RAM
    (``poet train``: the budget covers everything), const in flash with the gradients outside the
    budget when it counts activations only (the paper's setting).  run: build and run ``steps``
    training steps (``batches``: one ``inputs + targets`` tuple per step; default the example
    batch).  check: also train in PyTorch (``reference_program``: the untiled program of a tiled
    one) and compare, its dropout drawing the compiled step's masks (``rng_seed``: the run's base
    seed, :mod:`poet.cbackend.rng`).  ``replan(ram_bytes, seconds) -> (program, schedule)`` plans the
    step again for less RAM when the arena does not fit (default: the same graph solved again).
    Raises before building on a schedule or program the backend cannot compile.
    On ``qemu-m4`` a run counts instructions and compares them, per iteration and per kind, with the
    prediction from ``program``'s per-node costs (``instruction_model``, measured first if None).
    """
    t0 = time.monotonic()
    secs: dict = {}
    if not schedule.feasible:
        raise LoweringError(f"the schedule has no steps to compile (status {schedule.status})")
    totals = validate(schedule.graph, schedule.steps, schedule.budget)  # never compile an unchecked schedule
    schedule = schedule.with_(totals=totals)
    streamed = schedule.graph.placement == "stream"
    if streamed and not isinstance(program, ZooProgram):
        raise LoweringError(
            "this schedule was planned with --weights stream; the C backend streams the weights of zoo "
            "layer graphs (poet solve --model NAME) only: plan a traced program with --weights flash or ram"
        )
    if streamed:  # the weights and gradients are in files: the image holds neither, and a run is one step
        params_in_ram = False
    if params_in_ram is None:
        params_in_ram = schedule.graph.fixed_ram_bytes > 0
    if batches is None:
        batches = [program.example_batch] * steps
    batches = list(batches)
    if (run or check) and not batches:
        raise ValueError("running the step needs at least one batch")
    if not params_in_ram and len(batches) > 1:
        raise ValueError(
            "with the parameters in flash (the paper's setting) a run is one step: the update cannot be "
            "written back; budget the parameters in RAM (poet train) to train several steps"
        )
    zoo = isinstance(program, ZooProgram)
    kp = lower_zoo(program, schedule) if zoo else lower_program(program, schedule)
    _say(progress, f"lowered {program.name}: {len(kp.nodes)} nodes, {len(kp.kernels())} distinct kernels")
    region = get_target(target) if target == "qemu-m4" else None  # its RAM region holds stack and statics too
    if region is not None and region.missing():
        raise TargetError(region.missing())

    def write(kp_, schedule_, plan_, folder) -> Project:
        return write_project(
            kp_,
            schedule_,
            plan_,
            folder,
            params_in_ram=params_in_ram,
            lr=lr,
            momentum=momentum if params_in_ram else 0.0,
            rng_seed=rng_seed,
            poison=check,
            force=force,
            batch=None if params_in_ram else tuple(batches[0]),  # the paper's setting: data in flash, like weights
        )

    traced = program  # the reference, untiled unless a tiled program was given
    placed_from = schedule
    placed = place_step(
        program,
        kp,
        schedule,
        write,
        out=out,
        region_target=region,
        fit_time_limit_s=fit_time_limit_s,
        progress=progress,
        replan=replan,
    )
    program, kp, fit, project, needs = placed.program, placed.kernel_program, placed.fit, placed.project, placed.needs
    schedule = fit.schedule
    if schedule.graph.placement != placed_from.graph.placement:  # a re-solve must price the weights the same way
        raise LoweringError(
            f"the schedule solved again to fit places the weights in {schedule.graph.placement}, the one given in "
            f"{placed_from.graph.placement}: it would run another step than the one planned"
        )
    fixed = schedule.graph.fixed_ram_bytes
    if schedule is not placed_from:  # re-solved: keep the schedule compiled beside its project
        save_schedule(schedule, project.path / "schedule.json")
    secs["compile"] = time.monotonic() - t0
    _say(
        progress,
        f"wrote {project.path}: {len(project.tables.steps)} instructions, {len(project.tables.calls)} calls, "
        f"arena {fit.plan.arena_bytes:,} B (schedule peak {schedule.totals.peak_ram_bytes - fixed:,} B)",
    )
    build = run_out = results = report = comparison = traffic = measured = None
    not_run = ""
    if run or check or target != "host":
        tgt = get_target(target)
        why = tgt.missing()
        if why:
            raise TargetError(why)
        t1 = time.monotonic()
        _say(progress, f"building for {target} ...")
        if needs is not None:  # the stack the firmware can use, measured: the rest of the region is the arena's
            build, widened = build_within(tgt, project.path, schedule.budget.ram_bytes, stack_bytes=needs.stack_bytes)
            if widened and (run or check):
                not_run = f"not run on {target}: the image cannot run on mps2-an386 ({board_misfit(build)})"
        else:
            build = tgt.build(project.path, schedule.budget.ram_bytes)
        secs["build"] = time.monotonic() - t1
        _say(progress, f"built {build.binary} in {secs['build']:.1f} s: {build.memory.describe()}")
    run_tgt, run_build, run_on = tgt if build is not None else None, build, target
    if not_run:  # the same project, its arena and tables unchanged, run on the host instead (said so)
        run_tgt, run_on = get_target("host"), "host"
        _say(progress, f"{not_run}; building the same project for the host to run it there ...")
        run_build = run_tgt.build(project.path, schedule.budget.ram_bytes)
    if run or check:
        rd = Path(run_dir) if run_dir is not None else project.path / "run"
        rd.mkdir(parents=True, exist_ok=True)
        for stale in ("out.bin", "pages.bin"):
            (rd / stale).unlink(missing_ok=True)
        if not project.layout.batch_in_flash:
            write_batches(project.layout, [tuple(b) for b in batches], rd / "batch.bin")
        if kp.stream is not None:  # the weights file the step streams from; its gradients go to grads.bin
            kp.stream.write(rd, program.params)
        t1 = time.monotonic()
        _say(progress, f"running {len(batches)} step(s) on {run_on} in {rd} ...")
        counting = run_on == "qemu-m4"  # the emulator counts instructions exactly: every run compares them
        run_out = run_tgt.run(run_build, rd, count=counting, timeout_s=timeout_s)
        secs["run"] = time.monotonic() - t1
        why = run_out.problem()
        _say(progress, f"ran in {secs['run']:.2f} s: " + (why or "ok"))
        if run_out.ok:
            results = read_out(project.layout, rd / "out.bin")
            if kp.stream is not None:  # the step's gradients and updated weights are in its files
                params, grads = kp.stream.read(rd)
                results = StepResults(results.losses, (grads,), params, {})
                traffic = WeightTraffic(priced_traffic(schedule), moved_traffic(run_out.text))
        if counting and run_out.ok and zoo and run_out.marks:
            measured = dict(measured_per_kind(schedule.steps, run_out.marks)[0])
            if kp.stream is not None:  # each node measured in place under a calibration schedule of its graph
                t1 = time.monotonic()
                _say(progress, "measuring every node's instructions under a calibration schedule ...")
                model = instruction_model or measure_zoo(program, schedule, poison=check, timeout_s=timeout_s)
                comparison = InstructionComparison.of(
                    model, schedule.steps, run_out.marks, params_in_ram=False, poison=check
                )
                secs["instructions"] = time.monotonic() - t1
        if counting and run_out.ok and not zoo:  # per-node predictions are measured for traced programs
            t1 = time.monotonic()
            m = momentum if project.layout.params_in_ram else 0.0
            model = instruction_model or measure_program(program, momentum=m, progress=progress, timeout_s=timeout_s)
            comparison = InstructionComparison.of(
                model, schedule.steps, run_out.marks, params_in_ram=project.layout.params_in_ram, poison=check
            )
            secs["instructions"] = time.monotonic() - t1
    if check and results is not None:
        t1 = time.monotonic()
        mom = momentum if params_in_ram else 0.0
        if zoo:
            ref = zoo_reference(program, batches, lr=lr, momentum=mom)
        else:
            reference = reference_program or traced
            ref = reference_run(
                reference,
                batches,
                lr=lr,
                momentum=mom,
                dropout=dropout_reference(rng_seed, compiled=program, reference=reference),
            )
        report = compare(results, ref)
        secs["check"] = time.monotonic() - t1
    return CompileResult(
        project,
        schedule,
        fit,
        target,
        build,
        run_out,
        results,
        report,
        secs,
        comparison,
        needs,
        not_run,
        traffic,
        measured,
    )
