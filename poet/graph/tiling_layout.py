"""How a tiled graph splits each layer: tile counts checked and settled before any node is made.

The counts a caller asks for (:func:`poet.graph.tiling.build_tiled`) are wishes:
a count is clipped to the layer's rows, a layer that cannot be split stays whole,
BatchNorm over a split input is split too (its statistics need the tiled pass),
and attention is split only where its scores, softmax and context layers have
the expected shape -- then by query tile, key tile and head group together.
:func:`tile_layout` settles all of that once, so the node builder
(:mod:`poet.graph.tiling_build`) only reads the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .core import GraphError
from .tiling_fusion import fused_activations
from .tiling_ranges import CHANNEL_OPS, channel_splittable, rows_of, split, tileable
from .zoo import DATA, ModelLayers

# counts[f"{context}{HEADS_KEY}"]: heads per attention tile of the attention whose context layer is ``context``
# (default 1: one head per tile); Q, K, V and the context are split by groups of that many heads
HEADS_KEY = ":heads"
# counts[f"{layer}{CHANNELS_KEY}"]: channel groups of a feature-map layer's output, on top of its row tiles
# (default 1: every tile holds all channels); the tiling planner asks for them only where one row is too much
CHANNELS_KEY = ":channels"


@dataclass(frozen=True)
class TileLayout:
    """Per layer of a model, how its output is split; every field always present (empty: nothing of that kind)."""

    tiles: list[int]  # per layer: number of row (token, feature) ranges its output is split into
    attention: dict[int, int]  # context layer of a tiled attention -> its scores layer (softmax follows it)
    head_groups: dict[int, int]  # Q/K/V projection or context layer -> number of head groups its tiles split into
    heads_per_group: dict[int, int]  # the same layers -> heads in each group
    fused: dict[int, tuple[int, int]]  # fused GELU -> (the linear it reads, the linear reading it)
    channels: dict[int, int] = field(default_factory=dict)  # layer -> channel groups of its output (2 or more)

    def channel_ranges(self, i: int, c: int) -> list[tuple[int | None, int | None]]:
        """The channel ranges of layer ``i``'s output tiles (``c`` channels): ``[(None, None)]`` when whole."""
        g = self.channels.get(i, 1)
        return [(None, None)] if g <= 1 else split(c, g)

    @property
    def built_with_context(self) -> set[int]:
        """Scores and softmax layers of a tiled attention: their nodes are made with the context's."""
        return set(self.attention.values()) | {s + 1 for s in self.attention.values()}

    @property
    def after_fused(self) -> dict[int, int]:
        """The linear after a fused GELU -> the GELU (it applies the GELU on the fly)."""
        return {c: g for g, (_, c) in self.fused.items()}


def tile_layout(ml: ModelLayers, counts: dict[str, int]) -> TileLayout:
    """Check ``counts`` (layer name -> tiles, or context name + :data:`HEADS_KEY` -> heads per tile)
    against ``ml`` and settle how every layer is split; a clear :class:`GraphError` if a count is wrong."""
    layers = ml.layers
    L = len(layers)
    contexts = {lay.name for lay in layers if lay.op == "matmul" and lay.heads and len(lay.shape) == 2}
    by_channels = {lay.name + CHANNELS_KEY: i for i, lay in enumerate(layers) if channel_splittable(lay)}
    unknown = sorted(set(counts) - {lay.name for lay in layers} - {c + HEADS_KEY for c in contexts} - set(by_channels))
    names = {lay.name for lay in layers}
    odd = [k for k in unknown if k.endswith(CHANNELS_KEY) and k[: -len(CHANNELS_KEY)] in names]
    if odd:
        raise GraphError(
            f"{odd[0]}: only a feature-map (C, H, W) layer of kind {', '.join(sorted(CHANNEL_OPS))} with more "
            f"than one channel and one row can be split into channel groups"
        )
    if unknown:
        raise GraphError(f"tile counts name layers that {ml.name} does not have: {', '.join(unknown[:5])}")
    for key, n in counts.items():
        if key.endswith(HEADS_KEY):
            heads = next(lay.heads for lay in layers if lay.name == key[: -len(HEADS_KEY)])
            if not isinstance(n, int) or n < 1 or heads % n:
                raise GraphError(f"{key}: heads per attention tile must divide the {heads} heads, got {n!r}")
    channels: dict[int, int] = {}
    for key, n in counts.items():
        if key.endswith(CHANNELS_KEY):
            i = by_channels[key]
            if not isinstance(n, int) or n < 1:
                raise GraphError(f"{key}: channel groups must be an integer >= 1, got {n!r}")
            if min(n, layers[i].shape[0]) > 1:
                channels[i] = min(n, layers[i].shape[0])
    tiles: list[int] = []
    for lay in layers:
        n = counts.get(lay.name, 1)
        if not isinstance(n, int) or n < 1:
            raise GraphError(f"tile count of {lay.name} must be an integer >= 1, got {n!r}")
        n = min(n, rows_of(lay.shape)) if tileable(lay) else 1
        if lay.op == "batchnorm" and lay.inputs[0] != DATA:
            n = max(n, tiles[lay.inputs[0]])  # statistics over a split input need the tiled pass
        tiles.append(n)

    # attention split into tiles: context layer -> scores layer; Q/K/V projections and contexts split by head too
    attention: dict[int, int] = {}
    head_groups: dict[int, int] = {}
    heads_per_group: dict[int, int] = {}
    for i, lay in enumerate(layers):
        if not (
            lay.op == "matmul" and lay.heads and len(lay.shape) == 3 and i + 2 < L and max(tiles[i], tiles[i + 1]) > 1
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
            tiles[i] = tiles[i + 1] = 1
            continue
        attention[i + 2] = i
        per = counts.get(cx.name + HEADS_KEY, 1)
        for x in (*qkv, i + 2):
            head_groups[x] = lay.heads // per
            heads_per_group[x] = per
    fused = fused_activations(layers, tiles)
    return TileLayout(tiles, attention, head_groups, heads_per_group, fused, channels)
