"""Fitting a lowered step into its target's RAM: the arena, the re-solves, and the RAM region's other contents.

On the host the arena may take what the budget leaves after fixed RAM.  On ``qemu-m4`` the RAM region
is the whole budget and also holds the stack, ``.data`` and ``.bss``: the project is first written and
linked once with its arena outside the budget to measure them (:mod:`poet.cbackend.ram_region`), and
the arena may take only what is left.  When the arena does not fit, the schedule is solved again for
less (:func:`poet.cbackend.fit.fit_arena`; a zoo network is tiled again for the lower budget,
:mod:`poet.cbackend.fit_zoo`).  A re-solved step can need another stack (other kernels, another
interpreter array), so its firmware is measured again, and the fit repeats with what it measured
until the arena and the rest fit together.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..schedule.core import Schedule
from .arena import plan_arena
from .fit import ArenaFit, fit_arena
from .fit_zoo import zoo_resolver
from .ir import KernelProgram, LoweringError
from .lower import lower_program
from .lower_zoo import ZooProgram, lower_zoo, zoo_program
from .project import Project
from .ram_region import FirmwareNeeds, measure_needs

__all__ = ["ArenaTooLarge", "Placed", "place_step"]

MAX_REFITS = 3  # fits after the first, each with the firmware measured again


class ArenaTooLarge(LoweringError):
    """No schedule found whose arena fits the budget (the message gives the numbers)."""


@dataclass(frozen=True)
class Placed:
    """A step whose arena fits: the program and schedule compiled (re-solved, perhaps tiled again),
    the fit, the written project and (``qemu-m4``) what its RAM region holds besides the arena."""

    program: object
    kernel_program: KernelProgram
    fit: ArenaFit
    project: Project
    needs: FirmwareNeeds | None


def _too_large(fit: ArenaFit, schedule: Schedule, needs: FirmwareNeeds | None) -> ArenaTooLarge:
    room = (
        f"the RAM region of {needs.ram_region:,} B leaves {fit.available:,} B beside stack {needs.stack_bytes:,}, "
        f"data {needs.data:,} and bss {needs.bss:,}"
        if needs is not None
        else f"the budget leaves {fit.available:,} B after {schedule.graph.fixed_ram_bytes:,} B of fixed RAM"
    )
    again = (
        "solving again with tighter budgets did not fit it:\n" + "\n".join(fit.lines()) if len(fit.attempts) > 1 else ""
    )
    return ArenaTooLarge(
        f"the arena needs {fit.plan.arena_bytes:,} B but {room} (schedule peak {fit.attempts[0].peak_bytes:,} B); "
        + again
        + " give a larger budget, or a longer time limit for the re-solves"
    )


def place_step(
    program,
    kp: KernelProgram,
    schedule: Schedule,
    write: Callable[[KernelProgram, Schedule, object, object], Project],
    *,
    out,
    region_target=None,
    fit_time_limit_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
    replan=None,
) -> Placed:
    """Fit ``schedule``'s arena (solving again as needed) and write the project with ``write(kp,
    schedule, plan, folder)``.  ``region_target``: the target whose RAM region (the budget) holds the
    stack and statics too (``qemu-m4``), None for the host.  ``replan(ram_bytes, seconds) -> (program,
    schedule)`` plans the step again for less RAM (a traced step tiled again); default: a zoo network
    tiled again (:func:`~poet.cbackend.fit_zoo.zoo_resolver`), another program the same graph solved again."""
    say = progress or (lambda _t: None)
    zoo = isinstance(program, ZooProgram)
    programs: dict[int, object] = {}  # a re-planned schedule's graph -> its program

    def solve_again(s: Schedule, ram: int, seconds: float) -> Schedule:
        p2, s2 = replan(ram, seconds)
        programs[id(s2.graph)] = p2
        return s2

    solver = solve_again if replan is not None else zoo_resolver(program, progress) if zoo else None
    ram = schedule.budget.ram_bytes
    plan = limit = needs = None  # the fit plans the arena; a RAM region needs it first, for the measurement
    if region_target is not None:
        plan = plan_arena(schedule)
        Path(out).resolve().parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".poet-measure-", dir=Path(out).resolve().parent) as tmp:
            p0 = write(kp, schedule, plan, Path(tmp) / "p")
            needs = measure_needs(region_target, p0.path, ram, kp.kernels())
        limit = needs.arena_limit
        say(needs.lines()[0] + " (measured on the firmware)")
    attempts: list = []
    for _ in range(1 + MAX_REFITS):
        fit = fit_arena(
            schedule, time_limit_s=fit_time_limit_s, progress=progress, solver=solver, arena_limit=limit, plan=plan
        )
        attempts += fit.attempts if not attempts else fit.attempts[1:]
        fit = dataclasses.replace(fit, attempts=tuple(attempts))
        if not fit.fits:
            raise _too_large(fit, schedule, needs)
        if id(fit.schedule.graph) in programs:  # planned again, tiled another way: its own program
            program = programs[id(fit.schedule.graph)]
            kp = lower_zoo(program, fit.schedule) if zoo else lower_program(program, fit.schedule)
            say(f"lowered the step planned again: {len(kp.nodes)} nodes")
        elif fit.schedule is not schedule and zoo:  # re-solved (perhaps tiled again): the program of its graph
            program = zoo_program(fit.schedule.graph, seed=program.seed, layers=program.layers)
            kp = lower_zoo(program, fit.schedule)
        project = write(kp, fit.schedule, fit.plan, out)
        if region_target is None:
            return Placed(program, kp, fit, project, None)
        got = measure_needs(region_target, project.path, ram, kp.kernels())
        if fit.plan.arena_bytes <= got.arena_limit:
            return Placed(program, kp, fit, project, got)
        say(f"the re-solved step's firmware needs {got.reserve:,} B beside the arena (measured again): fitting again")
        schedule, plan, limit, needs = fit.schedule, fit.plan, got.arena_limit, got
    raise _too_large(fit, schedule, needs)
