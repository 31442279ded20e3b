"""Compiled zoo steps under ``--weights stream``: the weights in ``weights.bin``, the gradients in
``grads.bin``, every convolution, linear and BatchNorm node streaming its records through the staging buffer
(runtime/pk_wstream_zoo.c).  Each run's gradients and updated weights are checked against PyTorch's
zoo_module, and the bytes and transfers the step moved against the schedule's priced weight traffic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poet.cbackend.compiler import compile_program
from poet.cbackend.ir import LoweringError
from poet.cbackend.lower_zoo import lower_zoo, zoo_program
from poet.cbackend.wstore import priced_traffic, weight_files
from poet.graph.tiling import build_tiled
from poet.graph.zoo import DATA, ModelLayers, build_model
from poet.graph.zoo_layers import NetBuilder
from poet.schedule.core import Op, Step
from poet.solve.api import solve
from tests.toolchain import build_cache_dir, require_cc, shared_host_kernels  # noqa: F401  (fixtures)

# every compile here links the kernel libraries built once for the session (toolchain.py)
pytestmark = pytest.mark.usefixtures("shared_host_kernels")


@pytest.fixture(scope="module", autouse=True)
def _cc():
    require_cc()


def _plain_net() -> ModelLayers:
    """Convolutions (3x3, strided, a 1x1 downsample, a residual add), pooling and two linear layers."""
    n = NetBuilder((3, 8, 8))
    x = n.relu("relu1", n.conv("conv1", DATA, 4, 3, 1, 1))
    x = n.maxpool("pool", x, 2, 2)
    y = n.relu("b.relu1", n.conv("b.conv1", x, 6, 3, 2, 1))
    y = n.conv("b.conv2", y, 6, 3, 1, 1)
    sc = n.conv("b.down", x, 6, 1, 2, 0)
    y = n.relu("b.relu2", n.add("b.add", y, sc))
    y = n.avgpool("avgpool", y, n.shape(y)[1])
    y = n.flatten("flatten", y)
    y = n.relu("fc1.relu", n.linear("fc1", y, 6))
    n.linear("fc", y, 5)
    return ModelLayers("mini_plain", n.input_shape, tuple(n.layers))


ROW_TILES = {"conv1": 4, "relu1": 2, "b.conv1": 2, "b.conv2": 2, "fc1": 2}


def _stream_schedule(graph, memory, staging: int, strategy: str = "poet"):
    s = solve(
        graph,
        "m4",
        memory=memory,
        time_limit=5,
        find_min_budgets=False,
        weights="stream",
        staging=staging,
        strategy=strategy,
    )
    assert s.feasible and s.graph.placement == "stream", s.status
    return s


def _run(schedule, tmp_path, layers=None):
    zp = zoo_program(schedule.graph, seed=3, layers=layers)
    r = compile_program(zp, schedule, out=tmp_path / "proj", run=True, check=True, fit_time_limit_s=20)
    assert r.run.ok, r.run.problem()
    assert r.check.ok, "\n".join(r.check.lines())
    wt = r.weight_traffic
    assert wt is not None and wt.moved is not None, r.run.text
    assert wt.moved == wt.priced == priced_traffic(r.schedule), "\n".join(wt.lines())
    assert wt.priced.read_bytes > 0 and wt.priced.write_bytes > 0
    return r


def test_linear_mlp_streams_its_weights_and_moves_exactly_the_priced_bytes(tmp_path):
    # 1,000-B staging: 250 floats a chunk, so chunks split fc1's 785-float records
    s = _stream_schedule(build_model("linear", 2), "100%", 1000)
    r = _run(s, tmp_path)
    assert r.check.worst("grad").relative < 1e-5 and r.check.worst("param").relative < 1e-5
    assert r.project.layout.param_bytes == 0  # no parameter in the image
    assert "moved" in "\n".join(r.lines())


def test_row_tiled_convolutions_stream_their_weights(tmp_path):
    g = build_tiled(_plain_net(), ROW_TILES, 2).graph
    # 25 floats a chunk: every conv record (4x3x3 + 1) is split.  Paging only: the C backend refuses a
    # schedule that recomputes a weight-gradient tile (it adds its share into the gradient file), and
    # whether the 5-s portfolio returns one depends on the load
    s = _stream_schedule(g, "95%", 100, "paging")
    r = _run(s, tmp_path, layers=_plain_net())
    assert {"zoo_ws_conv", "zoo_ws_conv_weight_grad", "zoo_ws_conv_grad_input"} <= set(r.project.tables.kernels)


def test_a_recomputed_tile_reads_its_weights_again(tmp_path):
    L = _plain_net()
    s = _stream_schedule(build_tiled(L, ROW_TILES, 2).graph, "95%", 100, "paging")  # as above
    # recompute the first conv tile that reads streamed weights right after computing it
    at = next(
        i for i, st in enumerate(s.steps) if st.op == Op.COMPUTE and s.graph.nodes[st.node].name.startswith("b.conv1")
    )
    v = s.steps[at].node
    steps = [*s.steps[: at + 1], Step(Op.FREE, v), Step(Op.COMPUTE, v), *s.steps[at + 1 :]]
    s2 = s.with_(steps=tuple(steps))
    r = _run(s2, tmp_path, layers=L)
    once = priced_traffic(s)
    assert r.weight_traffic.moved.read_bytes == once.read_bytes + s.graph.nodes[v].weight_traffic.read_bytes


def test_output_channel_groups_read_their_share(tmp_path):
    L = _plain_net()
    g = build_tiled(L, {"conv1:channels": 2, "relu1:channels": 2, "b.conv2:channels": 2}, 2).graph
    s = _stream_schedule(g, "100%", 64)
    r = _run(s, tmp_path, layers=L)
    # the two groups of conv1 (no bias) read 2 of its 4 records of 3x3x3 each: half the block, twice
    share = [n.weight_traffic.read_bytes for n in s.graph.nodes if n.name.startswith("conv1") and n.kind == "forward"]
    assert len(share) == 2 and sum(share) == 4 * 4 * 27
    assert r.check.ok


def test_weight_files_hold_one_record_per_output_channel():
    rng = np.random.default_rng(0)
    params = {
        "c.weight": rng.standard_normal((3, 2, 3, 3)).astype(np.float32),
        "c.bias": rng.standard_normal(3).astype(np.float32),
        "f.weight": rng.standard_normal((4, 5)).astype(np.float32),
    }
    wf = weight_files(params, ["c", "f"], 64)
    raw = wf.pack(params)
    rec = np.frombuffer(raw, np.float32)
    assert len(raw) == 4 * (3 * 19 + 20)
    assert rec[18] == params["c.bias"][0] and rec[19] == params["c.weight"][1, 0, 0, 0]
    back = wf.unpack(raw)
    assert all(np.array_equal(back[k], params[k]) for k in params)
    with pytest.raises(LoweringError, match="priced for"):
        weight_files(params, ["c", "f"], 64, priced={"c": 4 * 57, "f": 4})


@pytest.mark.parametrize(
    "tiles",
    [
        {"conv1": 4, "bn1": 4, "relu1": 4, "b.conv1": 2, "b.conv2": 4, "b.add": 2, "b.relu2": 2},
        {"conv1:channels": 2, "bn1:channels": 2, "relu1:channels": 2},
    ],
    ids=["rows", "channels"],
)
def test_batchnorm_streams_its_records_and_its_chain_adds_the_gradient(tmp_path, tiles):
    """A ResNet in miniature (BatchNorm, a strided downsample, pooling): BatchNorm's [gamma, beta] records
    are read by its forward and grad-input tiles, its backward statistics chain adds each tile's share
    of the parameter gradients in storage (a read-modify-write after the first)."""
    from tests.test_cbackend_zoo import _small_resnet

    L = _small_resnet()
    s = _stream_schedule(build_tiled(L, tiles, 2).graph, "100%", 64)
    r = _run(s, tmp_path, layers=L)
    assert {"zoo_ws_bn", "zoo_ws_bn_grad"} <= set(r.project.tables.kernels)
    assert r.check.worst("grad").relative < 1e-5


INPUT_GROUPS = {
    "b.relu1:channels": 2,
    "relu1:channels": 2,
}  # grad-input tiles of b.conv2 (and b.conv1, b.down) by channels


def test_input_channel_grad_input_tiles_read_the_whole_block(tmp_path):
    """A grad-input tile of a group of a convolution's input channels: those channels' weights are a segment
    of every output channel's record, so it reads the whole block (priced so) and uses its channels' part."""
    L = _plain_net()
    s = _stream_schedule(build_tiled(L, INPUT_GROUPS, 2).graph, "100%", 100)
    assert {"b.conv1", "b.conv2", "b.down"} <= set(s.graph.weights.dense)
    tiles = [
        n
        for n in s.graph.nodes
        if n.kind == "backward" and n.tile is not None and n.tile.of == "bwd.b.conv2" and n.tile.part == "output"
    ]
    block = 4 * 6 * 6 * 9  # 6 records of 6x3x3 weights (no bias)
    assert len(tiles) == 2 and all(n.tile.axis == "rows,channels" for n in tiles)
    assert all(n.weight_traffic.read_bytes == block and n.weight_traffic.reads == -(-block // 100) for n in tiles)
    r = _run(s, tmp_path, layers=L)
    assert r.check.worst("grad").relative < 1e-5 and r.check.worst("param").relative < 1e-5


def test_what_is_not_streamed_yet_is_refused_with_what_would_work():
    # a graph saved before it recorded its dense layers priced an input-channel tile as a share: solve again
    L = _plain_net()
    s = _stream_schedule(build_tiled(L, {"b.relu1:channels": 2}, 2).graph, "100%", 256)
    old = s.with_(graph=replace(s.graph, weights=replace(s.graph.weights, dense=())))
    with pytest.raises(LoweringError, match="solve it again"):
        lower_zoo(zoo_program(old.graph, layers=L), old)
    odd = s.with_(graph=replace(s.graph, weights=replace(s.graph.weights, dense=("b.conv1",))))
    with pytest.raises(LoweringError, match="not priced from this model"):
        lower_zoo(zoo_program(odd.graph, layers=L), odd)
    # BatchNorm's records of 8 B must not be split between chunks
    n = NetBuilder((3, 8, 8))
    x = n.relu("relu1", n.batchnorm("bn1", n.conv("conv1", DATA, 4, 3, 1, 1)))
    n.linear("fc", n.flatten("flatten", n.avgpool("avgpool", x, 8)), 3)
    bn = ModelLayers("bn_net", n.input_shape, tuple(n.layers))
    s = _stream_schedule(build_tiled(bn, {}, 2).graph, "100%", 260)
    with pytest.raises(LoweringError, match="multiple of 8 B"):
        lower_zoo(zoo_program(s.graph, layers=bn), s)
