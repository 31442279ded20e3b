"""Writing a compiled step as a self-contained C project folder.

The folder holds everything a C compiler needs and nothing else: the runtime and the kernels
(copies of ``poet/cbackend/runtime``), the generated tables (``pk_model.c``, ``pk_config.h``), the
data as binary files pulled in by ``pk_data.S``, the target platforms under ``platform/`` (a
target compiles the one it needs), a ``Makefile`` for the host, and ``project.json`` (the layout
the Python side reads back to feed and check the step).  It is written to a temporary folder
beside the destination and moved into place only once complete; an existing folder is replaced
only when asked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..schedule.core import Schedule
from .arena import ArenaPlan
from .emit import Tables, build_tables, config_header, data_assembly, model_source
from .hostlib import CFLAGS, RUNTIME
from .ir import KernelProgram
from .layout import ProjectLayout, batch_image, make_layout

__all__ = ["Project", "ProjectExists", "write_project"]


def _portable(name: str) -> bool:
    """Runtime files every target compiles (the rest belong to one target or tool: platform/)."""
    return (
        name.endswith(".h")
        or name in ("pk_runtime.c", "pk_main.c", "pk_wstream.c", "pk_wstream_zoo.c")
        or (name.endswith(".c") and name.startswith(("kernels_", "pk_math")))
    )


class ProjectExists(FileExistsError):
    """The output folder exists and replacing it was not asked for."""


@dataclass(frozen=True)
class Project:
    """A written C project: where it is, its layout, its arena plan and the size of its tables."""

    path: Path
    layout: ProjectLayout
    arena: ArenaPlan
    tables: Tables


def _makefile() -> str:
    flags = " ".join(CFLAGS)
    return (
        "# Makefile: the step for this machine (poet compile --target host builds the same way).\n"
        f"CFLAGS ?= {flags}\n"
        "step: *.c *.S *.h platform/pk_platform_host.c\n"
        "\t$(CC) $(CFLAGS) -I . *.c *.S platform/pk_platform_host.c -o $@\n"
        "run: step  # in run/, where poet compile --run writes batch.bin\n"
        "\tcd run && ../step\n"
        ".PHONY: run\n"
    )


def _write(path: Path, data) -> None:
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


def _blob(items, layout_items, nbytes: int) -> bytes:
    buf = bytearray(nbytes)
    for it, pl in zip(items, layout_items):
        if it.data is not None:
            buf[pl.offset : pl.offset + len(it.data)] = it.data
    return bytes(buf)


def write_project(
    kp: KernelProgram,
    schedule: Schedule,
    plan: ArenaPlan,
    out_dir,
    *,
    params_in_ram: bool,
    lr: float,
    momentum: float = 0.0,
    rng_seed: int = 0,
    poison: bool = False,
    names: bool = True,
    force: bool = False,
    batch=None,
) -> Project:
    """Write the C project of ``kp`` under ``schedule`` (already validated) with the arena ``plan``.

    ``batch``: one step's batch (inputs then targets) to build into the image as constant data (the
    paper's setting: data like the parameters, in flash); None: the step reads batches from batch.bin."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        raise ProjectExists(f"{out_dir} exists and is not empty; choose another folder or pass --force to replace it")
    if not params_in_ram and momentum:
        raise ValueError("with the parameters in flash the step cannot keep momentum; use plain SGD (momentum 0)")
    layout0 = make_layout(
        kp,
        instructions=len(schedule.steps),
        arena_bytes=plan.arena_bytes,
        pages_bytes=0,
        params_in_ram=params_in_ram,
        lr=lr,
        momentum=momentum,
        rng_seed=rng_seed,
        batch_in_flash=batch is not None,
    )
    tables = build_tables(kp, schedule, plan, layout0)
    layout = make_layout(
        kp,
        instructions=len(schedule.steps),
        arena_bytes=plan.arena_bytes,
        pages_bytes=tables.pages_bytes,
        params_in_ram=params_in_ram,
        lr=lr,
        momentum=momentum,
        rng_seed=rng_seed,
        batch_in_flash=batch is not None,
    )
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=parent))
    try:
        (tmp / "platform").mkdir()
        for src in sorted(RUNTIME.iterdir()):
            if src.suffix not in (".c", ".h", ".in"):
                continue
            shutil.copyfile(src, tmp / ("." if _portable(src.name) else "platform") / src.name)
        files = {
            "pk_model.c": model_source(kp, tables, layout, names=names, poison=poison),
            "pk_config.h": config_header(tables),
            "pk_data.S": data_assembly(params_in_ram, batch is not None),
            "params.bin": _blob(kp.params, layout.params, layout.param_bytes),
            "buffers.bin": _blob(kp.buffers, layout.buffers, layout.buffer_bytes),
            "consts.bin": _blob(kp.consts, layout.consts, layout.const_bytes),
            "project.json": layout.to_json(),
            "Makefile": _makefile(),
        }
        if batch is not None:
            files["batch_data.bin"] = batch_image(layout, batch)
        for name, data in files.items():
            _write(tmp / name, data)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-old-", dir=parent))
            os.replace(out_dir, old / "x")
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Project(out_dir, layout, plan, tables)
