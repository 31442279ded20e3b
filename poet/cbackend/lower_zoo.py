"""A zoo network's layer graph (:mod:`poet.graph.zoo`, tiled or not) lowered to a :class:`KernelProgram`.

The schedule's graph names its model, batch size and tile counts in its ``meta``; the graph is built
again from them with the builder of :func:`poet.graph.tiling.build_tiled`, checked equal to the
schedule's (names, bytes, edges), and every node's :class:`~poet.graph.tiling.NodeRole` (recorded by
the builder, never parsed from names) says what it computes: a layer's output rows, a statistics or
partial-sum step, the loss, the gradient rows of some layer outputs, a weight gradient's share.

Every tensor is seen as (B, C, rows, W) (a flat vector as (B, 1, F, 1)); a node's block holds its
rows (and channel group) for the whole batch, contiguous, so its bytes are the graph's ``ram_bytes``
for it.  A kernel reads a layer output through a *row source* (runtime/pk_zoo.h): the pieces of it
the node reads, each with its first row and channel; a gradient source has one group per layer
reading the output, summed (:mod:`poet.cbackend.zoo_refs`).  A tile of a channel group gets the
group's slices of its parameters, statistics and gradients.
Parameters are ``<layer>.weight`` / ``<layer>.bias`` (const data), their gradients are written by the
kernels into the gradient space: whole-layer backward nodes and BatchNorm's last backward statistics
step overwrite theirs; weight-gradient tiles add their share to a space zeroed at the start of the
step, so they are marked ``accumulates`` (a schedule computing one twice is refused when compiled).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..graph.tiling import NodeRole, build_tiled
from ..graph.tiling_ranges import input_rows, output_rows_touching
from ..graph.zoo import DATA, MODELS, ModelLayers, model_layers
from .ir import DataItem, KernelCall, KernelProgram, LoweringError, NodeCode, TensorRef
from .lower_zoo_ws import STREAMED_OPS, streamed_weights
from .zoo_refs import BN_EPS, ZooRefs, ref, zoo_call

__all__ = ["BN_EPS", "ZooProgram", "is_zoo_graph", "lower_zoo", "zoo_program"]

SUPPORTED_OPS = ("conv2d", "batchnorm", "relu", "add", "maxpool", "avgpool", "flatten", "linear", "dropout")


def is_zoo_graph(graph) -> bool:
    """Whether ``graph``'s meta names a zoo model (so :func:`zoo_program` can build it again)."""
    return isinstance(getattr(graph, "meta", None), dict) and graph.meta.get("model") in MODELS


@dataclass(frozen=True)
class ZooProgram:
    """A zoo network at one batch size and tiling, with weights: what a zoo schedule is compiled from."""

    name: str
    batch_size: int
    tiles: dict
    layers: ModelLayers
    graph: object  # the rebuilt graph (node order of the schedule's)
    roles: tuple[NodeRole, ...]
    params: dict  # '<layer>.weight' -> float32 numpy array, in layer order
    seed: int

    @property
    def example_batch(self) -> tuple:
        """A generated batch (input, labels) drawn from ``seed``: no data set is needed."""
        rng = np.random.default_rng(self.seed + 1)
        x = rng.standard_normal((self.batch_size, *self.layers.input_shape), dtype=np.float32)
        k = self.layers.layers[-1].shape[0]
        y = rng.integers(0, k, size=self.batch_size, dtype=np.int64)
        return (x, y)


def _check_same(g, rebuilt, what: str) -> None:
    if len(g.nodes) != len(rebuilt.nodes):
        raise LoweringError(
            f"{what}: the schedule's graph has {len(g.nodes)} nodes, but {rebuilt.name} built from its meta "
            f"(batch {rebuilt.meta.get('batch_size')}, tiles {rebuilt.meta.get('tiles', {})}) has "
            f"{len(rebuilt.nodes)}: the schedule was made by another version of the zoo or edited"
        )
    for v, (a, b) in enumerate(zip(g.nodes, rebuilt.nodes)):
        nb = getattr(a, "ram_bytes", getattr(a, "output_bytes", None))
        if a.name != b.name or nb != b.output_bytes:
            raise LoweringError(
                f"{what}: node {v} of the schedule is {a.name} ({nb} B), the rebuilt graph's is {b.name} "
                f"({b.output_bytes} B): the schedule does not match its model"
            )
    if sorted(g.edges) != sorted(rebuilt.edges):
        raise LoweringError(f"{what}: the schedule's graph has other edges than {rebuilt.name} built from its meta")


def zoo_program(graph, *, seed: int = 0, layers: ModelLayers | None = None) -> ZooProgram:
    """The zoo program a schedule's ``graph`` was made for, its weights drawn from ``seed`` as
    :func:`poet.graph.zoo_torch.zoo_module` draws them (LoweringError if it is no zoo graph).

    layers: the model's layer list when it is not a built-in one (a network written with
    :class:`poet.graph.zoo_layers.NetBuilder`); its name must be the graph's meta ``model``."""
    from ..graph.zoo_torch import zoo_module

    meta = getattr(graph, "meta", {}) or {}
    name = meta.get("model")
    if layers is not None and layers.name != name:
        raise LoweringError(f"the schedule's graph is of model {name!r}, the layers given are {layers.name!r}")
    if layers is None and name not in MODELS:
        raise LoweringError(
            f"the schedule's graph names no zoo model (meta model={name!r}); zoo models: {', '.join(MODELS)}"
        )
    b = meta.get("batch_size")
    if not isinstance(b, int) or b < 1:
        raise LoweringError(f"the schedule's graph meta has no valid batch_size ({b!r})")
    tiles = dict(meta.get("tiles") or {})
    ml = layers if layers is not None else model_layers(name)
    tb = build_tiled(ml, tiles, b)
    _check_same(graph, tb.graph, f"{name} at batch {b}")
    module = zoo_module(ml, seed=seed)
    params = {}
    for lay in ml.layers:
        if lay.params:
            mod = module.layer_module(lay.name)
            for pn, p in mod.named_parameters():
                params[f"{lay.name}.{pn}"] = p.detach().numpy().astype(np.float32, copy=True)
    return ZooProgram(name, b, tiles, ml, tb.graph, tuple(tb.roles), params, seed)


# ---------------------------------------------------------------- per role


def _forward(lw: ZooRefs, v: int, r: NodeRole) -> list[KernelCall]:
    """Rows [lo, hi) (channels [clo, chi)) of layer ``r.layer``'s output."""
    lay, i, name = lw.L[r.layer], r.layer, lw.zp.graph.nodes[v].name
    op, x = lay.op, lay.inputs[0]
    ch = (r.clo, r.chi)
    y = lw.block(v, i, r.lo, r.hi, *ch)
    if lw.ws is not None and op in STREAMED_OPS:
        return lw.ws.forward(lw, v, r, y)
    if op == "conv2d":  # a group of output channels reads every input channel
        a, z = input_rows(lay, r.lo, r.hi, lw.rows(x))
        ins = [lw.param(i, "weight", "param", *ch), lw.param(i, "bias", "param", *ch)]
        sc = [lay.stride, lay.pad, r.lo, lw.rows(x)]
        return [zoo_call("zoo_conv", name, ins, [[lw.pieces_of(v, x, a, z)]], [y], sc)]
    if op == "batchnorm":
        st = lw.stats_ref(lw.pred_role(v, "stats", i), i, *ch)
        ins = [lw.param(i, "weight", "param", *ch), lw.param(i, "bias", "param", *ch), st]
        h = lw.rows(i)
        a, z = (r.lo, r.hi) if st is not None else (0, h)
        return [zoo_call("zoo_bn", name, ins, [[lw.pieces_of(v, x, a, z, *ch)]], [y], [r.lo, h, BN_EPS])]
    if op in ("relu", "dropout", "add"):
        groups = [lw.pieces_of(v, xx, r.lo, r.hi, *ch) for xx in lay.inputs]
        return [zoo_call("zoo_relu" if op == "relu" else "zoo_sum", name, [], [groups], [y], [r.lo])]
    if op == "maxpool":
        a, z = input_rows(lay, r.lo, r.hi, lw.rows(x))
        sc = [lay.kernel, lay.stride, lay.pad, r.lo, lw.rows(x)]
        return [zoo_call("zoo_maxpool", name, [], [[lw.pieces_of(v, x, a, z, *ch)]], [y], sc)]
    if op == "avgpool":
        a, z = input_rows(lay, r.lo, r.hi, lw.rows(x))
        return [zoo_call("zoo_avgpool", name, [], [[lw.pieces_of(v, x, a, z, *ch)]], [y], [lay.kernel, r.lo])]
    if op == "flatten":
        src = [[lw.pieces_of(v, x, 0, lw.rows(x))]]
        return [zoo_call("zoo_flatten", name, [], src, [y], [r.lo, lw.rows(x)])]
    if op == "linear":
        src = [[lw.pieces_of(v, x, 0, lw.rows(x))]]
        return [zoo_call("zoo_linear", name, [lw.param(i, "weight"), lw.param(i, "bias")], src, [y], [r.lo])]
    raise LoweringError(f"{lw.what(v)}: layer op {op!r} has no C kernel")


def _grad_input(lw: ZooRefs, v: int, r: NodeRole, x: int, dx: TensorRef) -> list[KernelCall]:
    """Rows [lo, hi) (channels [clo, chi)) of the gradient of layer ``r.layer``'s input ``x`` (add: of its
    output)."""
    i, lay, name = r.layer, lw.L[r.layer], lw.zp.graph.nodes[v].name
    op, R, lo, hi, ch = lay.op, lw.rows(i), r.lo, r.hi, (r.clo, r.chi)
    if lw.ws is not None and op in STREAMED_OPS:
        return lw.ws.grad_input(lw, v, r, dx, op != "conv2d" or _touched(lay, lo, hi, R))
    if op in ("conv2d", "maxpool") and not _touched(lay, lo, hi, R):
        return [KernelCall("zoo_zero", "zoo.zoo_zero", name, (dx,), 0, ())]  # a strided window skips these rows
    if op == "conv2d":  # a group of input channels reads the gradient of every output channel
        dlo, dhi = output_rows_touching(lay, lo, hi, R)
        w = lw.param(i, "weight", "param", *ch, axis=1)
        return [
            zoo_call(
                "zoo_conv_grad_input", name, [w], [lw.grad_groups(v, i, dlo, dhi)], [dx], [lay.stride, lay.pad, lo, R]
            )
        ]
    if op == "batchnorm":
        fst = lw.stats_ref(lw.pred_role(v, "stats", i), i, *ch)
        bst = lw.stats_ref(lw.pred_role(v, "grad_stats", i), i, *ch)
        a, z = (lo, hi) if fst is not None and bst is not None else (0, R)
        srcs = [lw.grad_groups(v, i, a, z, *ch), [lw.pieces_of(v, x, a, z, *ch)]]
        whole = bst is None  # no backward statistics chain: this tile computes its channels' sums itself
        gs = [lw.param(i, "weight", "grad", *ch), lw.param(i, "bias", "grad", *ch)] if whole else [None, None]
        ins = [lw.param(i, "weight", "param", *ch), fst, bst]
        return [zoo_call("zoo_bn_grad", name, ins, srcs, [dx, *gs], [lo, R, BN_EPS])]
    if op == "relu":
        srcs = [[lw.pieces_of(v, i, lo, hi, *ch)], lw.grad_groups(v, i, lo, hi, *ch)]
        return [zoo_call("zoo_relu_grad", name, [], srcs, [dx], [lo])]
    if op in ("add", "dropout"):
        return [zoo_call("zoo_sum", name, [], [lw.grad_groups(v, i, lo, hi, *ch)], [dx], [lo])]
    if op == "flatten":
        sc = [lo, lw.rows(x), r.clo or 0]
        return [zoo_call("zoo_unflatten", name, [], [lw.grad_groups(v, i, 0, R)], [dx], sc)]
    if op == "maxpool":
        dlo, dhi = output_rows_touching(lay, lo, hi, R)
        a, z = input_rows(lay, dlo, dhi, lw.rows(x))
        srcs = [[lw.pieces_of(v, x, a, z, *ch)], lw.grad_groups(v, i, dlo, dhi, *ch)]
        sc = [lay.kernel, lay.stride, lay.pad, lo, lw.rows(x), R]
        return [zoo_call("zoo_maxpool_grad", name, [], srcs, [dx], sc)]
    if op == "avgpool":
        dlo, dhi = output_rows_touching(lay, lo, hi, R) if R > 1 else (0, 1)
        srcs = [lw.grad_groups(v, i, dlo, dhi, *ch)]
        return [zoo_call("zoo_avgpool_grad", name, [], srcs, [dx], [lay.kernel, lo, R])]
    if op == "linear":
        srcs = [lw.grad_groups(v, i, 0, R)]
        return [zoo_call("zoo_linear_grad_input", name, [lw.param(i, "weight")], srcs, [dx], [lo])]
    raise LoweringError(f"{lw.what(v)}: layer op {op!r} has no C backward kernel")


def _touched(lay, lo: int, hi: int, out_rows: int) -> bool:
    a, z = output_rows_touching(lay, lo, hi, out_rows)
    return a < z and any(lo <= oh * lay.stride - lay.pad + k < hi for oh in range(a, z) for k in range(lay.kernel))


def _weight_grad(lw: ZooRefs, v: int, r: NodeRole, accumulate: bool) -> list[KernelCall]:
    """Layer ``r.layer``'s weight gradient, or the share of output rows [lo, hi) (channels [clo, chi))."""
    layer, lo, hi, ch = r.layer, r.lo, r.hi, (r.clo, r.chi)
    lay, name = lw.L[layer], lw.zp.graph.nodes[v].name
    x = lay.inputs[0]
    if lw.ws is not None and lay.op in ("conv2d", "linear"):
        return lw.ws.weight_grad(lw, v, r, lo, hi)
    dw, db = lw.param(layer, "weight", "grad", *ch), lw.param(layer, "bias", "grad", *ch)
    if lay.op == "conv2d":
        a, z = input_rows(lay, lo, hi, lw.rows(x))
        srcs = [[lw.pieces_of(v, x, a, z)], lw.grad_groups(v, layer, lo, hi, *ch)]
        sc = [lay.stride, lay.pad, lo, hi, lw.rows(x), int(accumulate)]
        return [zoo_call("zoo_conv_weight_grad", name, [], srcs, [dw, db], sc)]
    if lay.op == "linear":
        srcs = [[lw.pieces_of(v, x, 0, lw.rows(x))], lw.grad_groups(v, layer, lo, hi)]
        return [zoo_call("zoo_linear_weight_grad", name, [], srcs, [dw, db], [lo, hi, int(accumulate)])]
    return []


def _node_calls(lw: ZooRefs, v: int) -> tuple[list[KernelCall], TensorRef | None, bool]:
    """The calls of node ``v``, the tensor its block holds (None: nothing) and whether it accumulates."""
    r = lw.zp.roles[v]
    name = lw.zp.graph.nodes[v].name
    if r is None or r.kind == "other":
        raise LoweringError(f"{lw.what(v)}: the C backend does not compile this kind of node yet (attention, fused)")
    lay = lw.L[r.layer]
    if lay.op not in SUPPORTED_OPS:
        raise LoweringError(
            f"{lw.what(v)}: layer {lay.name} is a {lay.op}; the C backend compiles zoo layers of kinds "
            f"{', '.join(SUPPORTED_OPS)}"
        )
    if len(set(lay.inputs)) != len(lay.inputs):
        raise LoweringError(f"{lw.what(v)}: layer {lay.name} reads one tensor twice; not compiled")
    i = r.layer
    if r.kind == "output":
        out = lw.block(v, i, r.lo, r.hi, r.clo, r.chi)
        return _forward(lw, v, r), out, False
    if r.kind == "stats":
        out = ref("node", v, (lay.shape[0], 2))
        prev = lw.stats_ref(lw.pred_role(v, "stats", i, r.index - 1), i) if r.index else None
        src = [[lw.pieces_of(v, lay.inputs[0], r.lo, r.hi)]]
        return [zoo_call("zoo_bn_stats", name, [prev], src, [out], [r.lo, r.hi])], out, False
    if r.kind == "partial":
        if lay.op != "avgpool" or lay.kernel != lw.shape(lay.inputs[0])[2]:
            raise LoweringError(f"{lw.what(v)}: a running partial of a {lay.op} is not compiled (global avgpool only)")
        out = ref("node", v, (lw.b, lay.shape[0], 1, 1))
        prev = None
        if r.index:
            u = lw.pred_role(v, "partial", i, r.index - 1)
            prev = None if u is None else ref("node", u, (lw.b, lay.shape[0], 1, 1))
        src = [[lw.pieces_of(v, lay.inputs[0], r.lo, r.hi, r.clo, r.chi)]]
        sc = [lay.kernel, r.lo, r.hi, r.clo or 0]
        return [zoo_call("zoo_avgpool_partial", name, [prev], src, [out], sc)], out, False
    if r.kind == "loss":
        k = lay.shape[0]
        if len(lay.shape) != 1:
            raise LoweringError(f"{lw.what(v)}: the loss over logits of shape {lay.shape} is not compiled")
        out = ref("node", v, (lw.b,))
        ins = [ref("batch", 1, (lw.b,), "int64")]
        src = [[lw.pieces_of(v, i, 0, k)]]
        call = zoo_call("zoo_cross_entropy", name, [], src, [], [k])
        call = KernelCall(
            call.kernel,
            call.op,
            name,
            call.tensors + (ins[0], out, ref("loss", 0, (1,))),
            call.n_inputs + 1,
            call.scalars,
        )
        return [call], out, False
    if r.kind == "loss_partial":
        raise LoweringError(
            f"{lw.what(v)}: a cross-entropy over logits split into tiles is not compiled (its running chain would "
            f"need the log-sum-exp and the label's logit per sample, 2 floats, in a node of 1): plan with the last "
            f"layer ({lay.name}) whole"
        )
    if r.kind == "loss_grad":
        k = lay.shape[0]
        out = lw.block(v, i, r.lo, r.hi)
        src = [[lw.pieces_of(v, i, 0, k)]]
        call = zoo_call("zoo_cross_entropy_grad", name, [], src, [], [r.lo, k])
        labels = ref("batch", 1, (lw.b,), "int64")
        call = KernelCall(call.kernel, call.op, name, call.tensors + (labels, out), call.n_inputs + 1, call.scalars)
        return [call], out, False
    if r.kind == "grad_input":
        x = i if r.wrt is None else r.wrt
        out = lw.block(v, x, r.lo, r.hi, r.clo, r.chi)
        return _grad_input(lw, v, r, x, out), out, False
    if r.kind == "backward":
        xs = [x for x in lay.inputs if x != DATA]
        calls, out = [], None
        if xs:
            x = xs[0] if len(xs) == 1 else i
            out = lw.block(v, x, 0, lw.rows(x))
            calls += _grad_input(lw, v, dataclasses.replace(r, lo=0, hi=lw.rows(x)), x, out)
        elif lay.op == "batchnorm":
            raise LoweringError(f"{lw.what(v)}: a BatchNorm reading the model input is not compiled")
        calls += _weight_grad(lw, v, dataclasses.replace(r, lo=0, hi=lw.rows(i)), accumulate=False)
        return calls, out, False
    if r.kind == "grad_stats":
        out = ref("node", v, (lay.shape[0], 2))
        prev = lw.stats_ref(lw.pred_role(v, "grad_stats", i, r.index - 1), i) if r.index else None
        fst = lw.stats_ref(lw.pred_role(v, "stats", i), i)
        last = r.index == r.count - 1
        gs = [lw.param(i, "weight", "grad"), lw.param(i, "bias", "grad")] if last else [None, None]
        srcs = [lw.grad_groups(v, i, r.lo, r.hi), [lw.pieces_of(v, lay.inputs[0], r.lo, r.hi)]]
        sc = [r.lo, r.hi, lw.rows(i), BN_EPS]
        if lw.ws is not None:  # the chain step, then its share of the gradient added in storage
            return [lw.ws.grad_stats(lw, v, r, [prev, fst], srcs, out, sc)], out, True
        return [zoo_call("zoo_bn_grad_stats", name, [prev, fst], srcs, [out, *gs], sc)], out, False
    if r.kind == "weight_grad":
        acc = r.count > 1
        return _weight_grad(lw, v, r, accumulate=acc), None, acc
    raise LoweringError(f"{lw.what(v)}: unknown node kind {r.kind!r}")


def lower_zoo(zp: ZooProgram, schedule=None) -> KernelProgram:
    """The kernel program of ``zp`` (its graph checked against ``schedule``'s when given)."""
    if schedule is not None:
        _check_same(schedule.graph, zp.graph, f"{zp.name} at batch {zp.batch_size}")
    lw = ZooRefs(zp)
    lw.ws = streamed_weights(zp, schedule)
    nodes, problems = [], []
    for v, nd in enumerate(zp.graph.nodes):
        try:
            calls, out, acc = _node_calls(lw, v)
        except LoweringError as e:
            problems.append(str(e))
            continue
        acc = acc or (lw.ws is not None and v in lw.ws.makers)  # it adds its share to the gradient in storage
        nbytes = 0 if out is None else out.extent_bytes()
        if nbytes != nd.output_bytes:
            problems.append(f"{lw.what(v)}: its tensor takes {nbytes} B but the graph counts {nd.output_bytes} B")
        nodes.append(NodeCode(node=v, name=nd.name, nbytes=nd.output_bytes, calls=tuple(calls), accumulates=acc))
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise LoweringError(f"the C backend cannot compile {len(problems)} node(s) of {zp.name}: {shown}")
    params = tuple(DataItem(k, "float32", tuple(a.shape), a.tobytes()) for k, a in zp.params.items())
    if lw.ws is not None:  # in the weight and gradient files, not in the image
        params = ()
    x, _ = zp.example_batch
    batch = (
        DataItem("input", "float32", tuple(x.shape)),
        DataItem("labels", "int64", (zp.batch_size,)),
    )
    return KernelProgram(
        name=zp.name,
        nodes=tuple(nodes),
        params=params,
        buffers=(),
        batch=batch,
        consts=(),
        outputs=(),
        loss_dtype="float32",
        notes=(
            "zoo graph: BatchNorm running statistics are not updated (they do not enter the step's gradients)",
            "zoo graph: dropout is compiled as the identity (the reference zoo_module uses p = 0)",
        ),
        direct_grads=() if lw.ws is not None else tuple(zp.params),
        zero_grads=lw.ws is None and any(nd.accumulates for nd in nodes),
        stream=None if lw.ws is None else lw.ws.files,
    )
