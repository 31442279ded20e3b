"""Tiling a traced training step: ops too big for the budget become tiles of real aten computations.

``tile_program(program, count, threshold)`` rewrites the joint aten graph of a
:class:`~poet.graph.torch_export.TorchProgram`: every op whose working set
(output plus inputs) exceeds ``threshold`` bytes, and every op that reads a
tiled tensor, is split into ``count`` tiles when its family has a rule
(:mod:`poet.execute.tiled_rules`, :mod:`poet.execute.tiled_spatial`,
:mod:`poet.execute.tiled_tokens`; attention streams key/value tiles,
:mod:`poet.execute.tiled_attention`).  A tiled tensor is never whole: each tile is
its own value (its own storage), computed by a kernel of
:mod:`poet.execute.tiled_ops` from the rows of its inputs it needs, halo
included, and read by the consumers' tiles as views.  The result is an ordinary
``TorchProgram`` whose poet nodes carry a :class:`~poet.graph.core.Tile`; the
unchanged :class:`~poet.execute.executor.Executor` runs, pages and frees its
tiles like any tensor.

An op without a rule (or whose inputs cannot be sliced consistently) stays
whole; if it reads a tiled tensor the tiles are assembled first (an ordinary
node holding the whole tensor), and the report says which ops did so.

This is the tiling stack that slices real tensors; :mod:`poet.graph.tiling_plan` is the one that
costs the tiled nodes of zoo layer graphs.  They share the ``--tile`` option and its parser
(:mod:`poet.graph.tile_option`) and the window arithmetic (:mod:`poet.graph.windows`); their count
searches differ on purpose: :func:`tile_for_budget` tries one count for the whole program (2, 4,
8, ...), ``plan_tiling`` doubles the count of each layer that sets an over-budget working set.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field

import torch
import torch.fx

from ..graph.core import Graph, Tile
from ..graph.torch_export import ExtractionError, TorchProgram, program_from_joint_graph
from ..hardware.cost import costed_program
from . import tiled_ops as K
from .tiled_attention import Elided
from .tiled_attention_match import find_attention
from .tiled_rules import RULES as ELEMENTWISE_RULES
from .tiled_sdpa import RULES as FUSED_ATTENTION_RULES
from .tiled_spatial import RULES as SPATIAL_RULES
from .tiled_tokens import RULES as TOKEN_RULES
from .tiled_values import Layout, Tiled, TilingError, TupleVal, even_bounds
from .tiled_views import ALIAS_RULES

RULES = {**ELEMENTWISE_RULES, **SPATIAL_RULES, **TOKEN_RULES, **FUSED_ATTENTION_RULES}

aten = torch.ops.aten


@dataclass
class TilingReport:
    """What a tiling did: which ops were split, into how many tiles, and what stayed whole."""

    count: int
    threshold_bytes: int
    tiled: dict = field(default_factory=dict)  # original op name -> (aten op, tiles, axis)
    assembled: dict = field(default_factory=dict)  # original op name -> why its tiles were joined
    untiled: dict = field(default_factory=dict)  # original op name -> why it was not tiled
    joins: dict = field(default_factory=dict)  # new node joining tiles -> (original value it rebuilds, its op)
    nodes_before: int = 0
    nodes_after: int = 0

    def lines(self) -> list[str]:
        out = [
            (
                f"tiled {len(self.tiled)} ops into up to {self.count} tiles each "
                f"(ops whose working set exceeds {self.threshold_bytes} B, and their tiled neighbours); "
                f"{self.nodes_before} -> {self.nodes_after} nodes"
            )
        ]
        fams: dict[str, int] = {}
        for op, _, _ in self.tiled.values():
            fams[op] = fams.get(op, 0) + 1
        if fams:
            out.append("  tiled: " + ", ".join(f"{k.replace('aten.', '')} x{v}" for k, v in sorted(fams.items())))
        for nm, why in self.untiled.items():
            out.append(f"  not tiled: {nm}: {why}")
        for nm, why in self.assembled.items():
            out.append(f"  whole again: {nm}: {why}")
        return out


# Tiled numerics (docs/torch.md, "Tiling numerics"): tiles sum in another order than the whole-tensor
# kernels, so results match autograd within these bounds (relative to the largest magnitude), not bitwise.
GRADIENT_BOUND = 1e-4  # one step: max |g_tiled - g| / max |g| per parameter, and the loss
TRAINED_LOSS_BOUND = 1e-3  # poet train --check: every step's loss, relative
TRAINED_PARAM_BOUND = 1e-2  # ... and the final parameters: largest |p_tiled - p| over the largest |p| of the model

MAX_JOINED_VIEWS = 64  # views of tiles a tiling may fall back to applying whole before it gives up
MIN_SPLIT_BYTES = 4096  # an op whose working set is smaller is split only when it reads a tiled tensor


def dense_stride(val):
    """Packed strides in the dim order of traced value ``val``'s strides, or None when that is contiguous.

    A whole tensor rebuilt from tiles gets them: the traced program's views were checked against
    the traced layout, and kernels derive their outputs' layout from their inputs' (a CPU attention
    kernel's output is laid out like its query), so the rebuilt tensor keeps the traced dim order
    (a permuted or sliced value's, packed as ``torch.empty_like`` packs it).
    """
    if not isinstance(val, torch.Tensor) or val.dim() < 2 or val.is_contiguous() or val.numel() == 0:
        return None
    order = sorted(range(val.dim()), key=lambda d: (val.stride(d), -d))  # innermost first
    stride = [0] * val.dim()
    step = 1
    for d in order:
        stride[d] = step
        step *= val.shape[d]
    return tuple(stride) if stride != list(torch.empty(tuple(val.shape), device="meta").stride()) else None


def relative_difference(a, b) -> float:
    """max |a - b| / max |b| (0 when both are zero)."""
    scale = float(b.detach().abs().max()) if b.numel() else 0.0
    diff = float((a.detach() - b.detach()).abs().max()) if b.numel() else 0.0
    return diff / scale if scale > 0 else diff


def parameter_difference(params, reference) -> float:
    """Largest |p - q| over all parameters, divided by the largest |q| of the model.

    Per tensor it would be meaningless for a tensor near zero (a BatchNorm bias of 7e-3 after
    20 steps), where a ReLU-type kink flipped by rounding moves the whole ratio (docs/torch.md).
    """
    diff = scale = 0.0
    for p, q in zip(params, reference):
        if q.numel():
            diff = max(diff, float((p.detach() - q.detach()).abs().max()))
            scale = max(scale, float(q.detach().abs().max()))
    return diff / scale if scale > 0 else diff


class Rewriter:
    """Builds the tiled joint graph op by op (the rules in :mod:`tiled_rules`, :mod:`tiled_spatial` and
    :mod:`tiled_tokens` call its helpers)."""

    def __init__(
        self,
        program: TorchProgram,
        count: int,
        threshold: int,
        min_split: int = MIN_SPLIT_BYTES,
        stream_attention: bool = True,
        joined_views=(),
    ):
        self.p = program
        self.joined_views = frozenset(joined_views)  # original views applied to the whole tensor, not per tile
        self.view_origin: dict[str, str] = {}  # new view node -> the original view it applies to a tile
        self._aliasing: str | None = None
        self.count = count
        self.threshold = max(threshold, min_split)
        self.g = torch.fx.Graph()
        self.env: dict = {}
        self.flops: dict[str, float] = {}
        self.tiles: dict[str, Tile] = {}
        self.assembled: dict[int, object] = {}
        self.report = TilingReport(count=count, threshold_bytes=self.threshold, nodes_before=len(program.graph))
        ws = {}
        for u in program.units:
            ws[u.fx_name] = u.bytes + sum(program.units[q].bytes for q in u.preds)
        self.working_set = ws
        self.unit_flops = {u.fx_name: u.flops for u in program.units}
        self.attention = find_attention(program.gm.graph) if stream_attention else {}

    # ---------------------------------------------------------------- values
    def value(self, a):
        return self.env[a] if isinstance(a, torch.fx.Node) else a

    def is_tiled(self, a) -> bool:
        return isinstance(a, torch.fx.Node) and isinstance(self.env.get(a), Tiled)

    def full(self, a, why: str = ""):
        """The new FX node holding the whole value of original arg ``a`` (tiles assembled if need be)."""
        if isinstance(a, (list, tuple)):
            return type(a)(self.full(x, why) for x in a)
        if not isinstance(a, torch.fx.Node):
            return a
        v = self.env[a]
        if isinstance(v, Elided):
            raise TilingError(f"{a.name}: inside a streamed attention, never made, but read by another op")
        if isinstance(v, Tiled):
            key = id(v)
            if key not in self.assembled:
                node = self.g.call_function(K.tile_assemble, (list(v.tiles), v.layout.dim, dense_stride(v.val)))
                node.meta = {"val": v.val} if v.val is not None else {}
                self._inherit_meta(node, a)
                self.assembled[key] = node
                self.report.joins[node.name] = (a.name, str(a.target))
                self.flops[node.name] = 0.0
                self.report.assembled.setdefault(a.name, why or "read whole by an op that is not tiled")
            return self.assembled[key]
        if isinstance(v, TupleVal):
            raise TilingError(f"{a.name}: a tuple value read whole")
        return v

    def _inherit_meta(self, node, orig) -> None:
        for k in ("partitioner_tag", "nn_module_stack", "seq_nr", "stack_trace"):
            if k in orig.meta:
                node.meta[k] = orig.meta[k]

    def emit(self, target, args, orig, *, tile: Tile | None = None, flops: float = 0.0, kwargs=None):
        node = self.g.call_function(target, tuple(args), kwargs or {})
        node.meta = {}
        self._inherit_meta(node, orig)
        self.flops[node.name] = float(flops)
        if tile is not None:
            self.tiles[node.name] = tile
        return node

    def item(self, node, i: int):
        return self.g.call_function(operator.getitem, (node, i))

    def view(self, target, args):
        """An alias (view) node: no bytes, re-derived from its base by the executor."""
        node = self.g.call_function(target, tuple(args))
        if self._aliasing is not None:
            self.view_origin[node.name] = self._aliasing
        return node

    def shape(self, a) -> tuple:
        v = self.env.get(a) if isinstance(a, torch.fx.Node) else None
        if isinstance(v, Tiled):
            return v.shape
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        return tuple(val.shape) if isinstance(val, torch.Tensor) else ()

    def pieces(self, a, dim: int, lo: int, hi: int) -> list:
        """Views covering indices ``[lo, hi)`` of original tensor ``a`` along ``dim`` (clipped to it)."""
        shape = self.shape(a)
        lo, hi = max(0, lo), min(shape[dim], hi)
        if hi <= lo:
            return []
        v = self.env[a]
        if isinstance(v, Tiled):
            if v.layout.dim != dim:
                return [self.view(aten.slice.Tensor, (self.full(a, "sliced across its tiles"), dim, lo, hi))]
            out = []
            for j, t in enumerate(v.tiles):
                a0, b0 = v.layout.rows(j)
                s, e = max(lo, a0), min(hi, b0)
                if e <= s:
                    continue
                out.append(t if (s, e) == (a0, b0) else self.view(aten.slice.Tensor, (t, dim, s - a0, e - a0)))
            return out
        node = self.full(a)
        if lo == 0 and hi == shape[dim]:
            return [node]
        return [self.view(aten.slice.Tensor, (node, dim, lo, hi))]

    def rows_of(self, a, dim: int, lo: int, hi: int, orig, tile: Tile):
        """One value holding rows ``[lo, hi)`` of ``a``: a view when one tile holds them, else a gathered copy."""
        ps = self.pieces(a, dim, lo, hi)
        if len(ps) == 1:
            return ps[0]
        return self.emit(K.tile_gather, (ps, dim), orig, tile=dataclasses.replace(tile, part="output"))

    def layout_for(self, shape, axis: str = "rows", dim: int | None = None) -> Layout:
        if dim is None:
            dim = 2 if len(shape) >= 4 else (1 if len(shape) == 3 and shape[0] == 1 else 0)
        return Layout(dim, even_bounds(shape[dim], self.count), axis if len(shape) >= 4 else "tokens")

    def tile_of(self, orig, i: int, layout: Layout, *, halo: int = 0, part: str = "output") -> Tile:
        a, b = layout.rows(i)
        return Tile(
            of=orig.name,
            index=i,
            count=layout.count,
            axis=layout.axis,
            halo=max(0, int(halo)),
            part=part,
            start=(a,),
            stop=(b,),
        )

    def share(self, orig, a: int, b: int, size: int) -> float:
        return self.unit_flops.get(orig.name, 0.0) * (b - a) / max(1, size)

    # ---------------------------------------------------------------- driver
    def wants(self, n) -> bool:
        if self.working_set.get(n.name, 0) > self.threshold:
            return True
        return any(self.is_tiled(a) for a in n.all_input_nodes)

    def _forget_unread(self) -> None:
        """No "not tiled" line for ops only a streamed attention read (its causal mask): they are gone."""
        gone: set = set()
        for n in reversed(list(self.p.gm.graph.nodes)):
            if n.users and all(isinstance(self.env.get(u), Elided) or u in gone for u in n.users):
                gone.add(n)
                self.report.untiled.pop(n.name, None)

    def run(self) -> torch.fx.GraphModule:
        for n in self.p.gm.graph.nodes:
            if n.op == "placeholder":
                new = self.g.placeholder(n.name)
                new.meta = dict(n.meta)
                self.env[n] = new
            elif n.op == "output":
                continue
            elif n.target is operator.getitem:
                src = self.env.get(n.args[0])
                if isinstance(src, TupleVal):
                    if n.args[1] in src.items:
                        self.env[n] = src.items[n.args[1]]
                    continue
                self.env[n] = self.g.node_copy(n, lambda a: self.full(a))
            elif n in self.attention and self.attention[n].visit(self, n):
                continue  # a streamed attention's op: rewritten (or elided) by its group
            elif n.op == "call_function":
                done = None
                tiled_in = any(self.is_tiled(a) for a in n.all_input_nodes)
                alias = ALIAS_RULES.get(n.target)
                if tiled_in and alias is not None and n.name not in self.joined_views:
                    self._aliasing = n.name
                    try:
                        done = alias(self, n)
                    finally:
                        self._aliasing = None
                rule = RULES.get(n.target)
                if done is None and rule is not None and self.wants(n):
                    try:
                        done = rule(self, n)
                    except TilingError as e:
                        self.report.untiled[n.name] = str(e)
                        done = None
                    if done is not None:
                        v = done
                        t = next(iter(v.items.values())) if isinstance(v, TupleVal) else v
                        cnt = t.layout.count if isinstance(t, Tiled) else self.count
                        self.report.tiled[n.name] = (
                            str(n.target),
                            cnt,
                            t.layout.axis if isinstance(t, Tiled) else "rows",
                        )
                elif done is None and rule is None and self.working_set.get(n.name, 0) > self.threshold:
                    self.report.untiled.setdefault(n.name, f"{n.target}: no tiling rule for this op family")
                if done is None:
                    why = f"read whole by {n.target}" + (" (no tiling rule)" if rule is None and alias is None else "")
                    done = self.g.node_copy(n, lambda a, why=why: self.full(a, why))
                self.env[n] = done
            else:
                self.env[n] = self.g.node_copy(n, lambda a: self.full(a))
        self._forget_unread()
        outs = [self.full(b.fx_node, "a graph output (loss, gradient or buffer update)") for b in self.p.bindings]
        self.g.output(outs)
        self.g.eliminate_dead_code()
        return torch.fx.GraphModule(self.p.gm, self.g)


def tile_program(
    program: TorchProgram,
    count: int,
    threshold: int = 0,
    min_split: int = MIN_SPLIT_BYTES,
    *,
    stream_attention: bool = True,
) -> tuple[TorchProgram, TilingReport]:
    """``program`` with ops whose working set exceeds ``threshold`` bytes split into ``count`` tiles.

    Ops whose working set is at most ``min_split`` bytes are split only when they read a tiled tensor.
    Attention streams key/value tiles (:mod:`poet.execute.tiled_attention`); ``stream_attention=False``
    tiles it by queries only, each query tile reading the whole keys and values (for comparison).
    """
    if program.granularity != "aten":
        raise TilingError("tiling needs the aten-level program (granularity 'aten'), not a coarsened one")
    if count < 2:
        raise TilingError(f"a tile count must be at least 2, got {count}")
    joined: dict[str, str] = {}
    while True:
        rw = Rewriter(program, count, threshold, min_split, stream_attention, joined_views=joined)
        gm = rw.run()
        try:
            tiled = program_from_joint_graph(gm, program, name=program.name, flops=rw.flops)
            break
        except ExtractionError as e:
            # A view the traced layout allowed that a tile's layout does not (a kernel laid the tile
            # out otherwise): apply that view to the whole tensor instead, and say so.
            orig = rw.view_origin.get(e.node or "")
            if orig is None or orig in joined or len(joined) >= MAX_JOINED_VIEWS:
                raise
            joined[orig] = str(e).split("\n")[0].split(": ", 2)[-1].split(" (")[0]
    for name, why in joined.items():
        rw.report.untiled[name] = f"a view its tiles' layout does not allow ({why}): applied to the whole tensor"
    nodes = []
    for v, grp in enumerate(tiled.groups):
        nd = tiled.graph.nodes[v]
        t = rw.tiles.get(tiled.units[grp[0]].fx_name) if len(grp) == 1 else None
        nodes.append(dataclasses.replace(nd, tile=t) if t is not None else nd)
    meta = dict(tiled.graph.meta)
    meta["tiling"] = {"count": count, "threshold_bytes": int(threshold), "tiled_ops": len(rw.report.tiled)}
    tiled.graph = Graph(name=tiled.graph.name, nodes=tuple(nodes), edges=tiled.graph.edges, meta=meta)
    tiled.tiling = rw.report
    rw.report.nodes_after = len(tiled.graph)
    return tiled, rw.report


@dataclass
class TilingChoice:
    """The program to plan with, and why: untiled when it fits, else the coarsest tiling that does."""

    program: TorchProgram
    report: TilingReport | None
    untiled_min_bytes: int
    tiled_min_bytes: int | None = None
    budget_bytes: int = 0
    tried: list = field(default_factory=list)  # (count, threshold, min RAM) per tiling tried
    limit: str = ""  # what sets the smallest minimum reached: the node, its aten op, and why it stayed whole

    @property
    def tiled(self) -> bool:
        return self.report is not None

    def lines(self) -> list[str]:
        if not self.tiled:
            if self.tried:
                return [
                    (
                        f"not tiled: minimum RAM {self.untiled_min_bytes} B untiled; no tiling tried lowers it "
                        f"(smallest tiled minimum {self.tiled_min_bytes} B, set by {self.limit})"
                    )
                ]
            return [f"not tiled: minimum RAM {self.untiled_min_bytes} B untiled"]
        out = [
            (
                f"tiling: minimum RAM {self.untiled_min_bytes} B untiled, {self.tiled_min_bytes} B tiled "
                f"(budget {self.budget_bytes} B)"
            )
        ]
        if self.tiled_min_bytes > self.budget_bytes:
            out.append(
                f"  no tiling tried fits the budget; the smallest minimum reached is {self.tiled_min_bytes} B "
                f"(tried " + ", ".join(f"{c} tiles: {m} B" for c, _, m in self.tried) + f"), set by {self.limit}"
            )
        return out + self.report.lines()


def tile_for_budget(
    program: TorchProgram,
    device,
    budget_bytes: int,
    *,
    fixed_ram_bytes: int | None = None,
    count: int | None = None,
    max_count: int = 64,
) -> TilingChoice:
    """Tile ``program`` as coarsely as fits ``budget_bytes`` (untiled if it fits already).

    ``count`` forces a tile count.  Tile counts 2, 4, 8, ... are tried, first
    splitting only the ops whose working set exceeds what the budget leaves
    after fixed RAM (and their tiled neighbours), then every op with a rule.
    When none fits, the tiling with the smallest minimum is returned: a solve
    then answers infeasible with that minimum.
    """
    base = costed_program(program, device, fixed_ram_bytes)
    untiled_min = base.min_ram_bytes()
    choice = TilingChoice(program, None, untiled_min, budget_bytes=int(budget_bytes))
    if count is None and budget_bytes >= untiled_min:
        return choice
    avail = max(0, int(budget_bytes) - base.fixed_ram_bytes)
    counts = [count] if count is not None else [c for c in (2, 4, 8, 16, 32, 64) if c <= max_count]
    thresholds = (avail, 0) if budget_bytes < untiled_min else (0,)
    best = None
    last_min = None
    for c in counts:
        for th in thresholds:
            tp, rep = tile_program(program, c, th)
            m = costed_program(tp, device, fixed_ram_bytes).min_ram_bytes()
            choice.tried.append((c, th, m))
            if best is None or m < best[2]:
                best = (tp, rep, m)
            if m <= budget_bytes:
                choice.program, choice.report, choice.tiled_min_bytes = tp, rep, m
                return choice
        if last_min is not None and best[2] >= last_min:
            break  # more tiles no longer lower the minimum: an untiled op bounds it
        last_min = best[2]
    choice.limit = minimum_setter(best[0], best[1], costed_program(best[0], device, fixed_ram_bytes))
    if count is None and best[2] >= untiled_min:
        choice.tiled_min_bytes = best[2]  # tiling does not help: plan the untiled program
        return choice
    choice.program, choice.report, choice.tiled_min_bytes = best
    return choice


def minimum_setter(program: TorchProgram, report: TilingReport, costed) -> str:
    """The node whose working set (output plus inputs) sets the minimum RAM, with its aten op and,
    when that op was left whole, the tiling report's reason."""
    g = costed
    work = [nd.ram_bytes + sum(g.nodes[p].ram_bytes for p in g.preds[i]) for i, nd in enumerate(g.nodes)]
    v = max(range(len(work)), key=work.__getitem__)
    unit = program.units[program.groups[v][0]]
    if unit.fx_name in report.joins:  # tiles joined again: say what the whole tensor is, and who reads it whole
        orig, op = report.joins[unit.fx_name]
        return f"{orig} ({op}) joined whole again ({work[v]} B with its tiles): {report.assembled.get(orig, '')}"
    why = report.untiled.get(unit.fx_name) or report.assembled.get(unit.fx_name)
    if why is None:
        why = next((w for w in report.untiled.values() if unit.op in w), None)
    return f"node {unit.fx_name} ({unit.op}, {work[v]} B with its inputs)" + (f": {why}" if why else "")


__all__ = [
    "GRADIENT_BOUND",
    "TRAINED_LOSS_BOUND",
    "TRAINED_PARAM_BOUND",
    "Layout",
    "Rewriter",
    "Tiled",
    "TilingChoice",
    "TilingError",
    "TilingReport",
    "TupleVal",
    "even_bounds",
    "relative_difference",
    "tile_for_budget",
    "tile_program",
]
