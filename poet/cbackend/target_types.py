"""What every target returns: the build, its memory use, one run's output, and the error type.

Kept apart from :mod:`poet.cbackend.targets` (the protocol, the host target and the lookup by name)
so that a target module (:mod:`poet.cbackend.qemu_m4`) can use these types while ``targets`` looks
the target up, without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import hostlib

__all__ = ["RUNTIME_RAM_BYTES", "Build", "MemoryUse", "RunOutput", "TargetError", "project_sources"]

# RAM a compiled step holds besides its tensors: the stack (qemu-m4's default) and the runtime's
# statics; poet train --target counts it as fixed RAM, so the plan leaves room for it
RUNTIME_RAM_BYTES = 4096 + 512


class TargetError(RuntimeError):
    """A project that could not be built, or a binary that could not be started (the message says why)."""


@dataclass(frozen=True)
class MemoryUse:
    """Bytes per region of a built step (the RAM figures are what the budget caps)."""

    ram_region: int  # the RAM budget the build was made for
    stack: int  # reserved stack (0 on the host: the operating system's)
    data: int  # initialized statics (their initial values also take flash)
    arena: int  # the step's one arena (pk_sections.h: PK_ARENA)
    bss: int  # every other zero-initialized static
    external: int  # outside the budget (PK_EXTERNAL): the gradients in the paper's setting
    flash: int  # code, constants and the initial values of .data

    @property
    def ram(self) -> int:
        """RAM the step holds: stack + data + arena + bss."""
        return self.stack + self.data + self.arena + self.bss

    def describe(self) -> str:
        ext = f"; outside the budget: {self.external:,} B external" if self.external else ""
        return (
            f"RAM {self.ram:,} of {self.ram_region:,} B (stack {self.stack:,}, data {self.data:,}, "
            f"arena {self.arena:,}, bss {self.bss:,}); flash {self.flash:,} B{ext}"
        )


@dataclass(frozen=True)
class Build:
    """A built step."""

    binary: Path  # what the target runs (an executable, an ELF)
    map_file: Path | None  # the linker's map, where the target writes one
    memory: MemoryUse
    notes: tuple[str, ...] = ()  # what the target checked of the build (qemu-m4: where each section went)


@dataclass(frozen=True)
class RunOutput:
    """One run of a built step."""

    exit_code: int
    text: str  # what the step printed (pk_print)
    marks: tuple[int, ...] | None  # running instruction count at each pk_mark call; None: not counted
    instructions: int | None = None  # every instruction executed; None: not counted
    stack_used: int | None = None  # the stack's high-water mark in bytes, where the target measures it
    fault: object | None = None  # what a target's fault handler reported (it has .describe())
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def problem(self) -> str | None:
        """Why the run failed, in one sentence; None when it succeeded."""
        if self.timed_out:
            return "the step did not finish within the time limit (an endless loop, or give it more time)"
        if self.fault is not None:
            return f"the step faulted: {self.fault.describe()}"
        if self.exit_code != 0:
            last = [ln for ln in self.text.splitlines() if ln.strip()]
            return f"the step exited with code {self.exit_code}" + (f": {last[-1]}" if last else "")
        return None


def project_sources(project_dir: Path, target_files: tuple[str, ...]) -> list[Path]:
    """The project's C and assembly files, plus the target's runtime files it has no copy of."""
    own = sorted(project_dir.glob("*.c")) + sorted(project_dir.glob("*.S"))
    names = {p.name for p in own}
    return own + [hostlib.RUNTIME / n for n in target_files if n not in names]
