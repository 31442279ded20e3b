"""Where a compiled ``--weights stream`` step keeps its parameters: the weight and gradient files.

Each layer with parameters is one block, in layer order, at the same offset of ``weights.bin`` and
``grads.bin``: one record per output channel (``weight[c]`` flattened, then ``bias[c]`` when the layer
has one), so a group of output channels is one contiguous range, and a block is exactly the layer's
parameter bytes the schedule's traffic is priced from (:mod:`poet.graph.weight_traffic`).  The kernels
of ``runtime/pk_wstream_zoo.c`` move these blocks through the staging buffer; the step prints what it
moved (``pk-ws:`` lines), read back here to compare with the priced traffic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..fileio import atomic_write
from ..graph.weights import NO_TRAFFIC, Traffic
from .ir import LoweringError

__all__ = ["StoredLayer", "WeightFiles", "moved_traffic", "priced_traffic", "weight_files"]

WEIGHTS_FILE = "weights.bin"
GRADS_FILE = "grads.bin"


@dataclass(frozen=True)
class StoredLayer:
    """One layer's block: its parameters, byte offset and size, and its records' geometry."""

    layer: str
    weight: str  # '<layer>.weight'
    bias: str | None  # '<layer>.bias', None when the layer has none
    offset: int
    nbytes: int
    cout: int
    weight_shape: tuple[int, ...]

    @property
    def record_floats(self) -> int:
        return self.nbytes // 4 // self.cout


@dataclass(frozen=True)
class WeightFiles:
    """The blocks of every layer with parameters, and the staging buffer they move through."""

    layers: tuple[StoredLayer, ...]
    staging_bytes: int

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.layers)

    def block(self, layer: str) -> StoredLayer:
        for b in self.layers:
            if b.layer == layer:
                return b
        raise KeyError(layer)

    def pack(self, params: dict) -> bytes:
        """The bytes of ``weights.bin`` (or ``grads.bin``) holding ``params`` (name -> array)."""
        out = bytearray(self.nbytes)
        for b in self.layers:
            w = np.asarray(params[b.weight], dtype=np.float32).reshape(b.cout, -1)
            if b.bias:
                w = np.concatenate([w, np.asarray(params[b.bias], dtype=np.float32).reshape(b.cout, 1)], 1)
            rec = w
            raw = np.ascontiguousarray(rec).tobytes()
            out[b.offset : b.offset + len(raw)] = raw
        return bytes(out)

    def unpack(self, raw: bytes) -> dict:
        """Name -> array of what ``raw`` (a weight or gradient file) holds."""
        if len(raw) < self.nbytes:
            raise ValueError(f"the weight file has {len(raw)} B; the step's blocks need {self.nbytes} B")
        out = {}
        for b in self.layers:
            rec = np.frombuffer(raw, np.float32, b.nbytes // 4, b.offset).reshape(b.cout, b.record_floats)
            nw = int(np.prod(b.weight_shape[1:], dtype=np.int64))
            out[b.weight] = rec[:, :nw].reshape(b.weight_shape).copy()
            if b.bias:
                out[b.bias] = rec[:, nw].copy()
        return out

    def write(self, run_dir, params: dict) -> None:
        """``weights.bin`` holding ``params``, and ``grads.bin`` filled with NaN (a gradient read before the
        step wrote it shows in the results), each written atomically."""
        nan = np.full(self.nbytes // 4, np.nan, dtype=np.float32).tobytes()
        for name, data in ((WEIGHTS_FILE, self.pack(params)), (GRADS_FILE, nan)):
            atomic_write(Path(run_dir) / name, lambda f, data=data: f.write(data), binary=True)

    def read(self, run_dir) -> tuple[dict, dict]:
        """(parameters, gradients) the run left in its folder."""
        d = Path(run_dir)
        return self.unpack((d / WEIGHTS_FILE).read_bytes()), self.unpack((d / GRADS_FILE).read_bytes())


def weight_files(params: dict, layer_names, staging_bytes: int, priced: dict | None = None) -> WeightFiles:
    """The blocks of ``params`` ('<layer>.weight' / '.bias' arrays), layers in ``layer_names`` order.

    priced: the graph's (layer -> parameter bytes); a block of another size is refused (the kernels would
    move other bytes than the schedule was priced for)."""
    blocks, off = [], 0
    for lay in layer_names:
        w, bname = f"{lay}.weight", f"{lay}.bias"
        if w not in params:
            continue
        shape = tuple(int(s) for s in np.shape(params[w]))
        bias = bname if bname in params else None
        n = 4 * (int(np.prod(shape, dtype=np.int64)) + (shape[0] if bias else 0))
        if priced is not None and priced.get(lay) != n:
            raise LoweringError(
                f"layer {lay}: its parameters take {n} B, but the schedule's weight traffic was priced for "
                f"{priced.get(lay)} B; solve the model again with --weights stream"
            )
        blocks.append(StoredLayer(lay, w, bias, off, n, shape[0], shape))
        off += n
    return WeightFiles(tuple(blocks), int(staging_bytes))


_MOVED = re.compile(r"^pk-ws: (read_bytes|write_bytes|reads|writes) (\d+)\s*$", re.M)


def moved_traffic(text: str) -> Traffic | None:
    """What the step reports it moved (its ``pk-ws:`` lines), None when it printed none."""
    got = {k: int(v) for k, v in _MOVED.findall(text)}
    if len(got) != 4:
        return None
    return Traffic(got["read_bytes"], got["write_bytes"], got["reads"], got["writes"])


def priced_traffic(schedule) -> Traffic:
    """The traffic the schedule is priced for: every computation's (a recompute pays again)."""
    from ..schedule.core import Op

    nodes = schedule.graph.nodes
    total = NO_TRAFFIC
    for s in schedule.steps:
        if s.op == Op.COMPUTE:
            total = total + nodes[s.node].weight_traffic
    return total


@dataclass(frozen=True)
class WeightTraffic:
    """A ``stream`` run's weight traffic: what its schedule is priced for beside what the step moved."""

    priced: Traffic
    moved: Traffic | None  # None: the step printed no counts

    @property
    def equal(self) -> bool:
        return self.moved == self.priced

    def lines(self) -> list[str]:
        p, m = self.priced, self.moved
        out = ["weight traffic: priced by the schedule beside moved by the step (bytes, transfers)"]
        for what, a, b in (
            ("read", (p.read_bytes, p.reads), None if m is None else (m.read_bytes, m.reads)),
            ("written", (p.write_bytes, p.writes), None if m is None else (m.write_bytes, m.writes)),
        ):
            got = "not reported" if b is None else f"{b[0]:,} B in {b[1]:,}"
            out.append(f"  {what:8s} priced {a[0]:,} B in {a[1]:,}, moved {got}" + ("" if a == b else "  MISMATCH"))
        return out
