"""The C backend's kernel program: what a training step's nodes run, with every tensor placed.

A front-end (today :mod:`poet.cbackend.lower`, for traced aten programs, tiled or not) turns a
program into a :class:`KernelProgram`: per poet node the kernel calls its ``compute`` runs, every
tensor argument a :class:`TensorRef` (which memory space, which item of it, the byte offset inside
that item, dtype, sizes, strides), and the data the step starts from (parameters, buffers,
constants).  Nothing here knows about FX or torch: a second front-end (the zoo's layer graphs) can
produce the same program, and :mod:`poet.cbackend.emit` turns any of them, with a validated
schedule and an arena plan, into C.

Spaces (``TensorRef.space``):

* ``node``: the arena block of poet node ``index`` (where its current residency lives);
* ``param`` / ``grad``: parameter ``index`` and its gradient;
* ``buffer``: buffer ``index`` (BatchNorm running statistics ...), ``staging``: its update, written
  while the step runs and copied over the buffer after it (a recomputation reads the old value);
* ``batch``: batch tensor ``index`` (inputs then targets), ``const``: constant ``index`` (the loss
  tangent, constants of the traced graph); ``loss``: the step's loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DTYPE_BYTES",
    "SPACES",
    "DataItem",
    "KernelCall",
    "KernelProgram",
    "LoweringError",
    "NodeCode",
    "OutputCopy",
    "TensorRef",
    "contiguous_strides",
]

SPACES = ("node", "param", "grad", "buffer", "staging", "batch", "const", "loss")
DTYPE_BYTES = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}


class LoweringError(ValueError):
    """A program or schedule the C backend cannot compile (raised before anything is built)."""


def contiguous_strides(sizes) -> tuple[int, ...]:
    """Row-major strides (in elements) of a tensor of ``sizes``."""
    out, acc = [], 1
    for s in reversed(tuple(sizes)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


@dataclass(frozen=True)
class TensorRef:
    """One tensor argument: a strided view into item ``index`` of ``space``, ``offset`` bytes in."""

    space: str
    index: int
    offset: int  # bytes from the start of the item (a node's block, a parameter, ...)
    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]  # in elements; 0 where a dimension is broadcast

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def extent_bytes(self) -> int:
        """Bytes from ``offset`` to one past the last element the view can touch (0 if empty)."""
        if any(s == 0 for s in self.sizes):
            return 0
        last = sum((s - 1) * st for s, st in zip(self.sizes, self.strides))
        return (last + 1) * self.itemsize


@dataclass(frozen=True)
class KernelCall:
    """``pk_<kernel>(tensors..., scalars...)``: inputs first, then outputs (None: PK_NONE)."""

    kernel: str
    op: str  # registry key of the op it computes (aten.relu.default, a tile kernel's name)
    fx_name: str  # the traced node it comes from (for error messages)
    tensors: tuple[TensorRef | None, ...]
    n_inputs: int
    scalars: tuple[int | float, ...] = ()


@dataclass(frozen=True)
class NodeCode:
    """What ``compute`` of one poet node runs; its outputs fill the node's block of ``nbytes``."""

    node: int
    name: str
    nbytes: int  # the block a residency of the node occupies (the graph's ram_bytes)
    calls: tuple[KernelCall, ...]
    accumulates: bool = False  # adds into the gradient space: computing it twice would count it twice


@dataclass(frozen=True)
class OutputCopy:
    """A graph output (loss, a gradient, a buffer update) copied to its place the first time
    every node it is read from is in RAM (``roots``: poet nodes; empty: ready before the step)."""

    role: str  # 'loss' | 'grad' | 'buffer'
    name: str  # parameter / buffer name ('' for the loss)
    src: TensorRef
    dst: TensorRef
    roots: tuple[int, ...]


@dataclass(frozen=True)
class DataItem:
    """A parameter, buffer, batch tensor or constant: its shape, and its bytes where it has some."""

    name: str
    dtype: str
    sizes: tuple[int, ...]
    data: bytes | None = None  # contiguous little-endian values (None for the batch)
    trainable: bool = True  # parameters: has a gradient the update applies

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for s in self.sizes:
            n *= s
        return n


@dataclass(frozen=True)
class KernelProgram:
    """A training step as kernel calls per poet node, with everything it reads and writes placed."""

    name: str
    nodes: tuple[NodeCode, ...]
    params: tuple[DataItem, ...]
    buffers: tuple[DataItem, ...]
    batch: tuple[DataItem, ...]
    consts: tuple[DataItem, ...]
    outputs: tuple[OutputCopy, ...]
    loss_dtype: str = "float32"
    notes: tuple[str, ...] = field(default=())
    direct_grads: tuple[str, ...] = ()  # parameters whose gradient the kernels write into the grad space
    zero_grads: bool = False  # the grad space is zeroed before each step (some kernels accumulate into it)
    # --weights stream: the weight and gradient files' blocks (poet.cbackend.wstore.WeightFiles); the
    # parameters are then not in the image (params is empty) and the update streams through the files
    stream: object | None = None

    def kernels(self) -> tuple[str, ...]:
        """Every distinct kernel the program calls, sorted."""
        return tuple(sorted({c.kernel for nd in self.nodes for c in nd.calls}))

    def updated_buffers(self) -> tuple[int, ...]:
        """Indices of the buffers the step updates (their ``staging`` copies)."""
        names = {o.name for o in self.outputs if o.role == "buffer"}
        return tuple(i for i, b in enumerate(self.buffers) if b.name in names)

    def grad_params(self) -> tuple[int, ...]:
        """Indices of the parameters whose gradient the step produces."""
        names = {o.name for o in self.outputs if o.role == "grad"} | set(self.direct_grads)
        return tuple(i for i, p in enumerate(self.params) if p.name in names)
