"""What a linked Cortex-M4 firmware's ELF says: where each section went (the memory use, and the link
map checked against the regions of ``runtime/m4.ld.in``), its symbols, and the function and line of
a fault's pc.  Read with binutils (``arm-none-eabi-size``, ``nm``, ``addr2line``)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .target_types import MemoryUse, TargetError

SIZE, NM, ADDR2LINE = (f"arm-none-eabi-{t}" for t in ("size", "nm", "addr2line"))
FLASH_ORIGIN, RAM_ORIGIN, EXTERNAL_ORIGIN = 0x00000000, 0x20000000, 0x21000000
FLASH_BYTES, EXTERNAL_BYTES = 4 << 20, 16 << 20
FLASH_SECTIONS = (".vectors", ".text", ".rodata", ".ARM.exidx")
RAM_SECTIONS = (".stack", ".data", ".pk_arena", ".bss")  # lowest address first


def run_tool(cmd: list[str], cwd: Path | None = None, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """A toolchain command, its output captured; :class:`TargetError` if it hangs."""
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TargetError(f"{Path(cmd[0]).name} did not finish within {timeout_s:.0f} s") from None


@dataclass(frozen=True)
class Section:
    name: str
    address: int
    size: int


def sections(elf: Path) -> dict[str, Section]:
    """The allocated sections of ``elf`` by name (``size -A``: name, size, address)."""
    r = run_tool([SIZE, "-A", "-d", str(elf)])
    if r.returncode != 0:
        raise TargetError(f"{SIZE} could not read {elf}:\n{r.stderr[-2000:]}")
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out[parts[0]] = Section(parts[0], int(parts[2]), int(parts[1]))
    return out


def memory_use(elf: Path, ram_bytes: int) -> MemoryUse:
    """Section sizes of a linked firmware, by region."""
    secs = sections(elf)
    size = {name: s.size for name, s in secs.items()}
    return MemoryUse(
        ram_region=ram_bytes,
        stack=size.get(".stack", 0),
        data=size.get(".data", 0),
        arena=size.get(".pk_arena", 0),
        bss=size.get(".bss", 0),
        external=size.get(".pk_external", 0),
        flash=sum(size.get(s, 0) for s in (*FLASH_SECTIONS, ".data")),  # .data's initial values too
    )


def link_map_lines(
    elf: Path, ram_bytes: int, flash_bytes: int = FLASH_BYTES, external_bytes: int = EXTERNAL_BYTES
) -> list[str]:
    """Where the link put every section, checked: each RAM section inside the RAM region of
    ``ram_bytes`` at 0x20000000, code and constants in flash, PK_EXTERNAL objects in the external
    region.  :class:`TargetError` names a section found anywhere else."""
    secs = sections(elf)
    regions = {
        "RAM": (RAM_ORIGIN, ram_bytes, RAM_SECTIONS),
        "FLASH": (FLASH_ORIGIN, flash_bytes, FLASH_SECTIONS),
        "EXTERNAL": (EXTERNAL_ORIGIN, external_bytes, (".pk_external",)),
    }
    lines = []
    for region, (origin, length, names) in regions.items():
        present = [secs[n] for n in names if n in secs and secs[n].size]
        for s in present:
            if not (origin <= s.address and s.address + s.size <= origin + length):
                raise TargetError(
                    f"{elf.name}: section {s.name} at {s.address:#010x} ({s.size:,} B) lies outside the {region} "
                    f"region [{origin:#010x}, {origin + length:#010x})"
                )
        if not present:
            lines.append(f"  {region}: nothing")
            continue
        used = sum(s.size for s in present)
        parts = ", ".join(f"{s.name} {s.size:,} B at {s.address:#010x}" for s in present)
        lines.append(f"  {region} [{origin:#010x}, {origin + length:#010x}): {used:,} of {length:,} B: {parts}")
    return [f"link map of {elf.name} (the linker's own map is firmware.map beside it):", *lines]


def symbol_address(elf: Path, name: str) -> int | None:
    """The address of a function or object in the ELF (a Thumb function's low bit cleared)."""
    r = run_tool([NM, str(elf)])
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16) & ~1
    return None


@dataclass(frozen=True)
class Fault:
    """What the startup's fault handler reported before exiting (runtime/pk_m4.h)."""

    kind: str  # HardFault, MemManage, BusFault, UsageFault, unexpected exception, MPU setup
    reason: str  # e.g. "data access violation", "stack overflow", "division by zero"
    pc: int | None  # the faulting instruction, when the stack frame was readable
    address: int | None  # the faulting data address, when the core latched one
    where: str | None  # function and source line of pc, from the ELF's debug information

    def describe(self) -> str:
        s = f"{self.kind} ({self.reason})"
        if self.address is not None:
            s += f" at address {self.address:#010x}"
        if self.pc is not None:
            s += f", pc {self.pc:#010x}" + (f" in {self.where}" if self.where else "")
        return s


_FAULT = re.compile(
    r"pk-fault: (?P<kind>HardFault|MemManage|BusFault|UsageFault|unexpected exception|MPU setup)"
    r"(?: \((?P<reason>[^)]*)\))?(?: pc=(?P<pc>0x[0-9a-f]+) addr=(?P<addr>0x[0-9a-f]+))?"
)


def _where(elf: Path, pc: int) -> str | None:
    r = run_tool([ADDR2LINE, "-f", "-s", "-e", str(elf), f"{pc:#x}"])
    lines = r.stdout.split()
    if r.returncode != 0 or len(lines) < 2 or lines[0] == "??":
        return None
    return f"{lines[0]} ({lines[1]})" if not lines[1].startswith("??") else lines[0]


def parse_fault(text: str, elf: Path | None = None) -> Fault | None:
    """The fault the firmware reported, if any (with ``elf``: the function and line of its pc)."""
    m = _FAULT.search(text)
    if not m:
        return None
    pc = int(m["pc"], 16) if m["pc"] else None
    pc = None if pc == 0xFFFFFFFF else pc
    addr = int(m["addr"], 16) if m["addr"] else None
    addr = None if addr == 0xFFFFFFFF else addr
    where = _where(elf, pc) if elf is not None and pc is not None else None
    reason = m["reason"] or ("the RAM region cannot be mapped" if m["kind"] == "MPU setup" else "unknown cause")
    return Fault(m["kind"], reason, pc, addr, where)
