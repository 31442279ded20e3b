"""Operator tiling as a graph rewrite: a zoo network whose layers are split into tiles.

A layer's output (rows of a feature map, tokens of a sequence) is cut into
``count`` contiguous ranges; every range becomes its own node with a
:class:`~poet.graph.core.Tile` saying where it comes from.  A tile reads only
the tiles of its inputs that overlap the rows it needs (its own rows widened by
the halo that kernel, stride and padding imply), so the working set of the
largest node -- the lower bound on RAM of every schedule -- shrinks with the
tile size.  Halos are *read* (the neighbouring tiles must be resident, paged in
if not), never recomputed, so a tiled convolution costs the same FLOPs; the
costs tiling adds are real and priced by the cost model and solver: every tile
is paged with its own per-operation latency, BatchNorm in training needs a
statistics pass over all tiles before it can normalise any, and reductions
(global pooling, loss over tokens) become running partial sums.

Backward follows the forward tiling: a grad-input tile is computed from the
grad-output tiles its window touches (plus halo) and the saved forward tiles
its derivative needs; a layer with weights gets one ``weight_grad`` node per
output tile that accumulates its share into the weight gradient.  That gradient
lives with the parameters (outside activation RAM, as in the untiled graphs:
``--fixed-ram sgd|adam`` counts it), so those nodes output 0 bytes.  BatchNorm's
backward needs ``sum(dy)`` and ``sum(dy * xhat)`` over all tiles first: a
running ``stats`` chain again.

With every count at 1 the builder reproduces :func:`poet.graph.zoo.build_model`
node for node.  Tiled graphs are put in *streaming* order (a consumer tile runs
as soon as its inputs exist), so a chain of tiled layers is computed tile by
tile as patch-based inference does, and a tile's inputs are usually still in
RAM when it runs.  Attention is tiled by head and query tile with key/value
tiles streamed (:mod:`poet.graph.tiling_attention`).

This module is the entry point; :mod:`poet.graph.tiling_layout` settles how each
layer is split and :mod:`poet.graph.tiling_build` makes the nodes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .core import Graph
from .tiling_build import TiledGraphBuilder
from .tiling_layout import HEADS_KEY, tile_layout
from .tiling_ranges import Builder, NodeRole, rows_of, tileable
from .zoo import ModelLayers, check_batch_size, model_layers

__all__ = [
    "HEADS_KEY",
    "NodeRole",
    "TiledBuild",
    "TiledNodes",
    "build_tiled",
    "rows_of",
    "streaming_order",
    "tileable",
    "tiled_nodes",
]


@dataclass(frozen=True)
class TiledBuild:
    """A tiled graph and, per node, the layer index whose tile count sets its size (None: fixed size)
    and what it computes (``roles``, in the graph's node order; None where the builder records none)."""

    graph: Graph
    owner: tuple[int | None, ...]
    counts: dict[str, int]  # layer name -> tiles of its output (only layers split in 2 or more)
    roles: tuple[NodeRole | None, ...] = ()


@dataclass(frozen=True)
class TiledNodes:
    """The nodes of a tiled graph in creation order, before they are put in streaming order.

    What the tiling planner measures between rounds (a :class:`Graph` and its checks are
    built once, for the plan it returns)."""

    builder: Builder
    counts: dict[str, int]
    meta: dict


def build_tiled(model: str | ModelLayers, counts: dict[str, int], batch_size: int = 1) -> TiledBuild:
    """The training graph of ``model`` with layer ``name`` split into ``counts[name]`` tiles.

    Counts above a layer's rows are clipped to its rows; layers that cannot be
    split (flat vectors, attention matmuls, softmax over scores) stay whole.
    """
    tn = tiled_nodes(model, counts, batch_size)
    bd, used, meta = tn.builder, tn.counts, tn.meta
    name = meta["model"]
    if not used:
        edges = [(u, v) for v, ps in enumerate(bd.preds) for u in ps]
        return TiledBuild(Graph(name, tuple(bd.nodes), tuple(edges), meta), tuple(bd.owner), {}, tuple(bd.roles))
    order = streaming_order(bd.preds)
    pos = {v: k for k, v in enumerate(order)}
    nodes = tuple(bd.nodes[v] for v in order)
    edges = [(pos[u], pos[v]) for v, ps in enumerate(bd.preds) for u in ps]
    meta["tiles"] = used
    return TiledBuild(
        Graph(name, nodes, tuple(edges), meta),
        tuple(bd.owner[v] for v in order),
        used,
        tuple(bd.roles[v] for v in order),
    )


def tiled_nodes(model: str | ModelLayers, counts: dict[str, int], batch_size: int = 1) -> TiledNodes:
    """The nodes and inputs of :func:`build_tiled`'s graph, in the order they are created."""
    ml = model_layers(model) if isinstance(model, str) else model
    b = check_batch_size(batch_size)
    builder = TiledGraphBuilder(ml, tile_layout(ml, counts), b)
    builder.forward()
    builder.loss()
    builder.backward()
    names = [nd.name for nd in builder.bd.nodes]
    if len(set(names)) != len(names):
        raise AssertionError("tiled graph has duplicate node names")
    return TiledNodes(builder.bd, builder.used_counts(), builder.meta())


def streaming_order(preds: list[list[int]]) -> list[int]:
    """A topological order that runs the most recently created ready node first.

    Nodes are created layer by layer, so "latest first" means a consumer tile
    runs as soon as the producer tiles it reads exist: tiles stream through a
    chain of layers (patch by patch) instead of each layer being finished before
    the next starts, which keeps few tiles alive at once.
    """
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for v, ps in enumerate(preds):
        indeg[v] = len(ps)
        for u in ps:
            succ[u].append(v)
    heap = [-v for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        v = -heapq.heappop(heap)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, -w)
    if len(order) != n:
        raise AssertionError("tiled graph has a cycle")
    return order
