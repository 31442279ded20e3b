"""A bound on a Cortex-M4 firmware's stack, from its machine code: no guess, no run.

Every function of the linked ELF is read from ``arm-none-eabi-objdump -d``: its own frame is what its
instructions take off the stack pointer (``push``/``stmdb sp!`` 4 bytes per register, ``vpush`` 4 or 8
per register, ``sub sp, #n``, pre-indexed stores ``[sp, #-n]!``; every one of them counted, so a frame
is never under-counted), and its callees are the functions its ``bl``/``blx`` and its branches out of
its own code reach (tail calls; libgcc's shared tails, counted as calls of the whole function).  An
indirect call (``blx rN``) may reach any of the given targets (the step's kernels, called through the
interpreter's table).  The bound is the deepest chain from the reset handler, plus one exception frame
(a fault at the deepest point stacks 26 words and an alignment word before its handler moves the stack
pointer back to the top), or the fault handler's own chain from the top, whichever is larger.
Recursion, a stack pointer set from a register outside the startup, or an indirect call without
targets make the bound unknown, and the error says where.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path

from .m4_elf import run_tool
from .target_types import TargetError

__all__ = ["EXCEPTION_FRAME_BYTES", "StackBound", "stack_bound"]

OBJDUMP = "arm-none-eabi-objdump"
EXCEPTION_FRAME_BYTES = 108  # ARMv7-M extended (FP) frame: 26 words, plus 4 bytes of alignment
ROOT = "pk_reset"  # the reset handler: the stack pointer starts at the top
FAULT_ROOT = "fault_common"  # every fault handler branches here; it moves the stack pointer back to the top
SP_RESETTERS = (ROOT, FAULT_ROOT)  # the functions that may set sp from a register (to the top)

_FUNC = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_TARGET = re.compile(r"([0-9a-f]+) <[^>]+>$")  # a branch's target address (and objdump's name for it)
_REGLIST = re.compile(r"\{([^}]*)\}")
_IMM = re.compile(r"#(\d+)")
_CONDITIONS = ("eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "hs", "lo", "al")


@dataclass(frozen=True)
class StackBound:
    """The most stack the firmware can use, and the chain of calls that sets it."""

    bytes: int  # with one exception frame on the deepest chain
    chain: tuple[tuple[str, int], ...]  # (function, its own frame bytes), from the root down
    functions: int  # functions read

    def describe(self) -> str:
        deepest = " > ".join(f"{f} {b}" for f, b in self.chain)
        return (
            f"stack bound {self.bytes:,} B (deepest chain, bytes per frame: {deepest}; plus a "
            f"{EXCEPTION_FRAME_BYTES}-B exception frame), from the machine code of {self.functions} functions"
        )


def _registers(text: str) -> tuple[int, int]:
    """(core registers, bytes of FP registers) named in the first ``{...}`` list of ``text``."""
    m = _REGLIST.search(text)
    if not m:
        return 0, 0
    core = fp = 0
    for item in m.group(1).split(","):
        item = item.strip()
        if not item:
            continue
        a, _, b = item.partition("-")
        n = int(b[1:]) - int(a[1:]) + 1 if b else 1
        if a[0] == "d":
            fp += 8 * n
        elif a[0] == "s":
            fp += 4 * n
        else:
            core += n
    return core, fp


def _frame_bytes(mnemonic: str, ops: str) -> int | None:
    """Bytes one instruction takes off the stack pointer (None: by an amount a register holds)."""
    base = mnemonic.split(".")[0]
    if base == "push" or (base in ("stmdb", "stmfd") and ops.startswith("sp!")):
        core, fp = _registers(ops)
        return 4 * core + fp
    if base == "vpush" or (base in ("vstmdb", "vstmfd") and ops.startswith("sp!")):
        return sum(_registers(ops))
    if base in ("sub", "subw", "subs") and re.match(r"sp,\s*(sp,\s*)?", ops):
        rest = re.sub(r"^sp,\s*(sp,\s*)?", "", ops)
        if rest.startswith("#"):
            return int(_IMM.match(rest).group(1))
        return None
    if base.startswith("str") and re.search(r"\[sp, #-(\d+)\]!", ops):
        return int(re.search(r"\[sp, #-(\d+)\]!", ops).group(1))
    if base == "mov" and ops.startswith("sp,") and not ops.startswith("sp, sp"):
        return None
    return 0


def _is_branch(mnemonic: str) -> bool:
    base = mnemonic.split(".")[0]
    return base in ("b", "bl", "blx") or (base.startswith("b") and base[1:] in _CONDITIONS)


def read_functions(elf: Path) -> dict[str, tuple[int, set[str], bool, list[str]]]:
    """Per function: (its own frame bytes, its direct callees, whether it calls through a register,
    what makes its frame unknown).  Branch targets are resolved by address (objdump names an address
    after the nearest symbol, which may be an absolute one such as the linker script's stack size)."""
    r = run_tool([OBJDUMP, "-d", "--no-show-raw-insn", str(elf)])
    if r.returncode != 0:
        raise TargetError(f"{OBJDUMP} could not read {elf}:\n{r.stderr[-2000:]}")
    lines = r.stdout.splitlines()
    starts = {int(m.group(1), 16): m.group(2) for m in map(_FUNC.match, lines) if m}
    bounds = sorted(starts)
    funcs: dict[str, tuple[int, set[str], bool, list[str]]] = {}
    name, lo, hi = None, 0, 0
    frame, callees, indirect, unknown = 0, set(), False, []
    for line in lines:
        m = _FUNC.match(line)
        if m:
            if name is not None:
                funcs[name] = (frame, callees, indirect, unknown)
            lo = int(m.group(1), 16)
            name, frame, callees, indirect, unknown = m.group(2), 0, set(), False, []
            nxt = [a for a in bounds if a > lo]
            hi = nxt[0] if nxt else 1 << 32
            continue
        m = _INSN.match(line)
        if not m or name is None:
            continue
        mnemonic, ops = m.group(2), m.group(3).split("@")[0].split(";")[0].strip()
        b = _frame_bytes(mnemonic, ops)
        if b is None:
            if name not in SP_RESETTERS:
                unknown.append(f"{mnemonic} {ops}")
        else:
            frame += b
        if _is_branch(mnemonic):
            t = _TARGET.match(ops)
            if t is None:
                if mnemonic.split(".")[0] == "blx":
                    indirect = True
                continue
            at = int(t.group(1), 16)
            if not lo <= at < hi:
                # another function: its start, or (libgcc's shared tails) its middle, counted as a call of
                # the whole of it (its frame from its start: never under the stack that part can take)
                k = bisect.bisect_right(bounds, at) - 1
                if k < 0:
                    unknown.append(f"{mnemonic} {ops} (a branch outside every function)")
                else:
                    callees.add(starts[bounds[k]])
    if name is not None:
        funcs[name] = (frame, callees, indirect, unknown)
    return funcs


def stack_bound(elf, indirect_targets) -> StackBound:
    """The stack the firmware ``elf`` can use at most (:class:`TargetError` when it has no bound).

    ``indirect_targets``: the functions an indirect call may reach (the step's kernels, ``pk_<name>``)."""
    funcs = read_functions(Path(elf))
    targets = sorted(set(indirect_targets))
    missing = [t for t in targets if t not in funcs]
    if missing:
        raise TargetError(
            f"{Path(elf).name}: the indirect call targets {', '.join(missing[:5])} are not in the firmware"
        )
    for f in (ROOT, FAULT_ROOT):
        if f not in funcs:
            raise TargetError(f"{Path(elf).name} has no {f}: not a firmware of the qemu-m4 startup")
    depth: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {}
    on_path: set[str] = set()

    def deepest(f: str) -> tuple[int, tuple[tuple[str, int], ...]]:
        if f in depth:
            return depth[f]
        if f not in funcs:  # a branch into something objdump did not list as a function
            raise TargetError(f"{Path(elf).name}: a call reaches {f}, which is not a function of the firmware")
        frame, callees, indirect, unknown = funcs[f]
        if unknown:
            raise TargetError(
                f"{Path(elf).name}: {f} has no stack bound: {unknown[0]} (the stack pointer moved by a register, or "
                "a branch the bound cannot follow)"
            )
        if indirect and not targets:
            raise TargetError(f"{Path(elf).name}: {f} calls through a pointer, and no targets were given for it")
        on_path.add(f)
        best: tuple[int, tuple[tuple[str, int], ...]] = (0, ())
        for g in sorted(callees | (set(targets) if indirect else set())):
            if g in on_path:
                raise TargetError(f"{Path(elf).name}: {f} and {g} call each other (recursion): no bound on the stack")
            got = deepest(g)
            if got[0] > best[0]:
                best = got
        on_path.discard(f)
        depth[f] = (frame + best[0], ((f, frame), *best[1]))
        return depth[f]

    main, fault = deepest(ROOT), deepest(FAULT_ROOT)
    total = max(main[0] + EXCEPTION_FRAME_BYTES, fault[0])
    chain = main[1] if main[0] + EXCEPTION_FRAME_BYTES >= fault[0] else fault[1]
    return StackBound(total, chain, len(funcs))
