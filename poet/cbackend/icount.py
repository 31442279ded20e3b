"""The emulator's instruction counter: the QEMU plugin (``runtime/icount_plugin.c``), built once per
source with the host's ``cc`` and cached, the arguments that load it, and its output read back.

Why instructions: on this machine host timings drift by more than 15% over seconds, while the count
of instructions QEMU executes for a firmware repeats exactly from run to run, so a cost model can be
checked against it.  ``pk_mark`` (``runtime/pk_platform_semihost.c``) is the only hook: the plugin
records the running count each time its first instruction executes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import hostlib

PLUGIN_SOURCE = hostlib.RUNTIME / "icount_plugin.c"
PLUGIN_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")
OUT_NAME = "icount.txt"  # written by the plugin in the run folder


class CountError(RuntimeError):
    """The counter's output is missing or unreadable (the emulator died before it could write it)."""


@dataclass(frozen=True)
class InstructionCount:
    """What the plugin measured in one run."""

    total: int  # every instruction executed, reset to exit
    marks: tuple[int, ...]  # instructions executed before each pk_mark call, in call order

    def between_marks(self) -> tuple[int, ...]:
        """Instructions from each mark to the next (one fewer entry than ``marks``)."""
        return tuple(b - a for a, b in zip(self.marks, self.marks[1:]))


def plugin() -> Path:
    """The plugin's shared library (built on first use, again whenever its source changes)."""
    return hostlib.shared_library("libicount", [PLUGIN_SOURCE], [], PLUGIN_FLAGS, "the QEMU instruction-count plugin")


def qemu_args(mark_address: int | None, out_name: str = OUT_NAME) -> list[str]:
    """``-plugin`` arguments for qemu-system-arm: count everything, record at ``mark_address``
    (a Thumb function's address, with or without its low bit) and write ``out_name`` (relative to
    the emulator's working folder) at exit."""
    opts = [str(plugin()).replace(",", ",,")]  # QEMU's option syntax doubles a comma inside a value
    if mark_address is not None:
        opts.append(f"mark={mark_address & ~1:#x}")
    opts.append(f"out={out_name.replace(',', ',,')}")
    return ["-plugin", ",".join(opts)]


_LINE = re.compile(r"(insns|mark) (\d+)")


def read(path: Path) -> InstructionCount:
    """The plugin's output file as an :class:`InstructionCount`."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise CountError(f"no instruction count at {path}: the emulator stopped before its exit handlers ran") from None
    total, marks = None, []
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.fullmatch(line.strip())
        if not m:
            raise CountError(f"{path}:{n}: unreadable line {line!r} (expected 'insns N' or 'mark N')")
        if m[1] == "insns":
            total = int(m[2])
        else:
            marks.append(int(m[2]))
    if total is None:
        raise CountError(f"{path}: no 'insns' line")
    return InstructionCount(total, tuple(marks))
