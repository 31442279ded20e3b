"""The calls of a zoo graph's convolution and linear nodes when the schedule streams the weights.

Under ``--weights stream`` a layer's parameters and gradient live in the weight and gradient files
(:mod:`poet.cbackend.wstore`), not in the image: a forward or grad-input node reads its layer's block
(a group of output channels: its records) through the staging buffer, a weight-gradient node writes
its block, or reads, adds to and writes it back (``runtime/pk_wstream_zoo.c``).  Which maker of a
gradient writes first is decided by the schedule's order of computation (the priced rule counts one
write and read-modify-writes for the rest per share, whatever the order; makers are computed once).
Built: row tiles, whole layers and groups of output channels (forward, weight gradient), for
convolutions, linear layers and BatchNorm (a record [gamma, beta] per channel: its forward and grad-input
read their channels' records; the node that makes the gradient -- the backward statistics chain's steps,
else the grad-input tiles -- adds its rows' share to it).  Every maker is computed once (``accumulates``).
and grad-input tiles of a group of input channels of a convolution: they read the whole block (an input
channel's weights are a segment of every record), as priced, and use their channels' elements.  Refused with
a message: such a tile of a linear layer, or of a graph saved before it recorded its dense layers.
"""

from __future__ import annotations

from ..graph.tiling_ranges import input_rows, output_rows_touching
from ..schedule.core import Op
from .ir import KernelCall, LoweringError
from .wstore import WeightFiles, weight_files
from .zoo_refs import BN_EPS, zoo_call

__all__ = ["StreamedWeights", "streamed_weights"]

STREAMED_OPS = ("conv2d", "linear", "batchnorm")


class StreamedWeights:
    """The weight files of a streamed zoo program, and which gradient makers write first."""

    def __init__(self, files: WeightFiles, first: frozenset[int], makers: frozenset[int], dense=()):
        self.files = files
        self.dense = frozenset(dense)  # the graph's record of dense layers (priced: whole-block channel tiles)
        self.first = first  # the makers that write their gradient share (the first of it computed)
        self.makers = makers  # every node that writes or adds to a gradient share

    def _records(self, lw, layer: int, clo, chi) -> tuple[int, int]:
        """Byte offset and count of the records of channels [clo, chi) (all when None)."""
        b = self.files.block(lw.L[layer].name)
        a = 0 if clo is None else clo
        return b.offset + 4 * a * b.record_floats, (b.cout if chi is None else chi) - a

    def _geometry(self, lw, layer: int, clo, chi) -> list[int]:
        lay = lw.L[layer]
        b = self.files.block(lay.name)
        a = 0 if clo is None else clo
        n = b.cout if chi is None else chi - a
        cin = b.weight_shape[1]
        k = b.weight_shape[2] if len(b.weight_shape) == 4 else 1
        return [b.offset + 4 * a * b.record_floats, n, cin, k, int(b.bias is not None)]

    def forward(self, lw, v: int, r, y) -> list[KernelCall]:
        i, lay, name = r.layer, lw.L[r.layer], lw.zp.graph.nodes[v].name
        x = lay.inputs[0]
        if lay.op == "batchnorm":
            ch = (r.clo, r.chi)
            st = lw.stats_ref(lw.pred_role(v, "stats", i), i, *ch)
            h = lw.rows(i)
            a, z = (r.lo, r.hi) if st is not None else (0, h)
            sc = [*self._records(lw, i, *ch), r.lo, h, BN_EPS]
            return [zoo_call("zoo_ws_bn", name, [st], [[lw.pieces_of(v, x, a, z, *ch)]], [y], sc)]
        if lay.op == "conv2d":
            a, z = input_rows(lay, r.lo, r.hi, lw.rows(x))
            sc = [*self._geometry(lw, i, r.clo, r.chi), lay.stride, lay.pad, r.lo, lw.rows(x)]
            return [zoo_call("zoo_ws_conv", name, [], [[lw.pieces_of(v, x, a, z)]], [y], sc)]
        src = [[lw.pieces_of(v, x, 0, lw.rows(x))]]
        return [zoo_call("zoo_ws_linear", name, [], src, [y], [*self._geometry(lw, i, None, None), r.lo])]

    def grad_input(self, lw, v: int, r, dx, touched: bool) -> list[KernelCall]:
        i, lay, name = r.layer, lw.L[r.layer], lw.zp.graph.nodes[v].name
        if lay.op == "batchnorm":
            return [self._bn_grad(lw, v, r, dx)]
        geo = self._geometry(lw, i, None, None)
        if r.clo is not None and (lay.op != "conv2d" or lay.name not in self.dense):
            raise LoweringError(
                f"{lw.what(v)}: a grad-input tile of input channels [{r.clo}, {r.chi}) of {lay.name} with "
                f"streamed weights: "
                + (
                    "the schedule's graph does not record the layer as dense (a file written before the "
                    "whole-block rule); solve it again"
                    if lay.op == "conv2d"
                    else f"not compiled for a {lay.op} layer; tile the network by rows only, or use --weights flash"
                )
            )
        if not touched:  # it reads its weights as priced, and no output row reaches its rows
            b = self.files.block(lay.name)
            return [KernelCall("zoo_ws_read_zero", "zoo.zoo_ws_read_zero", name, (dx,), 0, (b.offset, b.nbytes // 4))]
        if lay.op == "conv2d":
            R = lw.rows(i)
            dlo, dhi = output_rows_touching(lay, r.lo, r.hi, R)
            c0, c1 = (0, geo[2]) if r.clo is None else (r.clo, r.chi)  # it reads the whole block either way
            sc = [*geo, lay.stride, lay.pad, r.lo, R, c0, c1]
            return [zoo_call("zoo_ws_conv_grad_input", name, [], [lw.grad_groups(v, i, dlo, dhi)], [dx], sc)]
        srcs = [lw.grad_groups(v, i, 0, lw.rows(i))]
        return [zoo_call("zoo_ws_linear_grad_input", name, [], srcs, [dx], [*geo, r.lo])]

    def _bn_grad(self, lw, v: int, r, dx) -> KernelCall:
        i, lay, name = r.layer, lw.L[r.layer], lw.zp.graph.nodes[v].name
        x, R, lo, hi, ch = lay.inputs[0], lw.rows(r.layer), r.lo, r.hi, (r.clo, r.chi)
        fst = lw.stats_ref(lw.pred_role(v, "stats", i), i, *ch)
        bst = lw.stats_ref(lw.pred_role(v, "grad_stats", i), i, *ch)
        a, z = (lo, hi) if fst is not None and bst is not None else (0, R)
        srcs = [lw.grad_groups(v, i, a, z, *ch), [lw.pieces_of(v, x, a, z, *ch)]]
        makes = v in self.makers
        if makes != (bst is None):
            raise LoweringError(f"{lw.what(v)}: its gradient sums and the priced gradient maker disagree")
        sc = [*self._records(lw, i, *ch), int(makes), int(v in self.first), lo, hi, R, BN_EPS]
        return zoo_call("zoo_ws_bn_grad", name, [fst, bst], srcs, [dx], sc)

    def grad_stats(self, lw, v: int, r, ins, srcs, out, scalars) -> KernelCall:
        off, n = self._records(lw, r.layer, None, None)
        sc = [off, n, int(v in self.first), *scalars]
        return zoo_call("zoo_ws_bn_grad_stats", lw.zp.graph.nodes[v].name, ins, srcs, [out, None, None], sc)

    def weight_grad(self, lw, v: int, r, lo: int, hi: int) -> list[KernelCall]:
        i, lay, name = r.layer, lw.L[r.layer], lw.zp.graph.nodes[v].name
        x, ch = lay.inputs[0], (r.clo, r.chi)
        geo = self._geometry(lw, i, *ch)
        first = int(v in self.first)
        if lay.op == "conv2d":
            a, z = input_rows(lay, lo, hi, lw.rows(x))
            srcs = [[lw.pieces_of(v, x, a, z)], lw.grad_groups(v, i, lo, hi, *ch)]
            sc = [*geo, first, lay.stride, lay.pad, lo, hi, lw.rows(x)]
            return [zoo_call("zoo_ws_conv_weight_grad", name, [], srcs, [], sc)]
        srcs = [[lw.pieces_of(v, x, 0, lw.rows(x))], lw.grad_groups(v, i, lo, hi)]
        return [zoo_call("zoo_ws_linear_weight_grad", name, [], srcs, [], [*geo, first, lo, hi])]


def streamed_weights(zp, schedule) -> StreamedWeights | None:
    """The streamed weights of ``zp`` under ``schedule`` (None when its graph does not stream them)."""
    store = getattr(schedule.graph, "weights", None) if schedule is not None else None
    if store is None or store.placement != "stream":
        return None
    names = [lay.name for lay in zp.layers.layers]
    odd = sorted({lay.name for lay in zp.layers.layers if lay.params and lay.op not in STREAMED_OPS})
    if odd:
        raise LoweringError(
            f"layers {', '.join(odd)} have parameters the C kernels do not stream yet (only "
            f"{', '.join(STREAMED_OPS)} layers do): compile this model with --weights flash or ram"
        )
    files = weight_files(zp.params, names, store.staging_bytes, dict(store.layers))
    dense = {lay.name for lay in zp.layers.layers if lay.params and lay.op in ("conv2d", "linear")}
    if store.dense and set(store.dense) != dense:  # empty: a file written before the list (see grad_input)
        raise LoweringError(
            f"the schedule's graph records dense layers {sorted(store.dense)[:4]}..., the model's convolution and "
            f"linear layers are {sorted(dense)[:4]}...: the graph was not priced from this model; solve it again"
        )
    if store.staging_bytes % 8 and any(lay.op == "batchnorm" and lay.params for lay in zp.layers.layers):
        raise LoweringError(
            f"the staging buffer is {store.staging_bytes} B; BatchNorm's streamed records [gamma, beta] need "
            f"whole records per chunk: solve again with --staging a multiple of 8 B"
        )
    # who makes each gradient share (poet.graph.weight_traffic's rule): a layer's weight-gradient nodes,
    # else its backward statistics chain, else its backward nodes; the first computed writes it
    ops = [lay.op for lay in zp.layers.layers]
    kinds: dict[int, set] = {}
    for r in zp.roles:
        if r is not None and r.kind in ("weight_grad", "grad_stats", "grad_input", "backward"):
            kinds.setdefault(r.layer, set()).add(r.kind)

    def maker(r) -> bool:
        if r is None or r.layer not in kinds or ops[r.layer] not in STREAMED_OPS:
            return False
        have = kinds[r.layer]
        want = "weight_grad" if "weight_grad" in have else "grad_stats" if "grad_stats" in have else None
        return r.kind == want if want else r.kind in ("grad_input", "backward")

    makers: dict[tuple, int] = {}
    every: set[int] = set()
    for s in schedule.steps:
        r = zp.roles[s.node]
        if s.op == Op.COMPUTE and maker(r):
            makers.setdefault((r.layer, r.clo, r.chi), s.node)
            every.add(s.node)
    return StreamedWeights(files, frozenset(makers.values()), frozenset(every), store.dense)
