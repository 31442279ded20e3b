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
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from .core import BACKWARD, FORWARD, Graph, GraphError, Node, Tile
from .tiling_attention import attention_backward, attention_forward, head_label
from .tiling_fusion import fused_activations
from .tiling_ranges import (
    STATS_FLOPS_PER_ELEM,
    WEIGHTED,
    WINDOWED,
    Builder,
    Piece,
    Pieces,
    axis_of,
    halo_of,
    input_rows,
    output_rows_touching,
    overlap,
    rows_of,
    split,
    tileable,
)
from .zoo import (
    DATA,
    DTYPE_BYTES,
    SAVES,
    ModelLayers,
    check_batch_size,
    loss_flops,
    model_layers,
)

# counts[f"{context}{HEADS_KEY}"]: heads per attention tile of the attention whose context layer is ``context``
# (default 1: one head per tile); Q, K, V and the context are split by groups of that many heads
HEADS_KEY = ":heads"


@dataclass(frozen=True)
class TiledBuild:
    """A tiled graph and, per node, the layer index whose tile count sets its size (None: fixed size)."""

    graph: Graph
    owner: tuple[int | None, ...]
    counts: dict[str, int]  # layer name -> tiles of its output (only layers split in 2 or more)


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
        return TiledBuild(Graph(name, tuple(bd.nodes), tuple(edges), meta), tuple(bd.owner), {})
    order = streaming_order(bd.preds)
    pos = {v: k for k, v in enumerate(order)}
    nodes = tuple(bd.nodes[v] for v in order)
    edges = [(pos[u], pos[v]) for v, ps in enumerate(bd.preds) for u in ps]
    meta["tiles"] = used
    return TiledBuild(Graph(name, nodes, tuple(edges), meta), tuple(bd.owner[v] for v in order), used)


def tiled_nodes(model: str | ModelLayers, counts: dict[str, int], batch_size: int = 1) -> TiledNodes:
    """The nodes and inputs of :func:`build_tiled`'s graph, in the order they are created."""
    ml = model_layers(model) if isinstance(model, str) else model
    b = check_batch_size(batch_size)
    layers = ml.layers
    L = len(layers)
    contexts = {lay.name for lay in layers if lay.op == "matmul" and lay.heads and len(lay.shape) == 2}
    unknown = sorted(set(counts) - {lay.name for lay in layers} - {c + HEADS_KEY for c in contexts})
    if unknown:
        raise GraphError(f"tile counts name layers that {ml.name} does not have: {', '.join(unknown[:5])}")
    n_of = []
    for key, n in counts.items():
        if key.endswith(HEADS_KEY):
            heads = next(lay.heads for lay in layers if lay.name == key[: -len(HEADS_KEY)])
            if not isinstance(n, int) or n < 1 or heads % n:
                raise GraphError(f"{key}: heads per attention tile must divide the {heads} heads, got {n!r}")
    for lay in layers:
        n = counts.get(lay.name, 1)
        if not isinstance(n, int) or n < 1:
            raise GraphError(f"tile count of {lay.name} must be an integer >= 1, got {n!r}")
        n = min(n, rows_of(lay.shape)) if tileable(lay) else 1
        if lay.op == "batchnorm" and lay.inputs[0] != DATA:
            n = max(n, n_of[lay.inputs[0]])  # statistics over a split input need the tiled pass
        n_of.append(n)

    # attention split into tiles: context layer -> scores layer; Q/K/V projections and contexts split by head too
    attention: dict[int, int] = {}
    col_split: dict[int, int] = {}  # layer -> number of head groups its pieces are split into
    per_of: dict[int, int] = {}  # layer -> heads per group
    for i, lay in enumerate(layers):
        if not (
            lay.op == "matmul" and lay.heads and len(lay.shape) == 3 and i + 2 < L and max(n_of[i], n_of[i + 1]) > 1
        ):
            continue
        sm, cx = (layers[i + 1], layers[i + 2]) if i + 2 < L else (None, None)
        qkv = (lay.inputs[0], lay.inputs[1], cx.inputs[1]) if cx is not None else ()
        if (
            sm is None
            or sm.op != "softmax"
            or sm.inputs != (i,)
            or cx.op != "matmul"
            or cx.inputs[0] != i + 1
            or any(x == DATA or layers[x].op != "linear" or len(layers[x].shape) != 2 for x in qkv)
        ):
            n_of[i] = n_of[i + 1] = 1
            continue
        attention[i + 2] = i
        per = counts.get(cx.name + HEADS_KEY, 1)
        for x in (*qkv, i + 2):
            col_split[x] = lay.heads // per
            per_of[x] = per
    skipped = {s for s in attention.values()} | {s + 1 for s in attention.values()}
    fused = fused_activations(layers, n_of)  # GELU -> (the linear before it, the linear after it)
    after_fused = {c: g for g, (_, c) in fused.items()}  # the linear after a fused GELU -> the GELU

    def in_shape(x: int) -> tuple[int, ...]:
        return ml.input_shape if x == DATA else layers[x].shape

    def nbytes(shape, lo=None, hi=None) -> int:
        total = DTYPE_BYTES * b * math.prod(shape)
        r = rows_of(shape)
        return total if lo is None else total * (hi - lo) // r

    def colfrac(x: int, p: Piece) -> float:
        """The share of a tensor's heads (columns) a piece holds: 1 unless split by head."""
        return 1.0 if p.clo is None else (p.chi - p.clo) / col_split[x]

    def piece_bytes(x: int, p: Piece) -> int:
        nb = nbytes(in_shape(x), p.lo, p.hi)
        return nb if p.clo is None else nb * (p.chi - p.clo) // col_split[x]

    def span_tile(of: str, t: int, n: int, shape, p: Piece, x: int, **kw) -> Tile:
        """Tile metadata of piece ``p`` of layer ``x``'s tensor (heads in head units, not groups)."""
        if p.clo is None:
            return Tile(of, t, n, axis_of(shape), start=(p.lo,), stop=(p.hi,), **kw)
        per = per_of[x]
        return Tile(of, t, n, "tokens,heads", start=(p.lo, p.clo * per), stop=(p.hi, p.chi * per), **kw)

    bd = Builder()
    out: list[list[Piece]] = []
    fwd_stats: dict[int, int] = {}
    chained: set[int] = set()  # layers computed as a running reduction over their input's tiles
    consumers: list[list[int]] = [[] for _ in layers]
    for i, lay in enumerate(layers):
        for x in dict.fromkeys(lay.inputs):
            if x != DATA:
                consumers[x].append(i)

    # ---------------- forward ----------------
    for i, lay in enumerate(layers):
        xs = [x for x in dict.fromkeys(lay.inputs) if x != DATA]
        R = rows_of(lay.shape)
        n = n_of[i]
        ax = axis_of(lay.shape)
        flops = b * lay.flops
        params = DTYPE_BYTES * lay.params
        if i in skipped:
            out.append(Pieces())
            continue
        if i in fused:
            out.append(out[fused[i][0]])  # never stored: its consumer applies it to the linear's tiles
            continue
        if i in after_fused:
            flops += b * layers[after_fused[i]].flops  # the fused GELU, element by element on the fly
        if i in attention:
            sc = layers[attention[i]]
            out.append(
                attention_forward(
                    bd,
                    sc,
                    layers[attention[i] + 1],
                    lay,
                    out[sc.inputs[0]],
                    out[sc.inputs[1]],
                    out[lay.inputs[1]],
                    (n_of[attention[i]], n_of[attention[i] + 1]),
                    b,
                    DTYPE_BYTES,
                    (attention[i], attention[i] + 1),
                    per_of[i],
                )
            )
            continue
        if i in col_split:
            heads = col_split[i]
            pieces = Pieces()
            ranges = split(R, n)
            for lo, hi in ranges:
                for h in range(heads):
                    t = len(pieces)
                    p = Piece(lo, hi, -1, h, h + 1)
                    v = bd.add(
                        Node(
                            f"{lay.name}[{lo}:{hi},{head_label(h, per_of[i])}]",
                            FORWARD,
                            nbytes(lay.shape, lo, hi) // heads,
                            flops * (hi - lo) / R / heads,
                            params if t == 0 else 0,
                            lay.op,
                            span_tile(lay.name, t, len(ranges) * heads, lay.shape, p, i),
                        ),
                        [u for x in xs for u in overlap(out[x], lo, hi)],
                        i,
                    )
                    pieces.append(Piece(lo, hi, v, h, h + 1))
            out.append(pieces)
            continue
        if lay.op == "avgpool" and R == 1 and xs and len(out[xs[0]]) > 1:
            # global pooling over a tiled input: a running sum, one step per input tile
            src = out[xs[0]]
            prev = None
            for t, p in enumerate(src):
                tile = Tile(
                    lay.name, t, len(src), axis_of(in_shape(xs[0])), part="partial", start=(p.lo,), stop=(p.hi,)
                )
                prev = bd.add(
                    Node(
                        f"{lay.name}[{t}/{len(src)}]",
                        FORWARD,
                        nbytes(lay.shape),
                        flops * (p.hi - p.lo) / rows_of(in_shape(xs[0])),
                        0,
                        lay.op,
                        tile,
                    ),
                    [p.node] + ([prev] if prev is not None else []),
                    None,
                )
            out.append(Pieces([Piece(0, 1, prev)]))
            chained.add(i)
            continue
        if n == 1:
            reads = [p.node for x in xs for p in out[x]]
            v = bd.add(
                Node(lay.name, FORWARD, nbytes(lay.shape), flops, params, lay.op), reads, i if tileable(lay) else None
            )
            out.append(Pieces([Piece(0, R, v)]))
            continue
        ranges = split(R, n)
        stats_final = None
        if lay.op == "batchnorm":
            c = lay.shape[0]
            prev = None
            for t, (lo, hi) in enumerate(ranges):
                tile = Tile(lay.name, t, n, ax, part="stats", start=(lo,), stop=(hi,))
                reads = [u for x in xs for u in overlap(out[x], lo, hi)] + ([prev] if prev is not None else [])
                prev = bd.add(
                    Node(
                        f"{lay.name}.stats[{t}/{n}]",
                        FORWARD,
                        DTYPE_BYTES * 2 * c,
                        STATS_FLOPS_PER_ELEM * nbytes(lay.shape, lo, hi) / DTYPE_BYTES,
                        0,
                        lay.op,
                        tile,
                    ),
                    reads,
                    None,
                )
            stats_final = fwd_stats[i] = prev
        pieces = Pieces()
        for t, (lo, hi) in enumerate(ranges):
            reads = []
            for x in xs:
                a, z = input_rows(lay, lo, hi, rows_of(in_shape(x)))
                reads += overlap(out[x], a, z)
            if stats_final is not None:
                reads.append(stats_final)
            tile = Tile(lay.name, t, n, ax, halo=halo_of(lay), start=(lo,), stop=(hi,))
            v = bd.add(
                Node(
                    f"{lay.name}[{t}/{n}]",
                    FORWARD,
                    nbytes(lay.shape, lo, hi),
                    flops * (hi - lo) / R,
                    params if t == 0 else 0,
                    lay.op,
                    tile,
                ),
                reads,
                i,
            )
            pieces.append(Piece(lo, hi, v))
        out.append(pieces)

    # ---------------- loss ----------------
    logits = L - 1
    lshape = layers[logits].shape
    lf, lb = loss_flops(lshape)
    lpieces = out[logits]
    if len(lpieces) == 1:
        loss = bd.add(Node("loss", FORWARD, DTYPE_BYTES * b, b * lf, 0, "cross_entropy"), [lpieces[0].node], None)
    else:
        prev = None
        for t, p in enumerate(lpieces):
            tile = Tile("loss", t, len(lpieces), axis_of(lshape), part="partial", start=(p.lo,), stop=(p.hi,))
            prev = bd.add(
                Node(
                    f"loss[{t}/{len(lpieces)}]",
                    FORWARD,
                    DTYPE_BYTES * b,
                    b * lf * (p.hi - p.lo) / rows_of(lshape),
                    0,
                    "cross_entropy",
                    tile,
                ),
                [p.node] + ([prev] if prev is not None else []),
                None,
            )
        loss = prev
    grad_out: list[list[list[Piece]]] = [[] for _ in layers]
    if len(lpieces) == 1:
        v = bd.add(
            Node("bwd.loss", BACKWARD, nbytes(lshape), b * lb, 0, "cross_entropy"), [loss, lpieces[0].node], logits
        )
        grad_out[logits].append(Pieces([Piece(0, rows_of(lshape), v)]))
    else:
        gp = Pieces()
        for t, p in enumerate(lpieces):
            tile = Tile("bwd.loss", t, len(lpieces), axis_of(lshape), start=(p.lo,), stop=(p.hi,))
            v = bd.add(
                Node(
                    f"bwd.loss[{t}/{len(lpieces)}]",
                    BACKWARD,
                    nbytes(lshape, p.lo, p.hi),
                    b * lb * (p.hi - p.lo) / rows_of(lshape),
                    0,
                    "cross_entropy",
                    tile,
                ),
                [loss, p.node],
                logits,
            )
            gp.append(Piece(p.lo, p.hi, v, p.clo, p.chi))
        grad_out[logits].append(gp)

    # ---------------- backward ----------------
    for i in reversed(range(L)):
        lay = layers[i]
        xs = [x for x in dict.fromkeys(lay.inputs) if x != DATA]
        R = rows_of(lay.shape)
        saves = SAVES[lay.op]
        name = f"bwd.{lay.name}"
        bwd_flops = b * lay.bwd_flops

        def dy(lo, hi, clo=None, chi=None, _i=i):
            return [u for src in grad_out[_i] for u in overlap(src, lo, hi, clo, chi)]

        if i in skipped or i in fused:
            continue  # a fused GELU's gradient is computed by the grad-input tiles of the linear after it
        if i in attention:
            sc = layers[attention[i]]
            q, k, v = sc.inputs[0], sc.inputs[1], lay.inputs[1]
            dq, dk, dv = attention_backward(
                bd,
                sc,
                layers[attention[i] + 1],
                lay,
                out[q],
                out[k],
                out[v],
                out[i],
                grad_out[i],
                (n_of[attention[i]], n_of[attention[i] + 1]),
                b,
                DTYPE_BYTES,
                (attention[i], attention[i] + 1),
                per_of[i],
            )
            grad_out[q].append(dq)
            grad_out[k].append(dk)
            grad_out[v].append(dv)
            continue

        tiled = len(out[i]) > 1 or any(len(out[x]) > 1 for x in xs) or i in chained
        if not tiled:
            reads = dy(0, R)
            if saves == "input":
                reads += [p.node for x in xs for p in out[x]]
            elif saves == "output":
                reads += [out[i][0].node]
            v = bd.add(
                Node(name, BACKWARD, DTYPE_BYTES * b * lay.grad_numel, bwd_flops, 0, lay.op),
                reads,
                i if (tileable(lay) and xs) else None,
            )
            for x in xs:
                grad_out[x].append(Pieces([Piece(0, rows_of(in_shape(x)), v)]))
            continue
        own = out[i]
        own_tiled = (
            len(own) > 1 and bd.nodes[own[0].node].tile is not None and bd.nodes[own[0].node].tile.part == "output"
        )
        weighted = lay.op in WEIGHTED or lay.op == "batchnorm"
        w_flops = b * lay.bwd_weight_flops if weighted else 0.0
        in_flops = bwd_flops - w_flops
        bstats = None
        if lay.op == "batchnorm" and own_tiled:
            c = lay.shape[0]
            prev = None
            for t, p in enumerate(own):
                reads = dy(p.lo, p.hi) + [u for x in xs for u in overlap(out[x], p.lo, p.hi)] + [fwd_stats[i]]
                tile = Tile(name, t, len(own), axis_of(lay.shape), part="stats", start=(p.lo,), stop=(p.hi,))
                prev = bd.add(
                    Node(
                        f"{name}.stats[{t}/{len(own)}]",
                        BACKWARD,
                        DTYPE_BYTES * 2 * c,
                        w_flops * (p.hi - p.lo) / R,
                        0,
                        lay.op,
                        tile,
                    ),
                    reads + ([prev] if prev is not None else []),
                    None,
                )
            bstats = prev
        # grad-input tiles, split like the input they are the gradient of (add: like its own output)
        targets = xs[:1] if lay.op == "add" else xs
        for x in targets:
            xr = R if lay.op == "add" else rows_of(in_shape(x))
            xp = own if lay.op == "add" else out[x]
            share = in_flops / max(1, len(targets))
            gelu = after_fused.get(i)
            if gelu is not None:
                share += b * layers[gelu].bwd_flops  # dy W^T times GELU'(x), x the linear's saved tile
            gp = Pieces()
            for t, p in enumerate(xp):
                if lay.op == "avgpool" and R == 1:
                    dlo, dhi = 0, 1
                elif rows_of(lay.shape) == xr or lay.op in WINDOWED:
                    dlo, dhi = output_rows_touching(lay, p.lo, p.hi, R)
                else:
                    dlo, dhi = 0, R
                reads = dy(dlo, dhi)
                if saves == "input" and lay.op not in WEIGHTED:
                    a, z = (p.lo, p.hi) if lay.op not in WINDOWED else input_rows(lay, dlo, dhi, xr)
                    reads += overlap(out[x], a, z)
                elif saves == "output":
                    reads += overlap(own, dlo, dhi)
                if gelu is not None:
                    reads += overlap(out[x], p.lo, p.hi)  # GELU's input: the linear's output tiles
                if lay.op == "batchnorm" and own_tiled:
                    reads += [fwd_stats[i], bstats]
                tile = span_tile(name, t, len(xp), in_shape(x), p, x, halo=halo_of(lay))
                nb = piece_bytes(x, p) if len(xp) > 1 else nbytes(in_shape(x))
                nm = name if len(targets) == 1 else f"{name}@{layers[x].name}"
                v = bd.add(
                    Node(
                        f"{nm}[{t}/{len(xp)}]" if len(xp) > 1 else nm,
                        BACKWARD,
                        nb,
                        share * (p.hi - p.lo) / xr * colfrac(x, p),
                        0,
                        lay.op,
                        tile if len(xp) > 1 else None,
                    ),
                    reads,
                    i if lay.op == "add" else (x if gelu is None else fused[gelu][0]),
                )
                gp.append(Piece(p.lo, p.hi, v, p.clo, p.chi))
            for y in xs if lay.op == "add" else [x if gelu is None else fused[gelu][0]]:
                grad_out[y].append(gp)
        if lay.op in WEIGHTED:
            # weight gradient: one accumulation step per output tile (input rows with halo + grad-output rows)
            for t, p in enumerate(own):
                reads = dy(p.lo, p.hi, p.clo, p.chi)
                for x in xs:
                    a, z = input_rows(lay, p.lo, p.hi, rows_of(in_shape(x)))
                    reads += overlap(out[x], a, z)
                tile = span_tile(name, t, len(own), lay.shape, p, i, halo=halo_of(lay), part="weight_grad")
                # a fused GELU is recomputed from the linear's tiles it reads (extra FLOPs, costed)
                w_extra = b * layers[after_fused[i]].flops * (p.hi - p.lo) / R if i in after_fused else 0.0
                nm = f"{name}.wgrad[{t}/{len(own)}]" if len(own) > 1 else f"{name}.wgrad"
                bd.add(
                    Node(
                        nm,
                        BACKWARD,
                        0,
                        w_flops * (p.hi - p.lo) / R * colfrac(i, p) + w_extra,
                        0,
                        lay.op,
                        tile if len(own) > 1 else None,
                    ),
                    reads,
                    None,
                    extent=i,  # its rows are the layer's output tile's
                )

    names = [nd.name for nd in bd.nodes]
    if len(set(names)) != len(names):
        raise AssertionError("tiled graph has duplicate node names")
    meta = {
        "model": ml.name,
        "batch_size": b,
        "input_shape": [b, *ml.input_shape],
        "dtype_bytes": DTYPE_BYTES,
        "forward_layers": L,
    }
    if fused:
        meta["fused"] = {layers[g].name: layers[c].name for g, (_, c) in fused.items()}
    used = {
        layers[i].name: len(out[i])
        for i in range(L)
        if i not in fused
        and len(out[i]) > 1
        and bd.nodes[out[i][0].node].tile is not None
        and bd.nodes[out[i][0].node].tile.part == "output"
    }
    return TiledNodes(bd, used, meta)


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
