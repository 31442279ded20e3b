"""Channel groups on top of row tiles: the planner asks for them only where rows are not enough (today's
plans keep their graphs, digest for digest), the tiles of a group add up to the layer (FLOPs and
bytes), each tile reads what its kind needs (a convolution every input channel, a channel-wise layer
only its own), and wrong counts are refused with a clear message."""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict

import pytest

from poet.graph.core import GraphError
from poet.graph.tiling import build_tiled
from poet.graph.tiling_layout import CHANNELS_KEY
from poet.graph.tiling_plan import plan_tiling, working_sets
from poet.graph.tiling_ranges import CHANNEL_OPS, rows_of
from poet.graph.zoo import DATA, ModelLayers, model_layers
from poet.graph.zoo_layers import NetBuilder


def _digest(g) -> str:
    d = {"nodes": [repr(n) for n in g.nodes], "edges": sorted(g.edges), "meta": g.meta}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# the tiled graphs of today's plans (before channel groups existed), pinned
TODAY = [
    ("resnet18_cifar", 32768, "fd1d440745558b57"),
    ("resnet18_cifar", 262144, "eb08ff1d544e887c"),
    ("vgg16_cifar", 65536, "a2d47c9b98c0acf0"),
    ("transformer", 262144, "8444f6c378988e52"),
]


@pytest.mark.parametrize(("model", "budget", "want"), TODAY)
def test_plans_where_rows_suffice_keep_their_graphs(model, budget, want):
    p = plan_tiling(model, budget)
    assert p.fits and not any(k.endswith(CHANNELS_KEY) for k in p.counts)
    assert _digest(p.graph) == want


def test_channels_are_split_only_where_one_row_is_too_much():
    ml = model_layers("resnet18_cifar")
    p = plan_tiling("resnet18_cifar", 31000)
    assert p.fits and p.tiled_min_bytes == max(working_sets(p.graph)) == 28672 <= 31000
    split = {k[: -len(CHANNELS_KEY)]: v for k, v in p.counts.items() if k.endswith(CHANNELS_KEY)}
    assert split and set(split.values()) == {2}
    by_name = {lay.name: lay for lay in ml.layers}
    for name in split:
        lay = by_name[name]
        assert lay.op in CHANNEL_OPS
        assert p.counts[name] == rows_of(lay.shape), f"{name}: channels split before its rows were single"
    assert p.graph.meta["tiles"] == p.counts  # what zoo_program builds the graph again from
    # below what channels can reach, the tiled minimum is answered (a 512-channel BatchNorm's backward
    # statistics step reads two 8-KiB rows and three 4-KiB statistics: channel groups do not split it)
    low = plan_tiling("resnet18_cifar", 16384)
    assert not low.fits and low.tiled_min_bytes == 28672


def _net() -> ModelLayers:
    """Two 3x3 convolutions with BatchNorm and ReLU, a residual add, global pooling and a classifier."""
    net = NetBuilder((3, 6, 6))
    x = net.relu("relu1", net.batchnorm("bn1", net.conv("conv1", DATA, 8, 3, 1, 1)))
    y = net.batchnorm("bn2", net.conv("conv2", x, 8, 3, 1, 1))
    y = net.relu("relu2", net.add("add", y, x))
    y = net.flatten("flatten", net.avgpool("pool", y, net.shape(y)[1]))
    net.linear("fc", y, 4)
    return ModelLayers("chan_net", net.input_shape, tuple(net.layers))


ROWS = {n: 3 for n in ("conv1", "bn1", "relu1", "conv2", "bn2", "add", "relu2")}
GROUPS = {f"{n}{CHANNELS_KEY}": g for n, g in (("conv1", 2), ("relu1", 4), ("conv2", 2), ("bn2", 2), ("add", 4))}


def _per_original(g):
    out = defaultdict(lambda: [0.0, 0])
    for nd in g.nodes:
        key = (nd.tile.of, nd.tile.part) if nd.tile is not None else (nd.name, "whole")
        out[key][0] += nd.flops
        out[key][1] += nd.output_bytes
    return out


def test_channel_tiles_add_up_to_the_row_tiles_and_the_layer():
    ml, b = _net(), 2
    rows = build_tiled(ml, ROWS, b).graph
    both = build_tiled(ml, {**ROWS, **GROUPS}, b)
    g = both.graph
    assert both.counts == {**ROWS, **GROUPS}
    a, c = _per_original(rows), _per_original(g)
    assert a.keys() == c.keys()
    for k in a:
        assert math.isclose(a[k][0], c[k][0], rel_tol=1e-12), k
        assert a[k][1] == c[k][1], k
    layers = {lay.name: lay for lay in ml.layers}
    names = [nd.name for nd in g.nodes]
    assert len(set(names)) == len(names)
    for name in ("conv1", "relu1", "conv2", "bn2", "add"):
        tiles = [nd for nd in g.nodes if nd.tile is not None and nd.tile.of == name and nd.tile.part == "output"]
        lay = layers[name]
        c_n, h, w = lay.shape
        assert math.isclose(sum(nd.flops for nd in tiles), b * lay.flops, rel_tol=1e-12)
        cells = set()
        for nd in tiles:
            t = nd.tile
            assert t.axis == "rows,channels" and t.count == len(tiles)
            (lo, c0), (hi, c1) = t.start, t.stop
            assert nd.output_bytes == 4 * b * (c1 - c0) * (hi - lo) * w
            cells |= {(r, c) for r in range(lo, hi) for c in range(c0, c1)}
        assert len(cells) == h * c_n  # the grid covered, each cell once (bytes add up above)


def _tile(g, v):
    t = g.nodes[v].tile
    return (t.start[0], t.stop[0], t.start[1], t.stop[1]) if t is not None and "channels" in t.axes else None


def test_a_convolution_group_reads_every_channel_a_channel_wise_one_its_own():
    g = build_tiled(_net(), {**ROWS, **GROUPS}, 1).graph
    idx = {nd.name: v for v, nd in enumerate(g.nodes)}
    conv = idx["conv2[1/3,c1/2]"]  # rows [2, 4) of 6, channels [4, 8): input rows [1, 5) of relu1, all 8 channels
    read = [_tile(g, u) for u in g.preds[conv] if g.nodes[u].name.startswith("relu1[")]
    assert {c for *_, c0, c in read} == {2, 4, 6, 8} and {(lo, hi) for lo, hi, _, _ in read} == {(0, 2), (2, 4), (4, 6)}
    bn = idx["bn2[1/3,c0/2]"]  # channels [0, 4): only conv2's group of those channels, and the statistics
    ins = [g.nodes[u].name for u in g.preds[bn]]
    assert sorted(ins) == ["bn2.stats[2/3]", "conv2[1/3,c0/2]"]
    relu = idx["relu1[2/3,c3/4]"]  # relu1 in 4 groups reads bn1 (not split by channels): its whole row tile
    assert [g.nodes[u].name for u in g.preds[relu]] == ["bn1[2/3]"]
    # a weight-gradient share of conv2's channels [4, 8) reads the gradient of those channels only
    wg = next(
        v for v, nd in enumerate(g.nodes) if nd.name.startswith("bwd.conv2.wgrad") and _tile(g, v) == (2, 4, 4, 8)
    )
    grads = [_tile(g, u) for u in g.preds[wg] if g.nodes[u].name.startswith("bwd.bn2")]
    assert grads and all(t[2:] == (4, 8) for t in grads)


def test_wrong_channel_counts_are_refused():
    ml = _net()
    with pytest.raises(GraphError, match="channel groups"):
        build_tiled(ml, {"fc:channels": 2})
    with pytest.raises(GraphError, match="channel groups must be an integer"):
        build_tiled(ml, {"conv1:channels": 0})
    with pytest.raises(GraphError, match="does not have"):
        build_tiled(ml, {"conv9:channels": 2})
