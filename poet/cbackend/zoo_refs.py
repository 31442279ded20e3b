"""Tensor references of a zoo graph's nodes: blocks, parameter slices and row sources (runtime/pk_zoo.h).

Every tensor is seen as (B, C, rows, W) (a flat vector as (B, 1, F, 1)); a node's block holds its rows
``[lo, hi)`` and, when its layer is split into channel groups, its channels ``[clo, chi)``, for the
whole batch, contiguous, so its bytes are the graph's ``ram_bytes`` for it.  A kernel reads a layer
output through a *row source*: the pieces of it the node reads, each with its first row and first
channel; a gradient source has one group per layer reading the output, summed.  A tile of channels
``[clo, chi)`` of a channel-wise layer gets views of those channels only (numbered from 0), and the
matching slices of its parameters, statistics and gradients.
"""

from __future__ import annotations

from ..graph.tiling_ranges import rows_of
from ..graph.zoo import DATA
from .ir import KernelCall, LoweringError, TensorRef, contiguous_strides

__all__ = ["BN_EPS", "ZooRefs", "ref", "zoo_call"]

F32 = 4
BN_EPS = 1e-5  # torch.nn.BatchNorm2d's default, as zoo_torch builds it


def canon(shape, b: int, lo: int, hi: int, what: str, clo=None, chi=None) -> tuple[int, ...]:
    """The (B, C, rows, W) sizes of rows ``[lo, hi)`` (channels ``[clo, chi)``) of a tensor of ``shape``."""
    if len(shape) == 3:
        return (b, shape[0] if clo is None else chi - clo, hi - lo, shape[2])
    if len(shape) == 1:
        return (b, 1, hi - lo, 1)
    raise LoweringError(f"{what}: tensors of shape {tuple(shape)} (tokens) are not compiled yet")


def ref(space: str, index: int, sizes, dtype: str = "float32") -> TensorRef:
    sizes = tuple(int(s) for s in sizes)
    return TensorRef(space, index, 0, dtype, sizes, contiguous_strides(sizes))


def channel_view(r: TensorRef, have0: int, a: int, b: int) -> TensorRef:
    """Channels ``[a, b)`` of a (B, C, rows, W) view whose channel 0 is the tensor's channel ``have0``."""
    off = r.offset + (a - have0) * r.strides[1] * r.itemsize
    return TensorRef(r.space, r.index, off, r.dtype, (r.sizes[0], b - a, *r.sizes[2:]), r.strides)


def source(groups) -> tuple[list, list]:
    """Tensors and scalars of a row source (runtime/pk_zoo.h): per piece its first row and channel."""
    tensors, scalars = [], [len(groups)]
    for g in groups:
        scalars.append(len(g))
        for r, start, cstart in g:
            tensors.append(r)
            scalars += [int(start), int(cstart)]
    return tensors, scalars


def zoo_call(kernel: str, v_name: str, fixed_in, srcs, outs, scalars) -> KernelCall:
    """A call of zoo kernel ``kernel``: fixed inputs, then the row sources, then the outputs; the
    sources' scalars after the kernel's own."""
    tensors, sc = list(fixed_in), list(scalars)
    for s in srcs:
        t, s2 = source(s)
        tensors += t
        sc += s2
    return KernelCall(
        kernel=kernel,
        op=f"zoo.{kernel}",
        fx_name=v_name,
        tensors=tuple(tensors) + tuple(outs),
        n_inputs=len(tensors),
        scalars=tuple(sc),
    )


class ZooRefs:
    """The references of one zoo program's nodes (``zp``: a :class:`~poet.cbackend.lower_zoo.ZooProgram`)."""

    def __init__(self, zp):
        self.zp = zp
        self.L = zp.layers.layers
        self.b = zp.batch_size
        self.preds = [[] for _ in zp.graph.nodes]
        for u, v in zp.graph.edges:
            self.preds[v].append(u)
        self.pindex = {k: i for i, k in enumerate(zp.params)}
        self.ws = None  # the streamed weights (lower_zoo_ws.StreamedWeights) when the schedule streams them

    # --- shapes and refs
    def shape(self, x: int):
        return self.zp.layers.input_shape if x == DATA else self.L[x].shape

    def rows(self, x: int) -> int:
        return rows_of(self.shape(x))

    def what(self, v: int) -> str:
        return f"node {v} ({self.zp.graph.nodes[v].name})"

    def param(self, layer: int, kind: str, space: str = "param", clo=None, chi=None, axis: int = 0):
        """Parameter ``<layer>.<kind>`` (or its gradient), or its slice ``[clo, chi)`` along ``axis``."""
        key = f"{self.L[layer].name}.{kind}"
        if key not in self.pindex:
            return None
        r = ref(space, self.pindex[key], self.zp.params[key].shape)
        if clo is None:
            return r
        sizes = list(r.sizes)
        sizes[axis] = chi - clo
        return TensorRef(r.space, r.index, clo * r.strides[axis] * F32, r.dtype, tuple(sizes), r.strides)

    def block(self, v: int, x: int, lo: int, hi: int, clo=None, chi=None) -> TensorRef:
        return ref("node", v, canon(self.shape(x), self.b, lo, hi, self.what(v), clo, chi))

    def stats_ref(self, u: int | None, layer: int, clo=None, chi=None) -> TensorRef | None:
        """BatchNorm statistics (C, 2) held by node ``u`` (None: none), or the rows of channels [clo, chi)."""
        if u is None:
            return None
        r = ref("node", u, (self.L[layer].shape[0], 2))
        if clo is None:
            return r
        return TensorRef(r.space, r.index, clo * 2 * F32, r.dtype, (chi - clo, 2), r.strides)

    # --- sources
    def pieces_of(self, v: int, x: int, lo: int, hi: int, clo=None, chi=None) -> list[tuple]:
        """The pieces of layer ``x``'s output node ``v`` reads, covering rows [lo, hi) (channels [clo, chi),
        numbered from clo, when given)."""
        if x == DATA:
            sizes = canon(self.shape(DATA), self.b, 0, self.rows(DATA), self.what(v))
            got = [(ref("batch", 0, sizes), 0, 0)]
        else:
            got = []
            for u in self.preds[v]:
                r = self.zp.roles[u]
                if r.layer == x and r.kind == "output":
                    got.append((self.block(u, x, r.lo, r.hi, r.clo, r.chi), r.lo, r.clo or 0))
                elif r.layer == x and r.kind == "partial" and r.index == r.count - 1:
                    got.append((self.block(u, x, 0, self.rows(x)), 0, 0))  # the chain's last step: the whole
        return self.covering(v, self.restrict(got, clo, chi), lo, hi, clo, chi, f"layer {self.L[x].name}'s output")

    def grad_groups(self, v: int, x: int, lo: int, hi: int, clo=None, chi=None) -> list[list[tuple]]:
        """The gradient of layer ``x``'s output over rows [lo, hi) (channels [clo, chi)): one group per
        layer reading it."""
        groups: dict[int, list] = {}
        for u in self.preds[v]:
            r = self.zp.roles[u]
            if r.kind in ("grad_input", "loss_grad", "backward") and x in r.grad_of:
                lo_u, hi_u = (0, self.rows(x)) if r.kind == "backward" else (r.lo, r.hi)
                groups.setdefault(r.layer, []).append((self.block(u, x, lo_u, hi_u, r.clo, r.chi), lo_u, r.clo or 0))
        if not groups:
            raise LoweringError(f"{self.what(v)}: reads no gradient of layer {self.L[x].name}'s output")
        what = f"the gradient of {self.L[x].name}'s output"
        return [self.covering(v, self.restrict(g, clo, chi), lo, hi, clo, chi, what) for _, g in sorted(groups.items())]

    @staticmethod
    def restrict(pieces, clo, chi) -> list[tuple]:
        """The pieces holding any of channels [clo, chi), as views of those channels numbered from clo."""
        pieces = sorted(pieces, key=lambda p: (p[1], p[2]))
        if clo is None:
            return pieces
        out = []
        for r, start, c0 in pieces:
            a, b = max(c0, clo), min(c0 + r.sizes[1], chi)
            if a < b:
                out.append((channel_view(r, c0, a, b), start, a - clo))
        return out

    def covering(self, v, pieces, lo, hi, clo, chi, what):
        """``pieces``, checked to hold every row of [lo, hi) of every channel asked for."""
        ends = [c0 + r.sizes[1] for r, _, c0 in pieces]
        width = (max(ends) if ends else 1) if clo is None else chi - clo
        cuts = [c for c in sorted({0, *(c0 for _, _, c0 in pieces), *ends}) if c < width]
        for c in cuts:
            at = lo
            for r, start, c0 in pieces:
                if c0 <= c < c0 + r.sizes[1] and start <= at < start + r.sizes[2]:
                    at = start + r.sizes[2]
            if at < hi:
                rng = "" if clo is None else f", channels [{clo}, {chi})"
                raise LoweringError(
                    f"{self.what(v)}: the pieces of {what} it reads do not cover rows [{lo}, {hi}){rng}"
                )
        return pieces

    def pred_role(self, v: int, kind: str, layer: int, index: int | None = None) -> int | None:
        """The pred of ``v`` that is step ``index`` (default: the last) of ``layer``'s ``kind`` chain."""
        for u in self.preds[v]:
            r = self.zp.roles[u]
            if r.kind == kind and r.layer == layer and r.index == (r.count - 1 if index is None else index):
                return u
        return None
