"""The nodes of a tiled training graph: forward tiles, the loss, backward tiles, in creation order.

:class:`TiledGraphBuilder` walks a model's layers once forward and once backward
with a settled :class:`~poet.graph.tiling_layout.TileLayout`, making one node per
tile (see :mod:`poet.graph.tiling` for what the tiles are and why).  It keeps, per
layer, the pieces of its output (``out``) and of the gradient of its output
(``grad_out``), so a tile reads exactly the pieces that overlap the rows it needs.
One method per kind of layer keeps each rule readable on its own.
"""

from __future__ import annotations

import math

from .core import BACKWARD, FORWARD, Node, Tile
from .tiling_attention import attention_backward, attention_forward, head_label
from .tiling_layout import CHANNELS_KEY, TileLayout
from .tiling_ranges import (
    STATS_FLOPS_PER_ELEM,
    WEIGHTED,
    WINDOWED,
    Builder,
    NodeRole,
    Piece,
    Pieces,
    axis_of,
    channelwise,
    halo_of,
    input_rows,
    output_rows_touching,
    overlap,
    rows_of,
    split,
    tileable,
)
from .zoo import DATA, DTYPE_BYTES, SAVES, ModelLayers, loss_flops


class TiledGraphBuilder:
    """Makes the nodes of one model's tiled graph: :meth:`forward`, :meth:`loss`, :meth:`backward`, in that order."""

    def __init__(self, ml: ModelLayers, layout: TileLayout, batch_size: int):
        self.ml = ml
        self.layers = ml.layers
        self.layout = layout
        self.b = batch_size
        self.with_context = layout.built_with_context  # made with their attention
        self.after_fused = layout.after_fused
        self.bd = Builder()
        self.out: list[list[Piece]] = []  # per layer: the pieces of its output
        self.grad_out: list[list[list[Piece]]] = [[] for _ in self.layers]  # per layer: gradient pieces, per reader
        self.fwd_stats: dict[int, int] = {}  # tiled BatchNorm -> the last node of its statistics pass
        self.chained: set[int] = set()  # layers computed as a running reduction over their input's tiles

    # ---------------- sizes and tile metadata ----------------

    def in_shape(self, x: int) -> tuple[int, ...]:
        return self.ml.input_shape if x == DATA else self.layers[x].shape

    def nbytes(self, shape, lo=None, hi=None) -> int:
        """Bytes of a tensor of ``shape`` for the whole batch, or of its rows ``[lo, hi)``."""
        total = DTYPE_BYTES * self.b * math.prod(shape)
        r = rows_of(shape)
        return total if lo is None else total * (hi - lo) // r

    def part_share(self, x: int, p: Piece) -> float:
        """The share of a tensor's heads or channels a piece holds: 1 unless split by heads or channels."""
        if p.clo is None:
            return 1.0
        if x in self.layout.channels:
            return (p.chi - p.clo) / self.in_shape(x)[0]
        return (p.chi - p.clo) / self.layout.head_groups[x]

    def piece_bytes(self, x: int, p: Piece) -> int:
        nb = self.nbytes(self.in_shape(x), p.lo, p.hi)
        if p.clo is None:
            return nb
        # exact: a (C, H, W) tensor's bytes are a multiple of its channels
        return (
            nb * (p.chi - p.clo) // (self.in_shape(x)[0] if x in self.layout.channels else self.layout.head_groups[x])
        )

    def span_tile(self, of: str, t: int, n: int, shape, p: Piece, x: int, **kw) -> Tile:
        """Tile metadata of piece ``p`` of layer ``x``'s tensor (heads in head units, not groups)."""
        if p.clo is None:
            return Tile(of, t, n, axis_of(shape), start=(p.lo,), stop=(p.hi,), **kw)
        if x in self.layout.channels:
            return Tile(of, t, n, "rows,channels", start=(p.lo, p.clo), stop=(p.hi, p.chi), **kw)
        per = self.layout.heads_per_group[x]
        return Tile(of, t, n, "tokens,heads", start=(p.lo, p.clo * per), stop=(p.hi, p.chi * per), **kw)

    def by_channel(self, i: int, p: Piece) -> tuple[int | None, int | None]:
        """The channels a tile of layer ``i`` covering piece ``p`` reads of its (channel-wise) inputs."""
        return (p.clo, p.chi) if p.clo is not None and channelwise(self.layers[i]) else (None, None)

    def is_tiled_output(self, pieces: list[Piece]) -> bool:
        """Whether a layer's output was split into output tiles (not a running reduction or whole)."""
        if len(pieces) <= 1:
            return False
        tile = self.bd.nodes[pieces[0].node].tile
        return tile is not None and tile.part == "output"

    def grad_reads(self, i: int, lo: int, hi: int, clo=None, chi=None) -> list[int]:
        """The nodes holding the gradient of layer ``i``'s output over rows ``[lo, hi)`` (heads ``[clo, chi)``)."""
        return [u for src in self.grad_out[i] for u in overlap(src, lo, hi, clo, chi)]

    def running(self, node: Node, reads: list[int], prev: int | None, role: NodeRole) -> int:
        """One step of a running chain (statistics, partial sums): it also reads the step before it."""
        return self.bd.add(node, reads + ([prev] if prev is not None else []), None, role=role)

    # ---------------- forward ----------------

    def forward(self) -> None:
        """Every layer's output pieces, in layer order."""
        for i in range(len(self.layers)):
            self.out.append(self.forward_layer(i))

    def forward_layer(self, i: int) -> Pieces:
        """The pieces of layer ``i``'s output, made by the rule for its kind (whole when not split)."""
        layout, lay = self.layout, self.layers[i]
        if i in self.with_context:
            return Pieces()
        if i in layout.fused:
            return self.out[layout.fused[i][0]]  # never stored: its consumer applies it on the fly
        xs = [x for x in dict.fromkeys(lay.inputs) if x != DATA]
        R = rows_of(lay.shape)
        flops = self.b * lay.flops
        params = DTYPE_BYTES * lay.params
        if i in self.after_fused:
            flops += self.b * self.layers[self.after_fused[i]].flops  # the fused GELU, element by element
        if i in layout.attention:
            return self.forward_attention(i)
        if i in layout.head_groups:
            return self.forward_by_head(i, xs, flops, params)
        if lay.op == "avgpool" and R == 1 and xs and len(self.out[xs[0]]) > 1:
            return self.forward_global_pool(i, xs[0], flops)
        if layout.tiles[i] > 1 or i in layout.channels:
            return self.forward_tiled(i, xs, flops, params)
        node = Node(lay.name, FORWARD, self.nbytes(lay.shape), flops, params, lay.op)
        v = self.bd.add(
            node,
            [p.node for x in xs for p in self.out[x]],
            i if tileable(lay) else None,
            role=NodeRole("output", i, 0, R),
        )
        return Pieces([Piece(0, R, v)])

    def forward_attention(self, i: int) -> Pieces:
        """Scores, softmax and context of one attention, by head and query tile (context layer ``i``)."""
        s = self.layout.attention[i]
        sc, lay = self.layers[s], self.layers[i]
        return attention_forward(
            self.bd,
            sc,
            self.layers[s + 1],
            lay,
            self.out[sc.inputs[0]],
            self.out[sc.inputs[1]],
            self.out[lay.inputs[1]],
            (self.layout.tiles[s], self.layout.tiles[s + 1]),
            self.b,
            DTYPE_BYTES,
            (s, s + 1),
            self.layout.heads_per_group[i],
        )

    def forward_by_head(self, i: int, xs: list[int], flops: float, params: int) -> Pieces:
        """A Q/K/V projection or context split by token range and head group."""
        lay = self.layers[i]
        R = rows_of(lay.shape)
        heads = self.layout.head_groups[i]
        pieces = Pieces()
        ranges = split(R, self.layout.tiles[i])
        for lo, hi in ranges:
            for h in range(heads):
                t = len(pieces)
                name = f"{lay.name}[{lo}:{hi},{head_label(h, self.layout.heads_per_group[i])}]"
                tile = self.span_tile(lay.name, t, len(ranges) * heads, lay.shape, Piece(lo, hi, -1, h, h + 1), i)
                nb, share = self.nbytes(lay.shape, lo, hi) // heads, flops * (hi - lo) / R / heads
                node = Node(name, FORWARD, nb, share, params if t == 0 else 0, lay.op, tile)
                v = self.bd.add(node, [u for x in xs for u in overlap(self.out[x], lo, hi)], i)
                pieces.append(Piece(lo, hi, v, h, h + 1))
        return pieces

    def forward_global_pool(self, i: int, x: int, flops: float) -> Pieces:
        """Global pooling over a tiled input: a running sum, one step per input tile (rows and channels)."""
        lay = self.layers[i]
        src = self.out[x]
        prev = None
        for t, p in enumerate(src):
            share = flops * (p.hi - p.lo) / rows_of(self.in_shape(x)) * self.part_share(x, p)
            tile = self.span_tile(lay.name, t, len(src), self.in_shape(x), p, x, part="partial")
            node = Node(f"{lay.name}[{t}/{len(src)}]", FORWARD, self.nbytes(lay.shape), share, 0, lay.op, tile)
            role = NodeRole("partial", i, p.lo, p.hi, index=t, count=len(src), clo=p.clo, chi=p.chi)
            prev = self.running(node, [p.node], prev, role)
        self.chained.add(i)
        return Pieces([Piece(0, 1, prev)])

    def forward_tiled(self, i: int, xs: list[int], flops: float, params: int) -> Pieces:
        """A layer split into row ranges (and channel groups), each reading its inputs' rows with halo
        (a channel-wise op only its channels); BatchNorm after its statistics pass."""
        lay = self.layers[i]
        R = rows_of(lay.shape)
        n = self.layout.tiles[i]
        ranges = split(R, n)
        chans = self.layout.channel_ranges(i, lay.shape[0])
        g = len(chans)
        stats_final = self.forward_batchnorm_stats(i, xs, ranges) if lay.op == "batchnorm" else None
        pieces = Pieces()
        for t, (lo, hi) in enumerate(ranges):
            for j, (clo, chi) in enumerate(chans):
                p = Piece(lo, hi, -1, clo, chi)
                rc = self.by_channel(i, p)
                reads = []
                for x in xs:
                    a, z = input_rows(lay, lo, hi, rows_of(self.in_shape(x)))
                    reads += overlap(self.out[x], a, z, *rc)
                if stats_final is not None:
                    reads.append(stats_final)
                k, label = t * g + j, (f"[{t}/{n}]" if g == 1 else f"[{t}/{n},c{j}/{g}]")
                tile = self.span_tile(lay.name, k, n * g, lay.shape, p, i, halo=halo_of(lay))
                nb, share = self.piece_bytes(i, p), flops * (hi - lo) / R * self.part_share(i, p)
                node = Node(f"{lay.name}{label}", FORWARD, nb, share, params if k == 0 else 0, lay.op, tile)
                role = NodeRole("output", i, lo, hi, index=k, count=n * g, clo=clo, chi=chi)
                pieces.append(Piece(lo, hi, self.bd.add(node, reads, i, role=role), clo, chi))
        return pieces

    def forward_batchnorm_stats(self, i: int, xs: list[int], ranges: list[tuple[int, int]]) -> int:
        """BatchNorm in training: a running statistics pass over all tiles before any is normalised."""
        lay = self.layers[i]
        n = len(ranges)
        prev = None
        for t, (lo, hi) in enumerate(ranges):
            tile = Tile(lay.name, t, n, axis_of(lay.shape), part="stats", start=(lo,), stop=(hi,))
            work = STATS_FLOPS_PER_ELEM * self.nbytes(lay.shape, lo, hi) / DTYPE_BYTES
            node = Node(f"{lay.name}.stats[{t}/{n}]", FORWARD, DTYPE_BYTES * 2 * lay.shape[0], work, 0, lay.op, tile)
            reads = [u for x in xs for u in overlap(self.out[x], lo, hi)]
            prev = self.running(node, reads, prev, NodeRole("stats", i, lo, hi, index=t, count=n))
        self.fwd_stats[i] = prev
        return prev

    # ---------------- loss ----------------

    def loss(self) -> None:
        """The loss over the logits (a running sum over their tiles) and its gradient, tile by tile."""
        b = self.b
        logits = len(self.layers) - 1
        lshape = self.layers[logits].shape
        lf, lb = loss_flops(lshape)
        lpieces = self.out[logits]
        if len(lpieces) == 1:
            node = Node("loss", FORWARD, DTYPE_BYTES * b, b * lf, 0, "cross_entropy")
            R = rows_of(lshape)
            loss = self.bd.add(node, [lpieces[0].node], None, role=NodeRole("loss", logits, 0, R))
            node = Node("bwd.loss", BACKWARD, self.nbytes(lshape), b * lb, 0, "cross_entropy")
            v = self.bd.add(node, [loss, lpieces[0].node], logits, role=NodeRole("loss_grad", logits, 0, R, (logits,)))
            self.grad_out[logits].append(Pieces([Piece(0, rows_of(lshape), v)]))
            return
        prev = None
        for t, p in enumerate(lpieces):
            tile = Tile("loss", t, len(lpieces), axis_of(lshape), part="partial", start=(p.lo,), stop=(p.hi,))
            share = b * lf * (p.hi - p.lo) / rows_of(lshape)
            node = Node(f"loss[{t}/{len(lpieces)}]", FORWARD, DTYPE_BYTES * b, share, 0, "cross_entropy", tile)
            role = NodeRole("loss_partial", logits, p.lo, p.hi, index=t, count=len(lpieces))
            prev = self.running(node, [p.node], prev, role)
        loss = prev
        gp = Pieces()
        for t, p in enumerate(lpieces):
            tile = Tile("bwd.loss", t, len(lpieces), axis_of(lshape), start=(p.lo,), stop=(p.hi,))
            nb, share = self.nbytes(lshape, p.lo, p.hi), b * lb * (p.hi - p.lo) / rows_of(lshape)
            node = Node(f"bwd.loss[{t}/{len(lpieces)}]", BACKWARD, nb, share, 0, "cross_entropy", tile)
            role = NodeRole("loss_grad", logits, p.lo, p.hi, (logits,), index=t, count=len(lpieces))
            v = self.bd.add(node, [loss, p.node], logits, role=role)
            gp.append(Piece(p.lo, p.hi, v, p.clo, p.chi))
        self.grad_out[logits].append(gp)

    # ---------------- backward ----------------

    def backward(self) -> None:
        for i in reversed(range(len(self.layers))):
            lay = self.layers[i]
            xs = [x for x in dict.fromkeys(lay.inputs) if x != DATA]
            if i in self.with_context or i in self.layout.fused:
                continue  # a fused GELU's gradient is computed by the grad-input tiles of the linear after it
            if i in self.layout.attention:
                self.backward_attention(i)
            elif len(self.out[i]) > 1 or any(len(self.out[x]) > 1 for x in xs) or i in self.chained:
                self.backward_tiled(i, xs)
            else:
                self.backward_whole(i, xs)

    def backward_attention(self, i: int) -> None:
        """The gradients of Q, K and V of one attention, by head and key or query tile (context layer ``i``)."""
        s = self.layout.attention[i]
        sc, lay = self.layers[s], self.layers[i]
        q, k, v = sc.inputs[0], sc.inputs[1], lay.inputs[1]
        dq, dk, dv = attention_backward(
            self.bd,
            sc,
            self.layers[s + 1],
            lay,
            self.out[q],
            self.out[k],
            self.out[v],
            self.out[i],
            self.grad_out[i],
            (self.layout.tiles[s], self.layout.tiles[s + 1]),
            self.b,
            DTYPE_BYTES,
            (s, s + 1),
            self.layout.heads_per_group[i],
        )
        self.grad_out[q].append(dq)
        self.grad_out[k].append(dk)
        self.grad_out[v].append(dv)

    def backward_whole(self, i: int, xs: list[int]) -> None:
        """One backward node for a layer whose output and inputs are all whole, as in the untiled graph."""
        lay = self.layers[i]
        saves = SAVES[lay.op]
        reads = self.grad_reads(i, 0, rows_of(lay.shape))
        if saves == "input":
            reads += [p.node for x in xs for p in self.out[x]]
        elif saves == "output":
            reads += [self.out[i][0].node]
        v = self.bd.add(
            Node(f"bwd.{lay.name}", BACKWARD, DTYPE_BYTES * self.b * lay.grad_numel, self.b * lay.bwd_flops, 0, lay.op),
            reads,
            i if (tileable(lay) and xs) else None,
            role=NodeRole("backward", i, 0, rows_of(lay.shape), tuple(xs), xs[0] if len(xs) == 1 else None),
        )
        for x in xs:
            self.grad_out[x].append(Pieces([Piece(0, rows_of(self.in_shape(x)), v)]))

    def backward_tiled(self, i: int, xs: list[int]) -> None:
        """Grad-input tiles (after BatchNorm's backward statistics pass) and weight-gradient tiles of layer ``i``."""
        lay = self.layers[i]
        own_tiled = self.is_tiled_output(self.out[i])
        weighted = lay.op in WEIGHTED or lay.op == "batchnorm"
        w_flops = self.b * lay.bwd_weight_flops if weighted else 0.0
        in_flops = self.b * lay.bwd_flops - w_flops
        bstats = self.backward_batchnorm_stats(i, xs, w_flops) if lay.op == "batchnorm" and own_tiled else None
        # grad-input tiles, split like the input they are the gradient of (add: like its own output)
        targets = xs[:1] if lay.op == "add" else xs
        for x in targets:
            self.grad_input_tiles(i, x, xs, in_flops / max(1, len(targets)), len(targets) == 1, bstats)
        if lay.op in WEIGHTED:
            self.weight_grad_tiles(i, xs, w_flops)

    def backward_batchnorm_stats(self, i: int, xs: list[int], w_flops: float) -> int:
        """BatchNorm's backward needs ``sum(dy)`` and ``sum(dy * xhat)`` over all tiles first: a running
        chain, one step per row range of its output (reading every channel group of those rows)."""
        lay = self.layers[i]
        name = f"bwd.{lay.name}"
        ranges = list(dict.fromkeys((p.lo, p.hi) for p in self.out[i]))
        R = rows_of(lay.shape)
        prev = None
        for t, (lo, hi) in enumerate(ranges):
            reads = (
                self.grad_reads(i, lo, hi) + [u for x in xs for u in overlap(self.out[x], lo, hi)] + [self.fwd_stats[i]]
            )
            tile = Tile(name, t, len(ranges), axis_of(lay.shape), part="stats", start=(lo,), stop=(hi,))
            nb, share = DTYPE_BYTES * 2 * lay.shape[0], w_flops * (hi - lo) / R
            node = Node(f"{name}.stats[{t}/{len(ranges)}]", BACKWARD, nb, share, 0, lay.op, tile)
            prev = self.running(node, reads, prev, NodeRole("grad_stats", i, lo, hi, index=t, count=len(ranges)))
        return prev

    def grad_input_tiles(self, i: int, x: int, xs: list[int], share: float, only_target: bool, bstats: int | None):
        """The gradient of layer ``i``'s input ``x``, split like ``x`` (add: like its own output), rows and
        channel groups alike; a channel-wise layer's tile reads only its channels of what it needs.

        After a fused GELU the tiles also multiply by GELU'(x), so they are the gradient of the
        linear before the GELU and are filed under that linear.  ``bstats``: BatchNorm's backward statistics."""
        lay = self.layers[i]
        name = f"bwd.{lay.name}"
        saves = SAVES[lay.op]
        R = rows_of(lay.shape)
        own = self.out[i]
        xr = R if lay.op == "add" else rows_of(self.in_shape(x))
        xp = own if lay.op == "add" else self.out[x]
        held = i if lay.op == "add" else x  # the layer whose output's pieces the tiles follow
        gelu = self.after_fused.get(i)
        if gelu is not None:
            share += self.b * self.layers[gelu].bwd_flops  # dy W^T times GELU'(x), x the linear's saved tile
        ys = tuple(xs) if lay.op == "add" else (x if gelu is None else self.layout.fused[gelu][0],)
        gp = Pieces()
        for t, p in enumerate(xp):
            rc = self.by_channel(i, p) if held in self.layout.channels else (None, None)
            if lay.op == "avgpool" and R == 1:
                dlo, dhi = 0, 1
            elif R == xr or lay.op in WINDOWED:
                dlo, dhi = output_rows_touching(lay, p.lo, p.hi, R)
            else:
                dlo, dhi = 0, R
            reads = self.grad_reads(i, dlo, dhi, *rc)
            if saves == "input" and lay.op not in WEIGHTED:
                a, z = (p.lo, p.hi) if lay.op not in WINDOWED else input_rows(lay, dlo, dhi, xr)
                reads += overlap(self.out[x], a, z, *rc)
            elif saves == "output":
                reads += overlap(own, dlo, dhi, *rc)
            if gelu is not None:
                reads += overlap(self.out[x], p.lo, p.hi)  # GELU's input: the linear's output tiles
            if bstats is not None:
                reads += [self.fwd_stats[i], bstats]
            tile = self.span_tile(name, t, len(xp), self.in_shape(x), p, held, halo=halo_of(lay))
            nb = self.piece_bytes(held, p) if len(xp) > 1 else self.nbytes(self.in_shape(x))
            nm = name if only_target else f"{name}@{self.layers[x].name}"
            nm, tile = (f"{nm}[{t}/{len(xp)}]", tile) if len(xp) > 1 else (nm, None)
            node = Node(nm, BACKWARD, nb, share * (p.hi - p.lo) / xr * self.part_share(held, p), 0, lay.op, tile)
            by_head = p.clo is not None and held not in self.layout.channels
            kind = "grad_input" if gelu is None and not by_head else "other"
            cr = (p.clo, p.chi) if held in self.layout.channels else (None, None)
            role = NodeRole(kind, i, p.lo, p.hi, ys, None if lay.op == "add" else x, t, len(xp), *cr)
            v = self.bd.add(node, reads, i if lay.op == "add" else ys[0], role=role)
            gp.append(Piece(p.lo, p.hi, v, p.clo, p.chi))
        for y in ys:
            self.grad_out[y].append(gp)

    def weight_grad_tiles(self, i: int, xs: list[int], w_flops: float) -> None:
        """Weight gradient: one accumulation step per output tile (input rows with halo + grad-output rows);
        a tile of an output channel group reads every input channel and its group's gradient.

        The gradient lives with the parameters, outside activation RAM, so these nodes output 0 bytes."""
        lay = self.layers[i]
        name = f"bwd.{lay.name}"
        own = self.out[i]
        R = rows_of(lay.shape)
        by_channels = i in self.layout.channels
        for t, p in enumerate(own):
            reads = self.grad_reads(i, p.lo, p.hi, p.clo, p.chi)
            for x in xs:
                a, z = input_rows(lay, p.lo, p.hi, rows_of(self.in_shape(x)))
                reads += overlap(self.out[x], a, z)
            tile = self.span_tile(name, t, len(own), lay.shape, p, i, halo=halo_of(lay), part="weight_grad")
            # a fused GELU is recomputed from the linear's tiles it reads (extra FLOPs, costed)
            gelu = self.after_fused.get(i)
            w_extra = self.b * self.layers[gelu].flops * (p.hi - p.lo) / R if gelu is not None else 0.0
            nm, tile = (f"{name}.wgrad[{t}/{len(own)}]", tile) if len(own) > 1 else (f"{name}.wgrad", None)
            share = w_flops * (p.hi - p.lo) / R * self.part_share(i, p) + w_extra
            plain = gelu is None and (p.clo is None or by_channels)
            cr = (p.clo, p.chi) if by_channels else (None, None)
            role = NodeRole(
                "weight_grad" if plain else "other", i, p.lo, p.hi, index=t, count=len(own), clo=cr[0], chi=cr[1]
            )
            self.bd.add(
                Node(nm, BACKWARD, 0, share, 0, lay.op, tile), reads, None, extent=i, role=role
            )  # rows: the output tile's

    # ---------------- result ----------------

    def used_counts(self) -> dict[str, int]:
        """Layer name -> tiles of its output, for the layers actually split into output tiles (a layer
        split into channel groups too: its row tiles, and ``name:channels`` its channel groups)."""
        out = {}
        for i, lay in enumerate(self.layers):
            if i in self.layout.fused or not self.is_tiled_output(self.out[i]):
                continue
            if i in self.layout.channels:
                out[lay.name] = len({(p.lo, p.hi) for p in self.out[i]})
                out[lay.name + CHANNELS_KEY] = self.layout.channels[i]
            else:
                out[lay.name] = len(self.out[i])
        return out

    def meta(self) -> dict:
        b, ml = self.b, self.ml
        meta = {
            "model": ml.name,
            "batch_size": b,
            "input_shape": [b, *ml.input_shape],
            "dtype_bytes": DTYPE_BYTES,
            "forward_layers": len(self.layers),
        }
        if self.layout.fused:
            meta["fused"] = {self.layers[g].name: self.layers[c].name for g, (_, c) in self.layout.fused.items()}
        return meta
