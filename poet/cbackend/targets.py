"""Where a compiled step runs: the :class:`Target` protocol, and the ``host`` target.

A target builds a C project folder (written by :mod:`poet.cbackend.emit`) into a binary under a RAM
budget and runs it in a run folder holding ``batch.bin`` (and, after the run, ``out.bin`` and
``pages.bin``).  Two targets implement the protocol:

* ``host`` (here): the project built with the machine's ``cc`` and the stdio platform
  (``runtime/pk_platform_host.c``), run as a process;
* ``qemu-m4`` (:mod:`poet.cbackend.qemu_m4`): ``arm-none-eabi-gcc`` for a Cortex-M4F, run on QEMU's
  ``mps2-an386`` with a RAM region of exactly the budget, semihosting for files, and an instruction
  counter.

:mod:`poet.cbackend.target_table` picks one by name.

What a project folder holds, for every target: its C and assembly files at the top level (the
runtime, the kernels and the generated tables; ``*.S`` files ``.incbin`` the binary blobs next to
them), compiled with the folder on the include path; target files (a platform, a startup) come from
``poet/cbackend/runtime`` unless the folder has a file of the same name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

from . import hostlib
from .target_types import Build, MemoryUse, RunOutput, TargetError, project_sources

__all__ = [
    "HOST",
    "TARGETS",
    "Build",
    "HostTarget",
    "MemoryUse",
    "RunOutput",
    "Target",
    "TargetError",
    "host_kernel_library",
    "kernels_unchanged",
    "project_sources",
]

TARGETS = ("host", "qemu-m4")


class Target(Protocol):
    """What ``poet compile`` needs of a place to run a step."""

    name: str

    def missing(self) -> str | None:
        """None when the toolchain is there, else a message naming the Debian packages to install."""

    def build(self, project_dir, ram_bytes: int) -> Build:
        """Compile and link the project in ``project_dir`` for a RAM region of ``ram_bytes``."""

    def run(self, build: Build, run_dir, count: bool = False, timeout_s: float = 60.0) -> RunOutput:
        """Run the built step with ``run_dir`` as its working folder (never longer than ``timeout_s``)."""


def kernels_unchanged(project_dir: Path) -> bool:
    """True when the project's copies of the kernels and headers are the runtime's own, byte for byte
    (a target may then link its cached kernel library instead of compiling them again)."""
    shared = {p.name: p for p in hostlib.kernel_sources() + sorted(hostlib.RUNTIME.glob("*.h"))}
    copies = [p for p in list(project_dir.glob("*.c")) + list(project_dir.glob("*.h")) if p.name in shared]
    return all(p.read_bytes() == shared[p.name].read_bytes() for p in copies)


def host_kernel_library() -> Path | None:
    """The kernels compiled with the host's ``cc`` into a static library, once per content (cached);
    None without ``ar`` (the project's copies are compiled then)."""
    ar = shutil.which("ar")
    if ar is None:
        return None
    srcs = hostlib.kernel_sources()
    digest = hostlib.content_hash(srcs + sorted(hostlib.RUNTIME.glob("*.h")), hostlib.CFLAGS)
    out = hostlib.cache_dir() / f"libpk-host-{digest}.a"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        cmd = [hostlib.compiler(), *hostlib.CFLAGS, "-I", str(hostlib.RUNTIME), "-c", *map(str, srcs)]
        r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise TargetError("compiling the kernels for the host failed:\n" + r.stderr[-4000:])
        tmp_out = Path(tmp) / out.name
        objs = sorted(str(p) for p in Path(tmp).glob("*.o"))
        r = subprocess.run([ar, "rcs", str(tmp_out), *objs], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise TargetError("archiving the host kernels failed:\n" + r.stderr[-4000:])
        os.replace(tmp_out, out)  # atomic: a concurrent build of the same sources writes the same file
    return out


def _section_sizes(binary: Path) -> dict[str, int]:
    size = shutil.which("size")
    if size is None:
        return {}
    r = subprocess.run([size, "-A", "-d", str(binary)], capture_output=True, text=True, timeout=60)
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _symbol_sizes(binary: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Sizes of named objects (``nm -S``), 0 for those not found or without ``nm``."""
    nm = shutil.which("nm")
    out = dict.fromkeys(names, 0)
    if nm is None:
        return out
    r = subprocess.run([nm, "-S", str(binary)], capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] in out:
            out[parts[3]] = int(parts[1], 16)
    return out


class HostTarget:
    """The step built with the machine's C compiler and run as a process (stdio files, no counter)."""

    name = "host"
    platform_files = ("pk_platform_host.c",)
    out_dir = "host"

    def missing(self) -> str | None:
        if os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"):
            return None
        return "the host target needs a C compiler (cc); on Debian or Ubuntu: sudo apt-get install gcc libc6-dev"

    def build(self, project_dir, ram_bytes: int) -> Build:
        why = self.missing()
        if why:
            raise TargetError(why)
        project_dir = Path(project_dir).resolve()
        if not project_dir.is_dir():
            raise TargetError(f"no project folder {project_dir}")
        sources = project_sources(project_dir, self.platform_files)
        libs: list[str] = []
        lib = host_kernel_library() if kernels_unchanged(project_dir) else None
        if lib is not None:  # the kernels as they are in the runtime: link the cached library
            kernels = {p.name for p in hostlib.kernel_sources()}
            sources = [p for p in sources if p.name not in kernels]
            libs = [str(lib)]
        out_dir = project_dir / self.out_dir
        out_dir.mkdir(exist_ok=True)
        exe = out_dir / "step"
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            tmp_exe = Path(tmp) / "step"
            cmd = [
                hostlib.compiler(),
                *hostlib.CFLAGS,
                "-I",
                str(project_dir),
                "-I",
                str(hostlib.RUNTIME),
                *map(str, sources),
                *libs,
                "-o",
                str(tmp_exe),
            ]
            try:
                r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900)
            except subprocess.TimeoutExpired:
                raise TargetError(f"compiling {project_dir} did not finish within 900 s") from None
            if r.returncode != 0:
                raise TargetError(f"compiling {project_dir} for the host failed:\n" + r.stderr[-4000:])
            os.replace(tmp_exe, exe)
        secs = _section_sizes(exe)
        syms = _symbol_sizes(exe, ("pk_arena", "pk_grads_external"))
        external = syms["pk_grads_external"]
        flash = sum(secs.get(s, 0) for s in (".text", ".rodata"))
        return Build(
            binary=exe,
            map_file=None,
            memory=MemoryUse(
                ram_region=int(ram_bytes),
                stack=0,
                data=secs.get(".data", 0),
                arena=syms["pk_arena"],
                bss=max(0, secs.get(".bss", 0) - syms["pk_arena"] - external),
                external=external,
                flash=flash,
            ),
        )

    def run(self, build: Build, run_dir, count: bool = False, timeout_s: float = 60.0) -> RunOutput:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            r = subprocess.run(
                [str(Path(build.binary).resolve())], cwd=run_dir, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return RunOutput(exit_code=124, text=out, marks=None, timed_out=True)
        except OSError as e:
            raise TargetError(f"cannot start {build.binary}: {e.strerror or e}") from e
        return RunOutput(exit_code=r.returncode, text=r.stdout + r.stderr, marks=None)


HOST = HostTarget()
