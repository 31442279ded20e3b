"""A traced training step (aten granularity, tiled or not) lowered to a :class:`~poet.cbackend.ir.KernelProgram`.

Per poet node: the kernel call of its aten unit (``vocabulary.spec_for``), every tensor argument
resolved from the recorded geometry (:mod:`poet.cbackend.geometry`) to the space that holds it and
the view inside it.  A node's block holds the storages of its unit's outputs, laid out one after
the other (8-byte dtypes first, so no padding is needed), and has exactly the node's ``ram_bytes``.
Tiled programs lower the same way: their units call Python tile kernels, whose specs name C kernels.

Everything that can be refused is refused here, before anything is built: a layer-granularity
program, an op with no C kernel (every such node and op named at once), a dtype the kernels do not
take, a schedule made for another program.
"""

from __future__ import annotations

import torch

from ..schedule.core import Schedule
from .geometry import Geometry, StepGeometry, capture_geometry, dtype_name
from .ir import (
    DTYPE_BYTES,
    DataItem,
    KernelCall,
    KernelProgram,
    LoweringError,
    NodeCode,
    OutputCopy,
    TensorRef,
    contiguous_strides,
)
from .opspec import UnsupportedOp, target_key
from .vocabulary import spec_for

__all__ = ["check_schedule_matches", "lower_program", "unsupported_ops"]


def unsupported_ops(program) -> list[str]:
    """``node (op)`` for every unit of ``program`` the C backend has no kernel for (specs read the
    nodes' ``meta['val']``: run :func:`capture_geometry` first on a rewritten graph that lacks it)."""
    out = []
    for u in program.units:
        n = program.unit_node[u.id]
        try:
            spec_for(n)
        except UnsupportedOp:
            out.append(f"{n.name} ({target_key(n.target)})")
        except Exception as e:  # a spec that cannot read this node: a bug to report, named
            raise LoweringError(
                f"the op spec of {target_key(n.target)} failed on node {n.name}: {type(e).__name__}: {e}"
            ) from e
    return out


def check_schedule_matches(program, schedule: Schedule) -> None:
    """:class:`LoweringError` unless ``schedule`` was made for ``program``'s graph (same nodes, bytes, edges)."""
    g, pg = schedule.graph, program.graph
    if len(g) != len(pg):
        raise LoweringError(
            f"the schedule has {len(g)} nodes but the traced program has {len(pg)}: it was made for another "
            f"model, batch or tiling (trace the model as it was planned: same --model, --batch-size, --tile)"
        )
    for v, (a, b) in enumerate(zip(g.nodes, pg.nodes)):
        if a.name != b.name or a.ram_bytes != b.output_bytes:
            raise LoweringError(
                f"node {v} of the schedule is {a.name} ({a.ram_bytes} B) but the program's is {b.name} "
                f"({b.output_bytes} B): the schedule was made for another program"
            )
    if tuple(sorted(g.edges)) != tuple(sorted(pg.edges)):
        raise LoweringError(
            "the schedule's graph has other edges than the traced program's: it was made for another program"
        )


def _check_supported(program) -> None:
    if program.granularity != "aten":
        raise LoweringError(
            f"the C backend compiles aten-granularity programs (one aten op per node); this one is "
            f"{program.granularity!r}: plan with granularity='aten' (--granularity aten, the default)"
        )
    missing = unsupported_ops(program)
    if missing:
        shown = ", ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
        raise UnsupportedOp(
            f"the C backend has no kernel for {len(missing)} node(s) of {program.name}: {shown} "
            f"(the supported ops are listed in poet/cbackend/ops_*.py)"
        )


class _Lowering:
    """Resolves FX values to :class:`TensorRef` s from the recorded geometry."""

    def __init__(self, program, geo: StepGeometry):
        self.p = program
        self.geo = geo
        # storage key -> (space, index, byte offset of the storage in that item)
        self.place: dict[int, tuple[str, int, int]] = {}
        self.blocks: list[int] = []
        self.align: dict[int, int] = {}  # storage key -> largest element size viewing it
        for vals in geo.values.values():
            for g in _geoms(vals):
                self.align[g.storage] = max(self.align.get(g.storage, 1), DTYPE_BYTES[g.dtype])
        for key, (kind, i) in geo.owners.items():
            if kind != "unit":
                self.place[key] = (kind, i, 0)
        for v, grp in enumerate(program.groups):
            self.blocks.append(self._layout_block(v, grp[0]))

    def _layout_block(self, v: int, u: int) -> int:
        keys = [k for k, o in self.geo.owners.items() if o == ("unit", u)]
        off = 0
        for k in sorted(keys, key=lambda k: -self.align.get(k, 1)):  # 8-byte storages first: no padding between them
            self.place[k] = ("node", v, off)
            off += self.geo.storage_bytes[k]
        want = self.p.graph.nodes[v].output_bytes
        if off != want:
            raise LoweringError(
                f"node {v} ({self.p.graph.nodes[v].name}): its outputs' storages take {off} B in this run "
                f"but the graph counts {want} B; the op's output size varies from run to run"
            )
        return off

    def ref(self, fx_node, what: str) -> TensorRef:
        g = self.geo.values.get(fx_node.name)
        if not isinstance(g, Geometry):
            raise LoweringError(f"{what}: {fx_node.name} is not one tensor value (got {type(g).__name__})")
        return self.ref_of(g, what)

    def ref_of(self, g: Geometry, what: str) -> TensorRef:
        pl = self.place.get(g.storage)
        if pl is None:
            raise LoweringError(f"{what}: the value lives in a storage no input or op of the step owns")
        space, index, base = pl
        return TensorRef(space, index, base + g.offset, g.dtype, g.sizes, g.strides)


def _geoms(vals):
    if isinstance(vals, Geometry):
        return [vals]
    if isinstance(vals, tuple):
        return [g for g in vals if g is not None]
    return []


def _broadcast(r: TensorRef, shape: tuple[int, ...], what: str) -> TensorRef:
    """``r`` viewed with ``shape`` (missing leading dimensions added, size-1 dimensions stride 0)."""
    pad = len(shape) - len(r.sizes)
    if pad < 0:
        raise LoweringError(f"{what}: an input of {len(r.sizes)} dimensions cannot broadcast to {shape}")
    sizes = (1,) * pad + r.sizes
    strides = (0,) * pad + r.strides
    ns, nt = [], []
    for s, st, want in zip(sizes, strides, shape):
        if s == want:
            ns.append(s)
            nt.append(st if s != 1 else 0)
        elif s == 1:
            ns.append(want)
            nt.append(0)
        else:
            raise LoweringError(f"{what}: an input of shape {r.sizes} does not broadcast to {shape}")
    return TensorRef(r.space, r.index, r.offset, r.dtype, tuple(ns), tuple(nt))


def _scalar(x, what: str):
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, float)):
        return x
    raise LoweringError(f"{what}: scalar {x!r} is not an int or float")


def _node_calls(lw: _Lowering, v: int) -> tuple[KernelCall, ...]:
    p = lw.p
    calls = []
    for u in p.groups[v]:
        n = p.unit_node[u]
        spec = spec_for(n)
        what = f"node {v} ({n.name}, {target_key(n.target)})"
        outs = lw.geo.values.get(n.name)
        out_refs = [None if g is None else lw.ref_of(g, what) for g in (outs if isinstance(outs, tuple) else (outs,))]
        ins = []
        for a in spec.inputs:
            if a is None:
                ins.append(None)
            elif isinstance(a, torch.fx.Node):
                ins.append(lw.ref(a, what))
            else:
                raise LoweringError(f"{what}: the spec of {spec.kernel} passes {a!r} as a tensor")
        if spec.broadcast:
            if not out_refs or out_refs[0] is None:
                raise LoweringError(f"{what}: a broadcast spec needs a tensor output")
            shape = out_refs[0].sizes
            ins = [None if r is None else _broadcast(r, shape, what) for r in ins]
        for r in ins:  # an input from the arena must come from a node this one reads (or itself)
            if r is not None and r.space == "node" and r.index != v and r.index not in p.graph.preds[v]:
                raise LoweringError(f"{what}: reads node {r.index}, which the graph gives it no edge from")
        calls.append(
            KernelCall(
                kernel=spec.kernel,
                op=target_key(n.target),
                fx_name=n.name,
                tensors=tuple(ins) + tuple(out_refs),
                n_inputs=len(ins),
                scalars=tuple(_scalar(x, what) for x in spec.scalars),
            )
        )
    return tuple(calls)


def _item(name: str, t: torch.Tensor, trainable: bool = True, with_data: bool = True) -> DataItem:
    t = t.detach().contiguous()
    data = t.numpy().tobytes() if with_data else None
    return DataItem(name, dtype_name(t.dtype, name), tuple(int(s) for s in t.shape), data, trainable)


def lower_program(program, schedule: Schedule | None = None) -> KernelProgram:
    """The kernel program of ``program`` (checked against ``schedule``'s graph when given)."""
    if program.granularity == "aten" and schedule is not None:
        check_schedule_matches(program, schedule)
    if program.granularity != "aten":
        _check_supported(program)  # refuses it, saying why
    p = program
    param_names = list(p.params)
    buffer_names = list(p.buffers)
    geo = capture_geometry(p, {k: i for i, k in enumerate(param_names)}, {k: i for i, k in enumerate(buffer_names)})
    _check_supported(p)
    lw = _Lowering(p, geo)
    nodes = tuple(
        NodeCode(node=v, name=p.graph.nodes[v].name, nbytes=lw.blocks[v], calls=_node_calls(lw, v))
        for v in range(len(p.groups))
    )
    outputs = []
    loss_dtype = "float32"
    for b in p.bindings:
        src = lw.ref(b.fx_node, f"graph output {b.role} {b.name}")
        roots = tuple(sorted({p.owner[u] for u in b.units}))
        if b.role == "loss":
            if src.sizes not in ((), (1,)):
                raise LoweringError(f"the loss has shape {src.sizes}; the C step takes a scalar loss")
            loss_dtype = src.dtype
            dst = TensorRef("loss", 0, 0, src.dtype, src.sizes, src.strides)
        elif b.role == "grad":
            dst = TensorRef("grad", param_names.index(b.name), 0, src.dtype, src.sizes, contiguous_strides(src.sizes))
        else:
            dst = TensorRef(
                "staging", buffer_names.index(b.name), 0, src.dtype, src.sizes, contiguous_strides(src.sizes)
            )
        outputs.append(OutputCopy(b.role, b.name, src, dst, roots))
    batch = []
    for i, x in enumerate(p.example_batch):
        if not isinstance(x, torch.Tensor):
            raise LoweringError(f"batch item {i} is a {type(x).__name__}; the C step reads tensors only")
        batch.append(_item(f"batch{i}", x, with_data=False))
    return KernelProgram(
        name=p.name,
        nodes=nodes,
        params=tuple(_item(k, t, trainable=bool(t.requires_grad)) for k, t in p.params.items()),
        buffers=tuple(_item(k, t) for k, t in p.buffers.items()),
        batch=tuple(batch),
        consts=tuple(_item(nm, t) for nm, t in zip(geo.const_names, geo.const_values)),
        outputs=tuple(outputs),
        loss_dtype=loss_dtype,
    )
