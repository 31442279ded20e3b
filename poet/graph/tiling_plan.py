"""Choosing tile counts: split only the layers that must be split, as coarsely as fits the RAM budget.

The lower bound on RAM of any schedule is the largest working set: a node's
output plus all its inputs, plus fixed RAM.  :func:`plan_tiling` starts from
the untiled graph and, while some node's working set exceeds the budget, gives
more tiles to the layer that owns the largest tensor in that working set
(its own output, an input, or the gradient it produces), doubling its count
each round so that neighbouring layers' tiles stay aligned.  It stops when everything fits or nothing that is too
big can be split further; the largest working set then left is the *tiled
minimum*, the smallest budget tiling can reach, and ``limit`` names the node
that sets it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .core import Graph, GraphError
from .tiling import build_tiled, rows_of, tileable
from .zoo import build_model, model_layers

TILE_OFF = "off"
TILE_AUTO = "auto"
MAX_ROUNDS = 200
MAX_NODES = 60_000  # auto tiling stops refining past this many nodes: no solver answers in minutes beyond it
MAX_PLAN_SECONDS = 60.0  # ... or after this long


TILE_HELP = (
    "operator tiling when no layer fits the RAM budget whole: auto (default: split only the layers that "
    "must be split, as coarsely as fits), off (never; today's untiled answer), or N (split every layer "
    "that can be split into N tiles); see docs/tiling.md"
)


def add_tile_option(group) -> None:
    """The shared ``--tile`` option of solve / plan / train / sweep (an argparse parser or group)."""
    group.add_argument("--tile", default=TILE_AUTO, metavar="auto|off|N", help=TILE_HELP)


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


def parse_tile_option(value) -> str:
    """``off``, ``auto`` or a positive integer count (as a string); raises GraphError otherwise."""
    v = str(value).strip().lower() if value is not None else TILE_AUTO
    if v in (TILE_OFF, TILE_AUTO):
        return v
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1 or str(n) != v:
        raise GraphError(
            f"--tile {value!r}: give off (never tile), auto (tile only what the RAM budget needs; "
            f"the default) or a tile count such as 4"
        )
    return str(n)


def _limit_text(g: Graph, ws: list[int], fixed: int) -> str:
    i = max(range(len(ws)), key=ws.__getitem__)
    return f"{g.nodes[i].name} (output plus inputs {ws[i] + fixed} B with fixed RAM)"


def plan_tiling(
    model: str, budget_bytes: int, *, batch_size: int = 1, fixed_ram_bytes: int = 0, tile: str | int = TILE_AUTO
) -> TilingPlan:
    """The graph of zoo ``model`` to schedule within ``budget_bytes`` of RAM.

    ``tile="auto"``: untiled when it fits, else only the layers that must be
    split, as coarsely as fits; ``"off"``: never tiled; an integer ``N``: every
    layer that can be split is split into ``min(N, its rows)`` tiles.
    """
    mode = parse_tile_option(tile)
    ml = model_layers(model)
    g0 = build_model(model, batch_size)
    ws0 = working_sets(g0)
    untiled_min = fixed_ram_bytes + max(ws0)
    base = {
        "model": model,
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
    counts: dict[str, int] = {}
    best = None
    capped = False
    t0 = time.perf_counter()
    cap = budget_bytes - fixed_ram_bytes
    for _ in range(MAX_ROUNDS):
        tb = build_tiled(ml, counts, batch_size)
        g = tb.graph
        ws = working_sets(g)
        top = max(ws)
        if best is None or top < best[0]:
            best = (top, tb, ws)
        if top <= cap:
            break
        if len(g) > MAX_NODES or time.perf_counter() - t0 > MAX_PLAN_SECONDS:
            capped = True
            break
        size = [nd.output_bytes for nd in g.nodes]
        grow = set()
        for v, w in enumerate(ws):
            if w <= cap:
                continue
            cands = [
                (size[u], tb.owner[u])
                for u in (v, *g.preds[v])
                if tb.owner[u] is not None
                and counts.get(layers[tb.owner[u]].name, 1) < rows_of(layers[tb.owner[u]].shape)
                and tileable(layers[tb.owner[u]])
            ]
            if cands:
                grow.add(max(cands)[1])
        if not grow:
            break
        for li in grow:
            # doubling keeps the tiles of neighbouring layers aligned (rows and tokens are mostly powers
            # of two), so a tile reads one tile of its input plus the halo, not two straddled ones
            c = counts.get(layers[li].name, 1)
            counts[layers[li].name] = min(rows_of(layers[li].shape), 2 * c)
    _, tb, ws = best
    plan = done(tb.graph, tb.counts, ws)
    if capped and not plan.fits:
        plan = TilingPlan(
            **{
                **plan.__dict__,
                "limit": f"the graph's size: auto tiling stops past {MAX_NODES:,} "
                f"nodes or {MAX_PLAN_SECONDS:.0f} s of planning (largest "
                f"working set so far: {plan.limit}; --tile N splits finer)",
            }
        )
    return plan
