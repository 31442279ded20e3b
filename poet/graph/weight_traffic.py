"""Which weight and gradient bytes each node of a training graph moves when the weights are streamed.

One rule, used by the cost model to price a ``stream`` graph and by the validator to check one; it
reads only what a graph records: node names, kinds, tiles, output bytes, and the parameter bytes of
each layer (:class:`~poet.graph.weights.WeightStore`).  A node belongs to the layer its name (or its
tile's ``of``) names, less the ``bwd.`` prefix of a backward node.  For a layer with ``P`` parameter
bytes, a node covering channels ``a..b`` of ``C`` (its tile's ``channels`` range; all of them
otherwise) uses the share ``P * (b - a) / C`` -- except a grad-input tile of a group of *input* channels
of a dense layer (``WeightStore.dense``: convolution, linear), which uses the whole block: a layer's block
holds one record per output channel, so an input channel's weights are strided (a segment in every
record) and the tile reads every record, as a row tile does -- and:

* every forward computation reads its share of the weights (a statistics pass reads none); a
  backward computation that makes an input gradient (output bytes > 0) reads it too;
* the gradient is made by the layer's ``weight_grad`` tiles, else its backward ``stats`` tiles, else
  its backward nodes: the first of them (in node order) for each share writes it, every later one
  reads, adds to and writes it back (read-modify-write);
* the SGD update, charged to the graph's last node (the end of the step, computed once), reads every
  weight and every gradient and writes every weight, in chunks of half the staging buffer.

A transfer moves at most the staging buffer's bytes, so a share of ``s`` bytes takes
``ceil(s / staging)`` transfers.  Nothing is kept resident across tiles: every use reads (the
minimum; docs/weights.md says what reuse would save).
"""

from __future__ import annotations

from collections.abc import Sequence

from .core import BACKWARD, FORWARD, Tile
from .weights import NO_TRAFFIC, Traffic, WeightStore

CHANNELS = "channels"


WGRAD = ".wgrad"  # the tiling builder's one weight-gradient node of a layer whose grad-input is tiled


def layer_of(name: str, kind: str, tile: Tile | None) -> str:
    """The layer a node computes for (the untiled forward node's name)."""
    base = tile.of if tile is not None else name
    if kind == BACKWARD and base.startswith("bwd."):
        base = base[4:]
        if tile is None and base.endswith(WGRAD):
            base = base[: -len(WGRAD)]
    return base


def part_of(name: str, kind: str, tile: Tile | None) -> str:
    """What part of its layer's work a node does: its tile's part, ``weight_grad`` for the builder's one
    weight-gradient node beside tiled grad-input nodes, else ``output``."""
    if tile is not None:
        return tile.part
    return "weight_grad" if kind == BACKWARD and name.endswith(WGRAD) else "output"


def _channel_range(tile: Tile | None) -> tuple[int, int] | None:
    if tile is None or not tile.start or CHANNELS not in tile.axes:
        return None
    k = tile.axes.index(CHANNELS)
    return tile.start[k], tile.stop[k]


def _chunks(nbytes: int, staging: int) -> int:
    return -(-nbytes // staging) if nbytes else 0


def derive_traffic(nodes: Sequence[tuple[str, str, Tile | None, int]], store: WeightStore) -> tuple[Traffic, ...]:
    """Per node ``(name, kind, tile, output_bytes)``, what one computation of it moves (module docstring)."""
    if not store.streamed or not nodes:
        return tuple(NO_TRAFFIC for _ in nodes)
    params = dict(store.layers)
    stage = store.staging_bytes
    layer = [layer_of(nm, kind, tile) for nm, kind, tile, _ in nodes]
    # the channel count of each (tile's original, part): the largest channel a tile of it reaches
    width: dict[tuple[str, str], int] = {}
    for _, _, tile, _ in nodes:
        r = _channel_range(tile)
        if r is not None:
            key = (tile.of, tile.part)
            width[key] = max(width.get(key, 0), r[1])
    parts: dict[str, set[str]] = {}
    part = [part_of(nm, kind, tile) for nm, kind, tile, _ in nodes]
    for (_, kind, _, _), lay, pt in zip(nodes, layer, part):
        if kind == BACKWARD and lay in params:
            parts.setdefault(lay, set()).add(pt)

    dense = set(store.dense)

    def share(i: int) -> int:
        tile, p = nodes[i][2], params[layer[i]]
        r = _channel_range(tile)
        if r is None or (layer[i] in dense and nodes[i][1] == BACKWARD and part[i] == "output"):
            return p
        return p * (r[1] - r[0]) // width[(tile.of, tile.part)]

    def makes_gradient(i: int) -> bool:
        if nodes[i][1] != BACKWARD:
            return False
        have = parts[layer[i]]
        maker = "weight_grad" if "weight_grad" in have else "stats" if "stats" in have else None
        return part[i] == maker if maker is not None else True

    out: list[Traffic] = []
    written: set[tuple[str, tuple[int, int] | None]] = set()
    for i, (_, kind, tile, out_bytes) in enumerate(nodes):
        if layer[i] not in params or params[layer[i]] == 0:
            out.append(NO_TRAFFIC)
            continue
        b = share(i)
        t = NO_TRAFFIC
        reads_weights = (kind == FORWARD and part[i] != "stats") or (
            kind == BACKWARD and part[i] not in ("weight_grad", "stats") and out_bytes > 0
        )
        if reads_weights:
            t = t + Traffic(read_bytes=b, reads=_chunks(b, stage))
        if makes_gradient(i):
            key = (layer[i], _channel_range(tile))
            if key in written:
                t = t + Traffic(read_bytes=b, reads=_chunks(b, stage))  # read-modify-write
            written.add(key)
            t = t + Traffic(write_bytes=b, writes=_chunks(b, stage))
        out.append(t)
    out[-1] = out[-1] + update_traffic(store)
    return tuple(out)


def update_traffic(store: WeightStore) -> Traffic:
    """The SGD update: read every weight and gradient, write every weight (per layer, in chunks of half
    the staging buffer: it holds a chunk of weights and the chunk of gradients beside it)."""
    half = max(4, store.staging_bytes // 8 * 4)
    n = sum(_chunks(p, half) for _, p in store.layers)
    return Traffic(read_bytes=2 * store.param_bytes, write_bytes=store.param_bytes, reads=2 * n, writes=n)


def traffic_total(traffic: Sequence[Traffic]) -> Traffic:
    return sum(traffic, NO_TRAFFIC) if traffic else NO_TRAFFIC


def staging_default(budget_bytes: int) -> int:
    """The staging buffer when none is given: 1/32 of the budget, at least 256 B, a multiple of 4 B."""
    return max(256, (budget_bytes // 32) // 4 * 4)
