"""What a qemu-m4 firmware holds in its RAM region besides the arena, measured on the firmware itself.

The RAM region of the ``qemu-m4`` target is the whole budget: stack, ``.data``, the arena and ``.bss``
must fit in it together.  :func:`measure_needs` links the project once with the arena moved to the
external region (outside any budget) and reads from that ELF the ``.data`` and ``.bss`` bytes and a
bound on the stack from its machine code (:mod:`poet.cbackend.m4_stack`); what is left of the region
is what the arena may take (:attr:`FirmwareNeeds.arena_limit`).  A step whose constant data or
external data are larger than the board (ResNet-18's 44.7 MB of weights) is linked with those two
regions widened to map it anyway: its RAM figures are real, and the image says it cannot run on
mps2-an386 (:func:`poet.cbackend.qemu_m4.board_misfit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .m4_stack import StackBound, stack_bound
from .target_types import Build, TargetError

__all__ = ["MPU_GRAIN", "FirmwareNeeds", "build_within", "measure_needs", "stack_section_bytes"]

MPU_GRAIN = 32  # the MPU grants the RAM region in 32-byte blocks: the last 31 bytes of an odd size are unusable
MAX_WIDEN = 8  # relinks that widen flash or external before giving up


def stack_section_bytes(bound: StackBound) -> int:
    """The stack section for a bound: the bound rounded up to the 8 bytes the linker aligns to."""
    return max(256, (bound.bytes + 7) // 8 * 8)


@dataclass(frozen=True)
class FirmwareNeeds:
    """RAM a firmware needs besides its arena, for a RAM region of ``ram_region`` bytes."""

    ram_region: int
    stack: StackBound
    data: int
    bss: int
    flash: int  # code and constants (with the parameters and the batch in the paper's setting)
    external: int  # outside the budget (the gradients in the paper's setting), without the arena
    widened: tuple[str, ...]  # regions linked larger than the board's to map the step (never run)

    @property
    def stack_bytes(self) -> int:
        return stack_section_bytes(self.stack)

    @property
    def reserve(self) -> int:
        """Bytes of the RAM region the arena cannot have: stack, data and bss."""
        return self.stack_bytes + self.data + self.bss

    @property
    def arena_limit(self) -> int:
        """The largest arena the RAM region holds beside them."""
        return self.ram_region // MPU_GRAIN * MPU_GRAIN - self.reserve

    def lines(self) -> list[str]:
        out = [
            f"RAM region {self.ram_region:,} B = stack {self.stack_bytes:,} + data {self.data:,} + bss {self.bss:,} "
            f"+ at most {self.arena_limit:,} B of arena",
            "  " + self.stack.describe(),
        ]
        if self.widened:
            out.append(
                "  linked with "
                + " and ".join(self.widened)
                + " widened to map the step: the image does not fit mps2-an386 and is not run there"
            )
        return out


def _widen(n: int) -> int:
    """A region length holding ``n`` bytes: the next multiple of 1 MiB."""
    return (n + (1 << 20) - 1) >> 20 << 20


def build_within(target, project_dir, ram_bytes: int, *, stack_bytes: int, defines=()) -> tuple[Build, tuple[str, ...]]:
    """``target.build`` with the board's flash and external regions, widened (and said so) when the
    step's data do not fit them."""
    from .m4_elf import EXTERNAL_BYTES, FLASH_BYTES
    from .qemu_m4 import RegionOverflow

    regions = {"FLASH": FLASH_BYTES, "EXTERNAL": EXTERNAL_BYTES}
    for _ in range(MAX_WIDEN):
        try:
            b = target.build(
                project_dir,
                ram_bytes,
                stack_bytes=stack_bytes,
                defines=defines,
                flash_bytes=regions["FLASH"],
                external_bytes=regions["EXTERNAL"],
            )
        except RegionOverflow as e:
            for g, over in e.over.items():
                regions[g] = _widen(regions[g] + over)
            continue
        widened = tuple(
            f"{g} ({regions[g]:,} B; the board has {n:,} B)"
            for g, n in (("FLASH", FLASH_BYTES), ("EXTERNAL", EXTERNAL_BYTES))
            if regions[g] > n
        )
        return b, widened
    raise TargetError(f"{project_dir}: the step's data do not fit even flash and external regions of {regions}")


def measure_needs(target, project_dir, ram_bytes: int, kernels) -> FirmwareNeeds:
    """Link ``project_dir`` with its arena outside the budget and read what else its RAM region holds
    (``kernels``: the step's kernel names, the targets of the interpreter's calls through its table)."""
    from .qemu_m4 import ARENA_EXTERNAL, RAM_REGION_MAX

    b, widened = build_within(target, project_dir, RAM_REGION_MAX, stack_bytes=4096, defines=(ARENA_EXTERNAL,))
    bound = stack_bound(Path(b.binary), [f"pk_{k}" for k in kernels])
    m = b.memory
    return FirmwareNeeds(ram_bytes, bound, m.data, m.bss, m.flash, m.external - m.arena, widened)
