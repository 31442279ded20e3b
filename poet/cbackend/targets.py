"""Where a compiled step runs: the :class:`Target` protocol, and the ``host`` target.

A target builds a C project folder (written by :mod:`poet.cbackend.emit`) into a binary under a RAM
budget and runs it in a run folder holding ``batch.bin`` (and, after the run, ``out.bin`` and
``pages.bin``).  Two targets implement the protocol:

* ``host`` (here): the project built with the machine's ``cc`` and the stdio platform
  (``runtime/pk_platform_host.c``), run as a process;
* ``qemu-m4`` (:mod:`poet.cbackend.qemu_m4`): ``arm-none-eabi-gcc`` for a Cortex-M4F, run on QEMU's
  ``mps2-an386`` with a RAM region of exactly the budget, semihosting for files, and an instruction
  counter.

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
    "get_target",
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


def get_target(name: str) -> Target:
    """The target called ``name`` (``host`` or ``qemu-m4``)."""
    if name == "host":
        return HOST
    if name == "qemu-m4":
        try:
            from . import qemu_m4
        except ImportError as e:
            raise TargetError(f"the qemu-m4 target is not available in this installation ({e})") from e
        return getattr(qemu_m4, "TARGET", None) or qemu_m4.QemuM4()
    raise TargetError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
