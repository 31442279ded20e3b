"""Choosing tile counts: split only the layers that must be split, as coarsely as fits the RAM budget.

The lower bound on RAM of any schedule is the largest working set: a node's
output plus all its inputs, plus fixed RAM.  :func:`plan_tiling` starts from
the untiled graph and doubles tile counts in rounds while some working set
exceeds the budget, each byte of a working set charged to the layer whose count
sets it (:func:`_charges`); then it undoes doublings that were not needed and
groups attention heads where the graph shrinks.  Only when rows can be split no
further and a node is still over the budget does it split channels as well
(:mod:`poet.graph.tiling_channels`).  A model of identical blocks is planned on
two of them.  It stops when everything fits or nothing that is too
big can be split further (the largest working set then left is the *tiled
minimum*, and ``limit`` names the node that sets it), or at its node or time cap,
saying which.

This stack costs the tiled nodes of zoo layer graphs; :mod:`poet.execute.tiled` slices the real
tensors of traced programs, with one count for the whole program (``tile_for_budget``).  The
``--tile`` option and the window arithmetic are shared (:mod:`poet.graph.tile_option`,
:mod:`poet.graph.windows`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from .core import Graph, GraphError
from .tile_option import MAX_NODES, MAX_PLAN_SECONDS, TILE_AUTO, TILE_OFF, parse_tile_option
from .tiling import HEADS_KEY, build_tiled, rows_of, tileable, tiled_nodes
from .tiling_channels import split_channels
from .tiling_layout import CHANNELS_KEY
from .zoo import ModelLayers, build_model, model_layers

MAX_ROUNDS = 200
# MAX_NODES, MAX_PLAN_SECONDS (poet/graph/tile_option.py, beside the options that change them): the caps'
# defaults, plan_tiling(max_nodes=..., max_seconds=...), poet --max-tile-nodes / --max-tile-seconds


@dataclass(frozen=True)
class PlanCaps:
    """When auto tiling stops refining: past ``nodes`` (whole-model) nodes, or ``seconds`` after ``t0``."""

    nodes: float
    seconds: float
    t0: float
    progress: Callable[[str], None] | None = None  # told what planning is doing, as it goes

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.t0 > self.seconds

    def tell(self, what: str) -> None:
        """Say what planning is doing (a failing callback never stops it)."""
        if self.progress is not None:
            try:
                self.progress(f"{what}, {time.perf_counter() - self.t0:.0f} s of at most {self.seconds:.0f}")
            except Exception:
                pass

    @property
    def deadline(self) -> float:
        return self.t0 + self.seconds


def working_sets(g: Graph) -> list[int]:
    """Per node: output bytes plus the bytes of every input (what must be in RAM to compute it)."""
    b = [nd.output_bytes for nd in g.nodes]
    return [b[i] + sum(b[p] for p in g.preds[i]) for i in range(len(g.nodes))]


@dataclass(frozen=True)
class TilingPlan:
    """What tiling did to a model for one RAM budget (every field always present)."""

    model: str
    budget_bytes: int
    fixed_ram_bytes: int
    mode: str  # "auto", "off" or "N" (a forced count)
    graph: Graph  # the graph to schedule: tiled, or the untiled one
    counts: dict[str, int] = field(default_factory=dict)  # layer -> tiles (layers split in 2 or more)
    untiled_min_bytes: int = 0  # smallest budget of any schedule without tiling (fixed RAM included)
    tiled_min_bytes: int = 0  # the same for the returned graph
    nodes_before: int = 0
    nodes_after: int = 0
    limit: str = ""  # the node whose working set sets tiled_min_bytes

    @property
    def tiled(self) -> bool:
        return bool(self.counts)

    @property
    def fits(self) -> bool:
        return self.tiled_min_bytes <= self.budget_bytes

    def summary(self) -> dict:
        """JSON-ready facts for a schedule's solver record."""
        return {
            "mode": self.mode,
            "counts": dict(self.counts),
            "untiled_min_ram_bytes": self.untiled_min_bytes,
            "tiled_min_ram_bytes": self.tiled_min_bytes,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "limit": self.limit,
        }


def split_items(counts: dict[str, int]) -> list[tuple[str, int, str]]:
    """Per layer split, in the order of ``counts``: (name, its tiles, "x8", or "x32x2ch" for 32 row tiles
    of 2 channel groups each)."""
    ch = {k[: -len(CHANNELS_KEY)]: v for k, v in counts.items() if k.endswith(CHANNELS_KEY)}
    items = [
        (k, v * ch.get(k, 1), f"x{v}" + (f"x{ch[k]}ch" if k in ch else ""))
        for k, v in counts.items()
        if not k.endswith(CHANNELS_KEY)
    ]
    return items + [(k, g, f"x{g}ch") for k, g in ch.items() if k not in counts]


def _limit_text(g: Graph, ws: list[int], fixed: int) -> str:
    i = max(range(len(ws)), key=ws.__getitem__)
    return f"{g.nodes[i].name} (output plus inputs {ws[i] + fixed} B with fixed RAM)"


def plan_tiling(
    model: str | ModelLayers,
    budget_bytes: int,
    *,
    batch_size: int = 1,
    fixed_ram_bytes: int = 0,
    tile: str | int = TILE_AUTO,
    max_nodes: int | None = None,
    max_seconds: float | None = None,
    nodes_why: str = "",
    progress: Callable[[str], None] | None = None,
) -> TilingPlan:
    """The graph of zoo ``model`` (a name, or its layer list) to schedule within ``budget_bytes`` of RAM.

    ``tile="auto"``: untiled when it fits, else only the layers that must be
    split, as coarsely as fits; ``"off"``: never tiled; an integer ``N``: every
    layer that can be split is split into ``min(N, its rows)`` tiles.  A model of
    four or more identical blocks is planned on its first two, every block getting
    the same counts (:func:`repeated_blocks`).  Auto tiling stops refining past
    ``max_nodes`` nodes (default :data:`MAX_NODES`) or after ``max_seconds``
    (default :data:`MAX_PLAN_SECONDS`), its ``limit`` then says so and how to lift it (and
    ``nodes_why``, why the node cap is what it is, when given).  ``progress`` is told, as planning
    goes, its round, the graph's size and its largest working set.
    """
    mode = parse_tile_option(tile)
    for what, v in (("max_nodes", max_nodes), ("max_seconds", max_seconds)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")):
            raise GraphError(f"{what} must be a positive number, got {str(v)[:40]}")
    ml = model_layers(model) if isinstance(model, str) else model
    g0 = build_model(model, batch_size) if isinstance(model, str) else build_tiled(ml, {}, batch_size).graph
    ws0 = working_sets(g0)
    untiled_min = fixed_ram_bytes + max(ws0)
    base = {
        "model": ml.name,
        "budget_bytes": int(budget_bytes),
        "fixed_ram_bytes": fixed_ram_bytes,
        "mode": mode,
        "untiled_min_bytes": untiled_min,
        "nodes_before": len(g0),
    }

    def done(g: Graph, counts: dict, ws: list[int]) -> TilingPlan:
        return TilingPlan(
            graph=g,
            counts=counts,
            tiled_min_bytes=fixed_ram_bytes + max(ws),
            nodes_after=len(g),
            limit=_limit_text(g, ws, fixed_ram_bytes),
            **base,
        )

    if mode == TILE_OFF or (mode == TILE_AUTO and untiled_min <= budget_bytes):
        return done(g0, {}, ws0)
    layers = ml.layers
    if mode == TILE_AUTO and budget_bytes <= fixed_ram_bytes:
        # nothing to tile for: the fixed RAM alone fills the budget
        return TilingPlan(
            graph=g0,
            counts={},
            tiled_min_bytes=untiled_min,
            nodes_after=len(g0),
            limit=f"fixed RAM {fixed_ram_bytes} B alone is not below the budget",
            **base,
        )
    if mode != TILE_AUTO:
        n = int(mode)
        tb = build_tiled(ml, {lay.name: n for lay in layers if tileable(lay)}, batch_size)
        return done(tb.graph, tb.counts, working_sets(tb.graph))
    caps = PlanCaps(
        MAX_NODES if max_nodes is None else max_nodes,
        MAX_PLAN_SECONDS if max_seconds is None else max_seconds,
        time.perf_counter(),
        progress,
    )
    cap = budget_bytes - fixed_ram_bytes
    blocks = repeated_blocks(ml)
    stopped = ""
    if blocks is not None:
        # identical blocks get identical counts: plan on the first two (the first reads the data and
        # feeds a block like itself, the second is fed by one and feeds the loss: with equal counts
        # every neighbourhood of every block is there), then check the whole model
        short = ModelLayers(ml.name, ml.input_shape, ml.layers[: 2 * blocks.length])
        scale = len(ml.layers) / len(short.layers)
        # what doubling builds is the two-block graph, so the node cap (the whole model's) holds it, not
        # the whole model it stands for: doubling overshoots and the coarsening takes it back (bert at
        # 256 KiB passes 55,680 whole-model nodes on its way to 33,536)
        counts, stopped = _plan_blocks(short, cap, batch_size, caps, blocks, scale, caps.nodes * scale)
        if (stopped and _NODE_CAP in stopped) or len(_measure(short, counts, batch_size)[2]) * scale > caps.nodes:
            # the plan itself is past the cap: plan again with the whole model held within it throughout
            counts, stopped = _plan_blocks(short, cap, batch_size, caps, blocks, scale, caps.nodes)
        counts = blocks.expand(counts, len(ml.layers) // blocks.length)
        if not stopped:
            caps.tell("planning the tiles: building the whole tiled graph")
            tb = build_tiled(ml, counts, batch_size)
            ws = working_sets(tb.graph)
            if max(ws) <= cap:
                return done(tb.graph, tb.counts, ws)
    else:
        counts = {}
    if not stopped:
        counts, stopped = _double_until_fit(ml, counts, cap, batch_size, caps, None)
        if not stopped and _fits(ml, counts, cap, batch_size):
            counts = _coarsen(ml, counts, cap, batch_size, caps, None)
        elif not stopped:
            # rows alone are not enough: split channels where one row is still too much
            counts, stopped = split_channels(
                ml, counts, cap, lambda c: _measure(ml, c, batch_size), caps.deadline, caps.nodes
            )
    caps.tell("planning the tiles: building the whole tiled graph")
    tb = build_tiled(ml, counts, batch_size)
    plan = done(tb.graph, tb.counts, working_sets(tb.graph))
    if stopped and not plan.fits:
        if nodes_why and _NODE_CAP in stopped:
            stopped += f" ({nodes_why})"
        plan = TilingPlan(
            **{
                **plan.__dict__,
                "limit": f"the graph's size: auto tiling stopped at {stopped} (largest working set so far: "
                f"{plan.limit}; --max-tile-nodes / --max-tile-seconds lift the caps, --tile N splits finer)",
            }
        )
    return plan


def _plan_blocks(short, cap, batch_size, caps: PlanCaps, blocks, scale, node_cap) -> tuple[dict[str, int], str]:
    """Counts for the first two blocks (``short``): doubled until they fit, with at most ``node_cap``
    whole-model nodes while doubling, then coarsened; (the counts, what stopped it early or "")."""
    counts, stopped = _double_until_fit(short, {}, cap, batch_size, caps, blocks, scale, node_cap=node_cap)
    if not stopped and _fits(short, counts, cap, batch_size):  # halving keeps only what fits
        counts = _coarsen(short, counts, cap, batch_size, caps, blocks, scale)
    return counts, stopped


_NODE_CAP = "past the planner's cap"


@dataclass(frozen=True)
class Blocks:
    """A model made of identical blocks ``block0.*``, ``block1.*``, ... of ``length`` layers each."""

    length: int

    @staticmethod
    def key(name: str) -> str:
        """A layer's name with its block number dropped: the same key for the same layer of every block."""
        return _BLOCK.sub("block*.", name, count=1)

    def expand(self, counts: dict[str, int], nblocks: int) -> dict[str, int]:
        """Counts of the layers of the first blocks given to the same layer of every block."""
        by_key = {self.key(k): v for k, v in counts.items()}
        return {f"block{b}.{k[len('block*.') :]}": v for k, v in by_key.items() for b in range(nblocks)}


_BLOCK = re.compile(r"^block\d+\.")


def repeated_blocks(ml: ModelLayers) -> Blocks | None:
    """The model's repeated blocks, when it is four or more identical blocks and nothing else.

    Identical: the same ops, shapes and costs in the same order, each reading the same layers of its
    own block and the previous block's last output (the first block reads the data)."""
    layers = ml.layers
    names = [lay.name for lay in layers]
    if not names or not all(_BLOCK.match(n) for n in names):
        return None
    n0 = sum(1 for n in names if n.startswith("block0."))
    if n0 == 0 or len(layers) % n0 or len(layers) // n0 < 4:
        return None
    for k in range(len(layers) // n0):
        base = k * n0
        for j in range(n0):
            a, b = layers[j], layers[base + j]
            if b.name != f"block{k}.{a.name[len('block0.') :]}" or (a.op, a.shape, a.flops, a.params, a.heads) != (
                b.op,
                b.shape,
                b.flops,
                b.params,
                b.heads,
            ):
                return None
            for x, y in zip(a.inputs, b.inputs, strict=False):
                if len(a.inputs) != len(b.inputs) or (x >= 0 and y - base != x) or (x < 0 and k and y != base - 1):
                    return None
                if x < 0 and k == 0 and y != x:
                    return None
    return Blocks(n0)


def _double_until_fit(
    ml, counts, cap, batch_size, caps: PlanCaps, blocks, scale=1.0, frozen=frozenset(), node_cap=None
) -> tuple[dict[str, int], str]:
    """Double the counts of the layers :func:`_layers_to_split` picks until every working set fits
    ``cap`` or nothing more can be split; (the counts with the smallest largest working set, what
    stopped it early or "").  ``scale``: nodes of the whole model per node of ``ml`` (the node cap
    is the whole model's); layers named in ``frozen`` keep their counts; ``node_cap``: stop past this
    many (whole-model) nodes instead of ``caps.nodes`` (doubling never removes nodes, so a trial that
    must end smaller than a known plan stops as soon as it is not)."""
    node_cap = caps.nodes if node_cap is None else node_cap
    counts = dict(counts)
    layers = ml.layers
    best = None
    for _ in range(MAX_ROUNDS):
        bd, size, ws = _measure(ml, counts, batch_size)
        top = max(ws)
        caps.tell(f"planning the tiles: about {len(ws) * scale:,.0f} nodes, largest working set {top:,} B of {cap:,}")
        if len(ws) * scale > node_cap and best is not None:
            # the previous round's counts, the last within the cap (fitting or not: a graph this large
            # is not planned, and not scheduled, within minutes)
            return best[1], f"about {len(ws) * scale:,.0f} nodes, {_NODE_CAP} of {node_cap:,.0f}"
        if top <= cap:
            return counts, ""
        if best is None or top < best[0]:
            best = (top, dict(counts))
        if caps.out_of_time():
            return best[1], f"{caps.seconds:.0f} s of planning (its time cap)"
        grow = _layers_to_split(bd, size, ws, cap, counts, layers, frozen)
        if not grow:
            return best[1], ""  # nothing that is too big can be split further: best[0] is the tiled minimum
        names = {layers[li].name for li in grow}
        if blocks is not None:
            keys = {blocks.key(n) for n in names}
            names = {lay.name for lay in layers if blocks.key(lay.name) in keys}
        shape = {lay.name: lay.shape for lay in layers}
        for name in names:
            # doubling keeps the tiles of neighbouring layers aligned (rows and tokens are mostly powers
            # of two), so a tile reads one tile of its input plus the halo, not two straddled ones
            counts[name] = min(rows_of(shape[name]), 2 * counts.get(name, 1))
    return best[1], f"{MAX_ROUNDS} rounds of doubling"


def _coarsen(ml, counts, cap, batch_size, caps: PlanCaps, blocks, scale=1.0) -> dict[str, int]:
    """Halve counts again where everything still fits ``cap``.

    Doubling several layers in one round can split one more than needed (a node over the cap
    shrinks once any of them halves).  Undoing that: a layer (with ``blocks``, the same layer of
    every block) whose halving is predicted to keep every working set within the cap (its
    charged bytes doubled, :func:`_charges`) is tried, the one owning the most nodes first, and
    kept if the rebuilt graph fits.  Stops at the planning time cap (what fits is kept either way).
    """
    counts = dict(counts)
    index = {lay.name: i for i, lay in enumerate(ml.layers)}
    # attention tiles of several heads each: one step then does the work of several for the same reads
    # of its neighbours' tiles (Q, K, V projections and the context are split by groups of heads too)
    for i, lay in enumerate(ml.layers):
        if not (lay.op == "matmul" and lay.heads and len(lay.shape) == 3 and i + 2 < len(ml.layers)):
            continue
        if blocks is not None and not lay.name.startswith("block0."):
            continue
        if max(counts.get(lay.name, 1), counts.get(ml.layers[i + 1].name, 1)) < 2:
            continue  # attention is not tiled
        key = ml.layers[i + 2].name + HEADS_KEY
        names = (
            [key] if blocks is None else [n + HEADS_KEY for n in index if blocks.key(n + HEADS_KEY) == blocks.key(key)]
        )
        per = counts.get(key, 1)
        nodes = len(_measure(ml, counts, batch_size)[2])
        while lay.heads % (2 * per) == 0 and not caps.out_of_time():
            # twice the heads per tile; what no longer fits is split further, kept if the graph shrinks
            trial, stopped = _double_until_fit(
                ml,
                {**counts, **dict.fromkeys(names, 2 * per)},
                cap,
                batch_size,
                caps,
                blocks,
                scale,
                node_cap=nodes * scale,
            )
            ws = _measure(ml, trial, batch_size)[2]
            if stopped or max(ws) > cap or len(ws) >= nodes:
                break
            counts, per, nodes = trial, 2 * per, len(ws)
    index.update({k: -1 for k in counts if k.endswith(HEADS_KEY)})
    group_of = {name: (blocks.key(name) if blocks is not None else name) for name in index}
    failed: set[str] = {group_of[k] for k in counts if k.endswith(HEADS_KEY)}  # heads per tile only grow
    bd, size, ws = _measure(ml, counts, batch_size)
    while not caps.out_of_time():
        after: dict[str, int] = {}  # group -> predicted largest working set once its counts halve
        owned: dict[str, int] = {}
        for v in range(len(ws)):
            if bd.owner[v] is not None:
                gk = group_of[ml.layers[bd.owner[v]].name]
                owned[gk] = owned.get(gk, 0) + 1
            for li, c in _charges(bd, size, v).items():
                gk = group_of[ml.layers[li].name]
                after[gk] = max(after.get(gk, 0), ws[v] + c)
        cands = sorted(
            (gk for gk in {group_of[n] for n, c in counts.items() if c > 1} - failed if after.get(gk, 0) <= cap),
            key=lambda gk: (-owned.get(gk, 0), gk),  # the name breaks ties: the same plan in every process
        )
        if not cands:
            break
        gk = cands[0]
        trial = {n: (max(1, c // 2) if group_of[n] == gk else c) for n, c in counts.items()}
        m = _measure(ml, trial, batch_size)
        if max(m[2]) <= cap:
            counts, (bd, size, ws) = trial, m
        else:
            failed.add(gk)
    # a halving that breaks the budget can still pay: the layers owning the most nodes are halved
    # once more and what no longer fits is split again (they stay as halved), kept if the graph shrinks
    nodes = len(ws)
    for gk in sorted(
        {group_of[n] for n, c in counts.items() if c > 1 and not n.endswith(HEADS_KEY)},
        key=lambda k: (-owned.get(k, 0), k),
    )[:3]:
        if caps.out_of_time():
            break
        names = frozenset(n for n in counts if group_of[n] == gk)
        trial = {n: (max(1, c // 2) if n in names else c) for n, c in counts.items()}
        repaired, stopped = _double_until_fit(ml, trial, cap, batch_size, caps, blocks, scale, names, nodes * scale)
        m = _measure(ml, repaired, batch_size)
        if not stopped and max(m[2]) <= cap and len(m[2]) < nodes:
            counts, nodes = repaired, len(m[2])
    return {k: v for k, v in counts.items() if v > 1}


def _fits(ml, counts, cap, batch_size) -> bool:
    return max(_measure(ml, counts, batch_size)[2]) <= cap


def _measure(ml, counts, batch_size):
    """(the nodes, their output bytes, their working sets) of ``ml`` tiled by ``counts``."""
    return _measure_cached(ml, tuple(sorted(counts.items())), batch_size)


@lru_cache(maxsize=4)  # the planner's phases measure the same counts again (the last round of one is the next's start)
def _measure_cached(ml, counts: tuple, batch_size):
    bd = tiled_nodes(ml, dict(counts), batch_size).builder
    size = [nd.output_bytes for nd in bd.nodes]
    return bd, size, [size[v] + sum(size[u] for u in ps) for v, ps in enumerate(bd.preds)]


def _charges(bd, size: list[int], v: int) -> dict[int, int]:
    """Node ``v``'s working set, byte by byte charged to the layer whose tile count sets it.

    Its output goes to its owner; an input read as one tile of a coarser producer to the producer
    (finer producer tiles would shrink it); an input gathered from several tiles of one tensor to
    the reader (its own tile decides how many rows it reads).  Tensors of fixed size (statistics,
    running sums) are charged to no one."""
    owner, nodes = bd.owner, bd.nodes
    charge: dict[int, int] = {}
    if owner[v] is not None:
        charge[owner[v]] = size[v]
    by_tensor: dict[tuple[int, str], list[int]] = {}
    for u in bd.preds[v]:
        if owner[u] is not None and size[u]:
            t = nodes[u].tile
            by_tensor.setdefault((owner[u], t.of if t is not None else nodes[u].name), []).append(u)
    ro = bd.read_owner.get(v, {})
    for (x, _), us in by_tensor.items():
        who = x
        if len(us) > 1:
            who = ro.get(us[0], bd.extent[v])
            if who is None:
                who = x
        charge[who] = charge.get(who, 0) + sum(size[u] for u in us)
    return charge


def _layers_to_split(
    bd, size: list[int], ws: list[int], cap: int, counts: dict[str, int], layers, frozen=frozenset()
) -> list[int]:
    """The layers whose tile counts to double this round, so that working sets over ``cap`` shrink.

    Each node over the cap, the largest first, asks for the layer that can still be split and is
    charged the most of its working set (:func:`_charges`), unless a layer already chosen carries
    enough of its excess (halving that layer's share brings the node under the cap).
    """

    def splittable(li) -> bool:
        lay = layers[li]
        return tileable(lay) and counts.get(lay.name, 1) < rows_of(lay.shape) and lay.name not in frozen

    grow: dict[int, None] = {}
    for v in sorted((v for v in range(len(ws)) if ws[v] > cap), key=lambda v: -ws[v]):
        charge = _charges(bd, size, v)
        excess = ws[v] - cap
        if any(charge.get(li, 0) / 2 >= excess for li in grow):
            continue
        cands = [(c, li) for li, c in charge.items() if splittable(li)]
        if cands:
            grow[max(cands)[1]] = None
    return list(grow)
