"""The ``qemu-m4`` target: a C project built for a Cortex-M4F with ``arm-none-eabi-gcc`` and run on
QEMU's ``mps2-an386`` board under a hard RAM cap.

* **Build.**  The kernels (``runtime/kernels_*.c``, ``pk_math*.c``) are compiled once per content
  into a cached static library (used whenever the project's copies of them are unchanged); the
  project's own C files, the startup (``startup_m4.c``) and the semihosting platform
  (``pk_platform_semihost.c``) are compiled per build and linked with a linker script
  (``m4.ld.in``) whose RAM region is exactly the budget: a firmware whose stack, data, arena and bss
  do not fit does not link, and the error says by how much and of what.  A project file with the
  name of a target file replaces it (the project layout of :mod:`poet.cbackend.targets`).
* **Memory.**  :class:`MemoryUse` is read from the ELF's section sizes: flash, and in RAM the stack,
  data, arena and bss, plus what sits outside the budget in the external region.
* **Run.**  ``qemu-system-arm`` always under ``timeout``, with the run folder as its working folder
  (semihosting opens ``batch.bin``, ``pages.bin``, ``out.bin`` there).  The exit code tells success
  or the fault (``runtime/pk_m4.h``); with ``count=True`` the instruction counter
  (:mod:`poet.cbackend.icount`) records the running count at each ``pk_mark``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import hostlib, icount
from .m4_elf import (
    ADDR2LINE,
    EXTERNAL_BYTES,
    FLASH_BYTES,
    NM,
    SIZE,
    Fault,
    link_map_lines,
    memory_use,
    parse_fault,
    run_tool,
    symbol_address,
)
from .target_types import Build, RunOutput, TargetError, project_sources

__all__ = [
    "ARENA_EXTERNAL",
    "FAULT_EXITS",
    "TARGET",
    "Fault",
    "QemuM4",
    "RegionOverflow",
    "board_misfit",
    "build",
    "link_map_lines",
    "memory_use",
    "missing",
    "run",
    "symbol_address",
]

NAME = "qemu-m4"
DEBIAN_PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "qemu-system-arm")
GCC, AR = "arm-none-eabi-gcc", "arm-none-eabi-ar"
QEMU = "qemu-system-arm"
M4_FLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16")
# every function and object in its own section, so the link keeps only what is called; -g costs no
# flash (debug sections are never loaded) and lets a fault's pc name its function and line
COMPILE_FLAGS = (*hostlib.CFLAGS, *M4_FLAGS, "-ffunction-sections", "-fdata-sections", "-g")
LINK_FLAGS = ("-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections")
TARGET_SOURCES = ("startup_m4.c", "pk_platform_semihost.c")
MACHINE = (
    *("-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none"),
    *("-semihosting-config", "enable=on,target=native"),
)
RAM_REGION_MAX = 4 << 20  # ZBT SSRAM2/3 at 0x20000000
DEFAULT_STACK_BYTES = 4096
OUT_DIR = "qemu-m4"  # build outputs, inside the project folder
# a measurement build's arena in the external region (16 MiB), where no budget applies
ARENA_EXTERNAL = 'PK_ARENA=__attribute__((section(".bss.PK.external"), aligned(8)))'


def _exit_codes() -> dict[str, int]:
    """The exit codes the startup uses, read from the header it is compiled with (one source of truth)."""
    text = (hostlib.RUNTIME / "pk_m4.h").read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"#define (PK_EXIT_\w+) (\d+)", text)}


_CODES = _exit_codes()
FAULT_EXITS = {  # exit code -> what the startup reported (PK_EXIT_FAULT + the exception's number)
    _CODES["PK_EXIT_FAULT"] + 3: "HardFault",
    _CODES["PK_EXIT_FAULT"] + 4: "MemManage",
    _CODES["PK_EXIT_FAULT"] + 5: "BusFault",
    _CODES["PK_EXIT_FAULT"] + 6: "UsageFault",
    _CODES["PK_EXIT_UNEXPECTED_IRQ"]: "unexpected exception",
    _CODES["PK_EXIT_MPU_SETUP"]: "MPU setup",
}
TIMEOUT_EXITS = (124, 137)  # timeout(1): the command timed out / had to be killed
_STACK = re.compile(r"pk-stack: used (\d+) of (\d+)\n?")


# ---- toolchain ---------------------------------------------------------------------------------


@functools.cache
def missing() -> str | None:
    """None when the toolchain and the emulator are installed, else what to install."""
    absent = [t for t in (GCC, SIZE, NM, ADDR2LINE, AR, QEMU, "timeout") if shutil.which(t) is None]
    if GCC not in absent:
        r = subprocess.run([GCC, "-print-file-name=libc_nano.a"], capture_output=True, text=True, timeout=60)
        if not os.path.isabs(r.stdout.strip()):
            absent.append("newlib (libc_nano.a)")
    if not absent:
        return None
    return (
        f"the {NAME} target needs the Arm bare-metal toolchain, newlib and QEMU ({', '.join(absent)} not found); "
        f"on Debian or Ubuntu: sudo apt-get install --no-install-recommends {' '.join(DEBIAN_PACKAGES)}"
    )


@functools.cache
def qemu_version() -> str:
    """The emulator's version line (counts can change with QEMU's translator)."""
    try:
        r = subprocess.run([QEMU, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return QEMU
    return (r.stdout.splitlines() or [QEMU])[0]


def _need_toolchain() -> None:
    why = missing()
    if why:
        raise TargetError(why)


# ---- build -------------------------------------------------------------------------------------


def kernel_library() -> Path:
    """The kernels compiled for the Cortex-M4F into a static library, once per content (cached)."""
    _need_toolchain()
    srcs = hostlib.kernel_sources()
    digest = hostlib.content_hash(srcs + sorted(hostlib.RUNTIME.glob("*.h")), COMPILE_FLAGS)
    out = hostlib.cache_dir() / f"libpk-m4-{digest}.a"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        if srcs:
            r = run_tool([GCC, *COMPILE_FLAGS, "-I", str(hostlib.RUNTIME), "-c", *map(str, srcs)], cwd=Path(tmp))
            if r.returncode != 0:
                raise TargetError("compiling the kernels for the Cortex-M4 failed:\n" + r.stderr[-4000:])
        tmp_out = Path(tmp) / out.name
        objs = sorted(str(p) for p in Path(tmp).glob("*.o"))
        r = run_tool([AR, "rcs", str(tmp_out), *objs])
        if r.returncode != 0:
            raise TargetError("archiving the Cortex-M4 kernels failed:\n" + r.stderr[-4000:])
        os.replace(tmp_out, out)
    return out


def linker_script(
    ram_bytes: int, stack_bytes: int, flash_bytes: int = FLASH_BYTES, external_bytes: int = EXTERNAL_BYTES
) -> str:
    """``m4.ld.in`` with the budget, the stack size and the flash and external lengths filled in."""
    text = (hostlib.RUNTIME / "m4.ld.in").read_text()
    for key, value in (
        ("@RAM_BYTES@", ram_bytes),
        ("@STACK_BYTES@", stack_bytes),
        ("@FLASH_BYTES@", flash_bytes),
        ("@EXTERNAL_BYTES@", external_bytes),
    ):
        text = text.replace(key, str(value))
    return text


class RegionOverflow(TargetError):
    """The image's code and constants (FLASH) or its external data (EXTERNAL) do not fit the board:
    ``over`` is region -> bytes too many (RAM overflows are plain :class:`TargetError`: a budget)."""

    def __init__(self, message: str, over: dict[str, int]):
        super().__init__(message)
        self.over = dict(over)


def _check_sizes(ram_bytes: int, stack_bytes: int) -> None:
    if isinstance(ram_bytes, bool) or not isinstance(ram_bytes, int) or not 256 <= ram_bytes <= RAM_REGION_MAX:
        raise TargetError(f"RAM budget {ram_bytes!r}: give bytes from 256 to {RAM_REGION_MAX:,} (mps2-an386's 4 MiB)")
    if isinstance(stack_bytes, bool) or not isinstance(stack_bytes, int) or stack_bytes < 256 or stack_bytes % 8:
        raise TargetError(f"stack size {stack_bytes!r}: give a multiple of 8 bytes, at least 256")
    if stack_bytes >= ram_bytes:
        raise TargetError(
            f"the RAM budget of {ram_bytes:,} B cannot hold a {stack_bytes:,} B stack, let alone the arena and data "
            "besides: the qemu-m4 RAM region is the whole budget; give a larger budget or a smaller stack"
        )


def _sources(project_dir: Path) -> tuple[list[Path], bool]:
    """What to compile: the project's C and assembly files and the target's runtime files it has no
    copy of; and whether to link the cached kernel library instead of compiling the project's
    kernels (when its copies of the kernels and headers are the runtime's own, byte for byte)."""
    sources = project_sources(project_dir, TARGET_SOURCES)
    shared = {p.name: p for p in hostlib.kernel_sources() + sorted(hostlib.RUNTIME.glob("*.h"))}
    copies = [p for p in list(project_dir.glob("*.c")) + list(project_dir.glob("*.h")) if p.name in shared]
    if any(p.read_bytes() != shared[p.name].read_bytes() for p in copies):
        return sources, False  # edited copies: compile the project's own
    kernels = {p.name for p in hostlib.kernel_sources()}
    return [p for p in sources if p.name not in kernels], True


def build(
    project_dir,
    ram_bytes: int,
    *,
    stack_bytes: int = DEFAULT_STACK_BYTES,
    defines=(),
    flash_bytes: int = FLASH_BYTES,
    external_bytes: int = EXTERNAL_BYTES,
) -> Build:
    """Compile and link ``project_dir`` for the Cortex-M4F with a RAM region of exactly ``ram_bytes``.

    Outputs go to ``project_dir/qemu-m4/`` (``m4.ld``, ``firmware.elf``, ``firmware.map``), each
    replaced only once the link succeeded.  :class:`TargetError` says what did not fit or compile
    (:class:`RegionOverflow` when flash or the external region is too small).
    ``defines``: ``NAME=VALUE`` macros for the project's own files (a measurement build moves the
    arena outside the budget with ``PK_ARENA=...``, see :data:`ARENA_EXTERNAL`).  ``flash_bytes``,
    ``external_bytes``: the board's, unless a link is made only to map a step whose data the board
    cannot hold (such a build is never run: :func:`run` refuses it).
    """
    _check_sizes(ram_bytes, stack_bytes)
    _need_toolchain()
    project_dir = Path(project_dir).resolve()
    if not project_dir.is_dir():
        raise TargetError(f"no project folder {project_dir}")
    sources, use_library = _sources(project_dir)
    libs = [str(kernel_library())] if use_library else []
    out_dir = project_dir / OUT_DIR
    out_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp = Path(tmp)
        includes = ["-I", str(project_dir), "-I", str(hostlib.RUNTIME)]
        macros = [f"-D{d}" for d in defines]
        r = run_tool([GCC, *COMPILE_FLAGS, *includes, *macros, "-c", *map(str, sources)], cwd=tmp)
        if r.returncode != 0:
            raise TargetError(f"compiling {project_dir} for the Cortex-M4 failed:\n" + r.stderr[-4000:])
        objs = sorted(str(p) for p in tmp.glob("*.o"))
        regions = (flash_bytes, external_bytes)
        r = _link(tmp, objs, libs, ram_bytes, stack_bytes, regions)
        if r.returncode != 0:
            over = {
                g: int(m[1])
                for g in ("FLASH", "EXTERNAL")
                if (m := re.search(rf"region `{g}' overflowed by (\d+) bytes?", r.stderr))
            }
            if over:  # the board cannot hold the step's data: say so first (the RAM budget is the next question)
                raise RegionOverflow(
                    "; ".join(
                        f"the firmware does not fit the {g} region of {n:,} B: {over[g]:,} B too many"
                        for g, n in (("FLASH", flash_bytes), ("EXTERNAL", external_bytes))
                        if g in over
                    ),
                    over,
                )
            raise TargetError(_link_failure(r.stderr, tmp, objs, libs, ram_bytes, stack_bytes, regions))
        for name in ("m4.ld", "firmware.map", "firmware.elf"):
            os.replace(tmp / name, out_dir / name)
    elf = out_dir / "firmware.elf"
    lines = link_map_lines(elf, ram_bytes, flash_bytes, external_bytes)
    return Build(elf, out_dir / "firmware.map", memory_use(elf, ram_bytes), tuple(lines))


def _link(
    folder: Path, objs, libs, ram_bytes: int, stack_bytes: int, regions=(FLASH_BYTES, EXTERNAL_BYTES)
) -> subprocess.CompletedProcess:
    (folder / "m4.ld").write_text(linker_script(ram_bytes, stack_bytes, *regions))
    cmd = [GCC, *M4_FLAGS, *LINK_FLAGS, "-T", "m4.ld", "-Wl,-Map=firmware.map", *objs, *libs, "-o", "firmware.elf"]
    return run_tool(cmd, cwd=folder)


_LIBM = {"expf", "logf", "tanhf", "erff", "sqrtf", "powf", "exp", "log", "sqrt", "tanh", "erf", "pow", "log1pf"}


def _link_failure(
    stderr: str, folder: Path, objs, libs, ram_bytes: int, stack_bytes: int, regions=(FLASH_BYTES, EXTERNAL_BYTES)
) -> str:
    """The linker's complaint, in words that say what to change."""
    over = re.search(r"region `RAM' overflowed by (\d+) bytes?", stderr)
    if over:
        # link once more with the whole 4 MiB to learn how much each part takes
        r = _link(folder, objs, libs, RAM_REGION_MAX, stack_bytes, regions)
        if r.returncode == 0:
            m = memory_use(folder / "firmware.elf", ram_bytes)
            return (
                f"the firmware does not fit the RAM budget: it needs {m.ram:,} B (stack {m.stack:,} + data {m.data:,}"
                f" + arena {m.arena:,} + bss {m.bss:,}) but the RAM region is {ram_bytes:,} B, "
                f"{m.ram - ram_bytes:,} B too many; give a larger budget, a smaller stack, or a schedule that needs"
                " less"
            )
        return f"the firmware does not fit the RAM budget of {ram_bytes:,} B (over by at least {over[1]} B)"
    for region, length in zip(("FLASH", "EXTERNAL"), regions):
        m = re.search(rf"region `{region}' overflowed by (\d+) bytes?", stderr)
        if m:
            return f"the firmware does not fit the {region} region of {length:,} B: {int(m[1]):,} B too many"
    poet = re.findall(r"POET: [^\n]*", stderr)
    if poet:
        return "; ".join(dict.fromkeys(poet))
    undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", stderr)))
    if "_sbrk" in undefined:
        return "the firmware calls malloc (or something that does): the C backend has no heap on the Cortex-M4"
    if set(undefined) & _LIBM:
        names = ", ".join(sorted(set(undefined) & _LIBM))
        return f"the firmware calls libm ({names}): kernels use pk_math's deterministic functions instead"
    if undefined:
        return f"undefined on the Cortex-M4: {', '.join(undefined)} (no libc beyond <string.h>, no OS calls)"
    return "linking the Cortex-M4 firmware failed:\n" + stderr[-4000:]


# ---- run ---------------------------------------------------------------------------------------


def board_misfit(build: Build) -> str:
    """What of a build the board cannot hold ("" when it runs there): a link that maps a step whose
    data is larger than the board's flash or external RAM."""
    m = build.memory
    out = []
    if m.flash > FLASH_BYTES:
        out.append(f"its code and constant data take {m.flash:,} B of flash, the board has {FLASH_BYTES:,} B")
    if m.external > EXTERNAL_BYTES:
        out.append(f"its external data take {m.external:,} B, the board's external RAM is {EXTERNAL_BYTES:,} B")
    return "; ".join(out)


def run(build: Build, run_dir, count: bool = False, timeout_s: float = 60.0) -> RunOutput:
    """Run the firmware once on mps2-an386 with ``run_dir`` as the emulator's working folder.

    Never longer than ``timeout_s`` (then ``timed_out``).  :class:`TargetError` only when QEMU itself
    could not start; a firmware that fails still returns its :class:`RunOutput`.
    """
    _need_toolchain()
    too_big = board_misfit(build)
    if too_big:
        raise TargetError(f"{Path(build.binary).name} cannot run on mps2-an386: {too_big}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    elf = Path(build.binary).resolve()
    extra: list[str] = []
    if count:
        mark = symbol_address(elf, "pk_mark")
        extra = icount.qemu_args(mark)
        (run_dir / icount.OUT_NAME).unlink(missing_ok=True)
    cmd = ["timeout", "--kill-after=5", f"{timeout_s:g}", QEMU, *MACHINE, "-kernel", str(elf), *extra]
    proc = subprocess.Popen(cmd, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout_s + 15)
    except BaseException:  # the guard's guard, and Ctrl-C: timeout(1) passes SIGTERM on to QEMU
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    code = proc.returncode
    text = (err + out).decode(errors="replace")
    qemu_errors = [line for line in text.splitlines() if line.startswith(f"{QEMU}:")]
    if qemu_errors and code not in TIMEOUT_EXITS:
        raise TargetError(f"{QEMU} could not run {elf.name}: " + "; ".join(qemu_errors))
    stack = _STACK.search(text)
    timed_out = code in TIMEOUT_EXITS
    counted = icount.read(run_dir / icount.OUT_NAME) if count and not timed_out else None
    return RunOutput(
        exit_code=code,
        text=_STACK.sub("", text),
        marks=counted.marks if counted else None,
        instructions=counted.total if counted else None,
        stack_used=int(stack[1]) if stack else None,
        fault=parse_fault(text, elf) if code in FAULT_EXITS else None,
        timed_out=timed_out,
    )


class QemuM4:
    """The ``qemu-m4`` target (the :class:`poet.cbackend.targets.Target` protocol)."""

    name = NAME

    def missing(self) -> str | None:
        return missing()

    def build(self, project_dir, ram_bytes: int, **options) -> Build:
        """:func:`build` (options: ``stack_bytes``, ``defines``, ``flash_bytes``, ``external_bytes``)."""
        return build(project_dir, ram_bytes, **options)

    def run(self, build: Build, run_dir, count: bool = False, timeout_s: float = 60.0) -> RunOutput:
        return run(build, run_dir, count, timeout_s)


TARGET = QemuM4()
