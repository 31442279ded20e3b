"""Channel groups: the tiling planner's last resort when one row of a layer is still too much RAM.

Row tiles shrink a node's working set until each tile is one row; a convolution over 64 channels of
32 columns then still reads three 8 KiB input rows and writes an 8 KiB output row.  Splitting the
output (or the gradient a node computes) into channel groups shrinks what the node writes and, for
channel-wise layers (BatchNorm, ReLU, add, pooling), what it reads.  :func:`split_channels` doubles
the channel groups of the layers whose groups set the size of a node over the cap, round by round,
only after the row planner (:mod:`poet.graph.tiling_plan`) can split no further: where rows suffice
the graph stays as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .tiling_layout import CHANNELS_KEY
from .tiling_ranges import channel_splittable, channelwise
from .zoo import ModelLayers

MAX_CHANNEL_ROUNDS = 12  # doubling from 1 group: 4,096 channels at most


def _groups(counts: dict, name: str) -> int:
    return counts.get(name + CHANNELS_KEY, 1)


def _room(lay, counts: dict) -> bool:
    return channel_splittable(lay) and 2 * _groups(counts, lay.name) <= lay.shape[0]


def channel_candidate(bd, size: list[int], v: int, layers, counts: dict) -> int | None:
    """The layer whose channel groups to double so that node ``v``'s working set shrinks, or None.

    First the layer whose groups set ``v``'s own size (its output's layer; for a weight-gradient
    share, the layer it belongs to, whose groups also split the gradient it reads); else, when ``v``
    is a channel group of a channel-wise layer, the layer holding its largest input (its read of it
    shrinks with that layer's groups)."""
    li = bd.owner[v] if bd.owner[v] is not None and size[v] else bd.extent[v]
    if li is not None and _room(layers[li], counts):
        return li
    tile = bd.nodes[v].tile
    role = bd.roles[v]
    if tile is None or "channels" not in tile.axes or role is None or not channelwise(layers[role.layer]):
        return None
    for u in sorted(bd.preds[v], key=lambda u: -size[u]):
        w = bd.owner[u]
        if w is not None and size[u] and _room(layers[w], counts):
            return w
    return None


def split_channels(
    ml: ModelLayers,
    counts: dict[str, int],
    cap: int,
    measure: Callable[[dict], tuple],
    deadline: float,
    node_cap: float,
) -> tuple[dict[str, int], str]:
    """``counts`` with channel groups doubled until every working set fits ``cap``, or no node over it
    can shrink further, or a round did not lower the largest working set (a node channels cannot
    shrink sets it); (the counts with the smallest largest working set, what stopped it early or "").

    ``measure(counts)`` gives (the builder, node output bytes, working sets) of the model tiled so."""
    counts = dict(counts)
    layers = ml.layers
    best = None
    for _ in range(MAX_CHANNEL_ROUNDS * len(layers)):
        bd, size, ws = measure(counts)
        top = max(ws)
        if len(ws) > node_cap and best is not None:
            return best[1], f"about {len(ws):,} nodes, past the planner's cap of {node_cap:,.0f}"
        if top <= cap:
            return counts, ""
        if best is not None and top >= best[0]:
            return best[1], ""  # the last round did not lower the largest working set: more groups will not
        best = (top, dict(counts))
        if time.perf_counter() > deadline:
            return best[1], "the planner's time cap"
        over = {v: channel_candidate(bd, size, v, layers, counts) for v in range(len(ws)) if ws[v] > cap}
        # a node no channel group shrinks sets a floor: splitting others below it gains nothing
        target = max([cap] + [ws[v] for v, li in over.items() if li is None])
        grow = dict.fromkeys(
            li for v, li in sorted(over.items(), key=lambda e: -ws[e[0]]) if li is not None and ws[v] > target
        )
        if not grow:
            return best[1], ""  # nothing over the cap shrinks with more channel groups
        for li in grow:
            counts[layers[li].name + CHANNELS_KEY] = 2 * _groups(counts, layers[li].name)
    return best[1], "its round limit"
