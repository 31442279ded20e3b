"""The executable description of a traced training step: aten units, their poet grouping, bindings.

A :class:`TorchProgram` is what extraction (:mod:`poet.graph.torch_export`)
returns and the executor runs: the joint FX graph, its non-alias aten calls
(:class:`Unit`), how units group into poet nodes (one each, or one per module
after :func:`coarsen`), and the graph outputs to collect (:class:`Binding`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .core import BACKWARD, FORWARD, Graph, Node


@dataclass
class Unit:
    """One non-alias aten call of the joint graph (the finest poet node)."""

    id: int
    fx_name: str
    op: str
    kind: str
    bytes: int
    flops: float
    seeded: bool
    preds: tuple[int, ...]
    module: str = ""
    seq_nr: int | None = None


@dataclass
class Binding:
    """A graph output the executor must collect: the loss, a gradient, a buffer update."""

    role: str  # 'loss' | 'grad' | 'buffer'
    name: str  # parameter / buffer name (model naming), '' for the loss
    fx_node: Any  # the FX node holding the value
    units: tuple[int, ...] = ()  # root units the value comes from (empty: a placeholder)


@dataclass
class TorchProgram:
    """The joint training graph of a module, executable node by node.

    ``graph`` is the poet :class:`Graph`; ``groups[v]`` lists the units poet
    node ``v`` runs (one unit per node at aten granularity).
    """

    name: str
    gm: Any  # torch.fx.GraphModule (joint forward+backward)
    units: list[Unit]
    groups: list[tuple[int, ...]]
    graph: Graph
    placeholders: list[tuple[str, str, Any]]  # (role, name, fx node): param/buffer/input/tangent
    bindings: list[Binding]
    model: Any
    params: dict[str, Any]  # name -> nn.Parameter of the user's model
    buffers: dict[str, Any]  # name -> buffer tensor of the user's model
    fixed_breakdown: dict[str, int]
    granularity: str = "aten"
    unit_node: dict[int, Any] = field(default_factory=dict)  # unit id -> FX node
    fx_info: dict[str, tuple] = field(
        default_factory=dict
    )  # fx name -> ('unit', u) | ('item', u, i) | ('alias', roots) | ('fixed', k) | ('const', attr)
    aten_units: int = 0
    example_batch: tuple = ()
    eager_difference: float | None = None  # see _eager_difference

    @property
    def fixed_ram_bytes(self) -> int:
        return int(sum(self.fixed_breakdown.values()))

    def group_outputs(self, v: int) -> tuple[int, ...]:
        """Units of node ``v`` whose values outlive the node's instruction."""
        return self._exports[v]

    def coarsen(self, by: str = "module", depth: int | None = None, max_nodes: int | None = None) -> TorchProgram:
        """A layer-level program: units grouped by owning module (see :func:`coarsen`)."""
        return coarsen(self, by=by, depth=depth, max_nodes=max_nodes)

    def summary(self) -> str:
        g = self.graph
        nf, nb = len(g.forward_ids()), len(g.backward_ids())
        lines = [
            f"{self.name}: {len(g)} poet nodes ({self.granularity}; {nf} forward, {nb} backward) "
            f"from {self.aten_units} aten ops, {len(g.edges)} edges",
            "fixed RAM " + ", ".join(f"{k} {v} B" for k, v in self.fixed_breakdown.items()),
        ]
        if self.eager_difference:
            lines.append(
                f"note: the traced step's loss and gradients differ from eager loss.backward() by up to "
                f"{self.eager_difference:.2g} (torch.export traces some modules, e.g. nn.GRU, into ops "
                f"that round differently); plans reproduce the traced step exactly"
            )
        return "\n".join(lines)

    # ---- internals filled by finish_program
    _exports: list[tuple[int, ...]] = field(default_factory=list, repr=False)
    owner: list[int] = field(default_factory=list, repr=False)  # unit id -> poet node


def finish_program(prog: TorchProgram, granularity: str) -> None:
    """Fill graph, owner map and group exports from ``prog.units`` and ``prog.groups``."""
    owner = [0] * len(prog.units)
    for v, grp in enumerate(prog.groups):
        for u in grp:
            owner[u] = v
    # a unit is exported if a unit of another group or a graph output reads it
    needed_outside = set()
    for u in prog.units:
        for p in u.preds:
            if owner[p] != owner[u.id]:
                needed_outside.add(p)
    for b in prog.bindings:
        needed_outside.update(b.units)
    exports = []
    nodes = []
    edges = set()
    for v, grp in enumerate(prog.groups):
        ex = tuple(u for u in grp if u in needed_outside or len(grp) == 1)
        exports.append(ex)
        us = [prog.units[u] for u in grp]
        kind = BACKWARD if any(x.kind == BACKWARD for x in us) else FORWARD
        if len(grp) == 1:
            nm = us[0].fx_name
            op = us[0].op
        else:
            labels = getattr(prog, "group_labels", None)
            label = (labels[v] if labels else us[0].module) or "<top>"
            nm = f"{label}:{'bwd' if kind == BACKWARD else 'fwd'}:{v}"
            op = "group(" + ",".join(sorted({x.op.split(".")[-2] if x.op.count(".") >= 2 else x.op for x in us})) + ")"
        nodes.append(
            Node(
                name=nm,
                kind=kind,
                output_bytes=int(sum(prog.units[u].bytes for u in ex)),
                flops=float(sum(x.flops for x in us)),
                op=op,
            )
        )
        for x in us:
            for p in x.preds:
                if owner[p] != v:
                    edges.add((owner[p], v))
    meta = {
        "source": "torch",
        "granularity": granularity,
        "aten_ops": prog.aten_units,
        "fixed_ram": dict(prog.fixed_breakdown),
    }
    prog.graph = Graph(name=prog.name, nodes=tuple(nodes), edges=tuple(sorted(edges)), meta=meta)
    prog.owner = owner
    prog._exports = exports
    prog.granularity = granularity


def coarsen(
    prog: TorchProgram, by: str = "module", depth: int | None = None, max_nodes: int | None = None
) -> TorchProgram:
    """Group consecutive units of the same module (and direction) into one poet node.

    A unit's module is its ``nn_module_stack`` path (backward ops: the path of
    the forward op with the same ``seq_nr``) truncated to ``depth`` components.
    Ops of the top-level module join the preceding group of the same
    direction.  Groups are runs of consecutive units in the topological order,
    so the grouped graph stays acyclic with node ids in topological order.

    Without ``depth`` the deepest depth giving at most ``max_nodes`` nodes is
    used (default ``max_nodes``: a third of the aten units, at least 8).
    """
    if by != "module":
        raise ValueError("only by='module' is supported")
    units = [u for grp in prog.groups for u in grp]
    maxdepth = max((len(prog.units[u].module.split(".")) for u in units if prog.units[u].module), default=1)

    def grouping(d: int | None) -> list[list[int]]:
        groups: list[list[int]] = []
        labels.clear()
        last = None
        for u in units:
            un = prog.units[u]
            m = un.module
            if d is not None and m:
                m = ".".join(m.split(".")[:d])
            if not m and groups and last is not None and last[1] == un.kind:
                groups[-1].append(u)  # top-level functional op: part of the preceding layer
                continue
            k = (m, un.kind)
            if groups and k == last:
                groups[-1].append(u)
            else:
                groups.append([u])
                labels.append(m)
                last = k
        return groups

    labels: list[str] = []

    if depth is not None:
        groups = grouping(depth)
    else:
        target = max_nodes if max_nodes is not None else max(8, len(units) // 3)
        for d in range(maxdepth, 0, -1):
            groups = grouping(d)
            if len(groups) <= target:
                break
    new = TorchProgram(
        name=prog.name,
        gm=prog.gm,
        units=prog.units,
        groups=[tuple(g) for g in groups],
        graph=None,
        placeholders=prog.placeholders,
        bindings=prog.bindings,
        model=prog.model,
        params=prog.params,
        buffers=prog.buffers,
        fixed_breakdown=dict(prog.fixed_breakdown),
        unit_node=prog.unit_node,
        fx_info=prog.fx_info,
        aten_units=prog.aten_units,
        example_batch=prog.example_batch,
        eager_difference=prog.eager_difference,
    )
    new.group_labels = list(labels)
    finish_program(new, "layer")
    return new


__all__ = ["Binding", "TorchProgram", "Unit", "coarsen", "finish_program"]
