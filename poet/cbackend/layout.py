"""Where a compiled step keeps its data, and the files it reads and writes.

:class:`ProjectLayout` is the part of a C project the Python side needs again after the build: the
offset of every parameter, gradient, buffer and batch tensor in its memory space, how big each space
is, and the layout of ``batch.bin`` and ``out.bin`` (runtime/pk_main.c).  It is written to the
project folder as ``project.json`` and read back to run and check the step.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..fileio import atomic_write
from .ir import KernelProgram

__all__ = [
    "BATCH_MAGIC",
    "FORMAT",
    "OUT_MAGIC",
    "ItemPlace",
    "ProjectLayout",
    "StepResults",
    "batch_image",
    "make_layout",
    "read_layout",
    "read_out",
    "write_batches",
]

FORMAT = "poet-c-project/1"
BATCH_MAGIC = 0x31424B50  # "PKB1"
OUT_MAGIC = 0x314F4B50  # "PKO1"
NUMPY = {
    "float32": np.float32,
    "float64": np.float64,
    "int64": np.int64,
    "int32": np.int32,
    "bool": np.bool_,
    "uint8": np.uint8,
}


def _round8(n: int) -> int:
    return (n + 7) // 8 * 8


@dataclass(frozen=True)
class ItemPlace:
    """One tensor in a memory space: its name, dtype, sizes and byte offset."""

    name: str
    dtype: str
    sizes: tuple[int, ...]
    offset: int
    nbytes: int


def _places(items) -> tuple[tuple[ItemPlace, ...], int]:
    out, off = [], 0
    for it in items:
        out.append(ItemPlace(it.name, it.dtype, tuple(it.sizes), off, it.nbytes))
        off = _round8(off + it.nbytes)
    return tuple(out), off


@dataclass(frozen=True)
class ProjectLayout:
    """The memory spaces of a compiled step and what the Python side needs to feed and read it."""

    name: str
    instructions: int  # schedule instructions per step (pk_mark ids 0..instructions-1)
    arena_bytes: int
    params: tuple[ItemPlace, ...]  # the gradient space has the same layout
    buffers: tuple[ItemPlace, ...]  # the staging space has the same layout
    batch: tuple[ItemPlace, ...]
    consts: tuple[ItemPlace, ...]
    param_bytes: int
    buffer_bytes: int
    batch_bytes: int
    const_bytes: int
    pages_bytes: int
    loss_dtype: str
    params_in_ram: bool  # False: the paper's setting, parameters const (flash), gradients external
    lr: float
    momentum: float
    rng_seed: int  # dropout: step s of a run draws with rng.step_seed(rng_seed, s)
    trained: tuple[str, ...]  # parameters the update changes
    updated_buffers: tuple[str, ...]
    batch_in_flash: bool = False  # the batch is constant data in the image (the paper's setting): no batch.bin

    @property
    def grad_bytes(self) -> int:
        return self.param_bytes

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, indent=1)


def make_layout(
    kp: KernelProgram,
    *,
    instructions: int,
    arena_bytes: int,
    pages_bytes: int,
    params_in_ram: bool,
    lr: float,
    momentum: float,
    rng_seed: int = 0,
    batch_in_flash: bool = False,
) -> ProjectLayout:
    params, pb = _places(kp.params)
    buffers, bb = _places(kp.buffers)
    batch, ab = _places(kp.batch)
    consts, cb = _places(kp.consts)
    return ProjectLayout(
        name=kp.name,
        instructions=instructions,
        arena_bytes=arena_bytes,
        params=params,
        buffers=buffers,
        batch=batch,
        consts=consts,
        param_bytes=pb,
        buffer_bytes=bb,
        batch_bytes=ab,
        const_bytes=cb,
        pages_bytes=pages_bytes,
        loss_dtype=kp.loss_dtype,
        params_in_ram=params_in_ram,
        lr=float(lr),
        momentum=float(momentum),
        rng_seed=int(rng_seed),
        trained=tuple(kp.params[i].name for i in kp.grad_params() if kp.params[i].trainable),
        updated_buffers=tuple(kp.buffers[i].name for i in kp.updated_buffers()),
        batch_in_flash=batch_in_flash,
    )


def read_layout(project_dir) -> ProjectLayout:
    path = Path(project_dir) / "project.json"
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a compiled step's layout ({e}); compile the project again") from e
    if d.pop("format", None) != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file; compile the project again")
    for k in ("params", "buffers", "batch", "consts"):
        d[k] = tuple(ItemPlace(p["name"], p["dtype"], tuple(p["sizes"]), p["offset"], p["nbytes"]) for p in d[k])
    for k in ("trained", "updated_buffers"):
        d[k] = tuple(d[k])
    return ProjectLayout(**d)


def _image(places, nbytes: int, values) -> bytes:
    """The bytes of a space holding ``values`` (arrays or tensors) at their places."""
    buf = bytearray(nbytes)
    for pl, v in zip(places, values):
        arr = np.ascontiguousarray(np.asarray(v), dtype=NUMPY[pl.dtype])
        if tuple(arr.shape) != tuple(pl.sizes):
            raise ValueError(f"{pl.name} has shape {tuple(arr.shape)}; the step was compiled for {tuple(pl.sizes)}")
        raw = arr.tobytes()
        buf[pl.offset : pl.offset + len(raw)] = raw
    return bytes(buf)


def batch_image(layout: ProjectLayout, batch) -> bytes:
    """One step's batch (inputs then targets) as the bytes of the batch space."""
    return _image(layout.batch, layout.batch_bytes, batch)


def write_batches(layout: ProjectLayout, batches, path) -> None:
    """``batch.bin`` for the step: one batch (inputs then targets, numpy arrays or CPU tensors) per step."""
    body = [_image(layout.batch, layout.batch_bytes, b) for b in batches]
    head = struct.pack("<4I", BATCH_MAGIC, len(body), layout.batch_bytes, 0)
    atomic_write(path, lambda f: f.write(head + b"".join(body)), binary=True)


@dataclass(frozen=True)
class StepResults:
    """What the step wrote to ``out.bin``: per step the loss and the gradients, then the final state."""

    losses: tuple[float, ...]
    grads: tuple[dict, ...]  # per step: parameter name -> array
    params: dict  # name -> array, after the last update
    buffers: dict  # name -> array, after the last update


def _split(raw: bytes, places) -> dict:
    return {
        pl.name: np.frombuffer(
            raw, dtype=NUMPY[pl.dtype], count=int(np.prod(pl.sizes, dtype=np.int64)), offset=pl.offset
        )
        .reshape(pl.sizes)
        .copy()
        for pl in places
    }


def read_out(layout: ProjectLayout, path) -> StepResults:
    """Parse ``out.bin`` (ValueError naming what is wrong with it)."""
    raw = Path(path).read_bytes()
    if len(raw) < 16:
        raise ValueError(f"{path} is not a step's output: {len(raw)} B")
    magic, steps, per_step, final = struct.unpack_from("<4I", raw)
    if magic != OUT_MAGIC or per_step != 8 + layout.param_bytes or final != layout.param_bytes + layout.buffer_bytes:
        raise ValueError(f"{path} was not written by this compiled step (header {magic:#x}, {per_step} B per step)")
    if len(raw) != 16 + steps * per_step + final:
        raise ValueError(f"{path} has {len(raw)} B; a run of {steps} steps writes {16 + steps * per_step + final} B")
    losses, grads = [], []
    ldt = NUMPY[layout.loss_dtype]
    for s in range(steps):
        at = 16 + s * per_step
        losses.append(float(np.frombuffer(raw, dtype=ldt, count=1, offset=at)[0]))
        grads.append(_split(raw[at + 8 : at + per_step], layout.params))
    at = 16 + steps * per_step
    params = _split(raw[at : at + layout.param_bytes], layout.params)
    buffers = _split(raw[at + layout.param_bytes :], layout.buffers)
    return StepResults(tuple(losses), tuple(grads), params, buffers)
