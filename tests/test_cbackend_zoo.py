"""The C backend's zoo front-end: zoo schedules (untiled and tiled) compiled, run on the host and
checked against PyTorch's zoo_module; the builder's node roles; the row-tile kernels against torch;
refusals with clear messages."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from poet.cbackend import hostlib
from poet.cbackend.compiler import compile_program
from poet.cbackend.ir import LoweringError
from poet.cbackend.lower_zoo import is_zoo_graph, lower_zoo, zoo_program
from poet.graph.tiling import build_tiled
from poet.graph.zoo import DATA, ModelLayers, build_model
from poet.graph.zoo_layers import NetBuilder
from poet.schedule.core import Step
from poet.solve.api import solve
from tests.toolchain import build_cache_dir, require, shared_host_kernels  # noqa: F401  (fixtures)

# every compile here links the kernel libraries built once for the session (toolchain.py)
pytestmark = pytest.mark.usefixtures("shared_host_kernels")


@pytest.fixture(scope="module", autouse=True)
def _cc():
    try:
        hostlib.compiler()
    except hostlib.KernelError as e:
        require(str(e))


def _digest(g) -> str:
    d = {"nodes": [repr(n) for n in g.nodes], "edges": sorted(g.edges), "meta": g.meta}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


R18_TILES = {f"layer{s}.{b}.{n}": 32 >> (s - 1) for s in (1, 2, 3, 4) for b in (0, 1) for n in ("conv1", "conv2")}


def test_recording_roles_leaves_every_tiled_graph_unchanged():
    # digests of the graphs main's builder makes (before roles were recorded), pinned
    cases = [
        ("linear", {"fc1": 4, "relu1": 2, "fc2": 3}, 4, "bc5f43b387bdde01"),
        ("vgg16_cifar", {"conv1_1": 8, "relu1_1": 4, "pool1": 2}, 2, "291a6ce30abd8825"),
        ("transformer", {"block0.attn.context": 4, "block0.ffn.fc1": 4}, 1, "0a3a7ec00bb7677a"),
    ]
    for model, counts, b, want in cases:
        assert _digest(build_tiled(model, counts, b).graph) == want, model


def test_untiled_roles_match_build_model():
    for model in ("linear", "resnet18_cifar", "vgg16_cifar"):
        tb = build_tiled(model, {}, 2)
        g = build_model(model, 2)
        assert [n.name for n in tb.graph.nodes] == [n.name for n in g.nodes]
        assert sorted(tb.graph.edges) == sorted(g.edges)
        assert len(tb.roles) == len(g.nodes) and all(r is not None for r in tb.roles)
        kinds = {r.kind for r in tb.roles}
        assert kinds == {"output", "loss", "loss_grad", "backward"}


def test_tiled_roles_name_what_each_node_computes():
    tb = build_tiled("resnet18_cifar", R18_TILES, 1)
    for nd, r in zip(tb.graph.nodes, tb.roles):
        if r.kind == "stats":
            assert nd.name == f"{nd.tile.of}.stats[{r.index}/{r.count}]"
        if r.kind == "weight_grad":
            assert nd.output_bytes == 0 and r.count == nd.tile.count
        if r.kind in ("output", "grad_input") and nd.tile is not None:
            assert (r.lo, r.hi) == (nd.tile.start[0], nd.tile.stop[0])


def _small_resnet() -> ModelLayers:
    """A ResNet in miniature: stem, a basic block with a strided 1x1 downsample, max and global
    average pooling, two linear layers (one tiled by features)."""
    net = NetBuilder((3, 8, 8))
    x = net.conv("conv1", DATA, 4, 3, 1, 1)
    x = net.relu("relu1", net.batchnorm("bn1", x))
    x = net.maxpool("pool", x, 2, 2)  # 8x8 -> 4x4
    y = net.relu("b.relu1", net.batchnorm("b.bn1", net.conv("b.conv1", x, 8, 3, 2, 1)))
    y = net.batchnorm("b.bn2", net.conv("b.conv2", y, 8, 3, 1, 1))
    sc = net.batchnorm("b.downsample.bn", net.conv("b.downsample.conv", x, 8, 1, 2, 0))
    y = net.relu("b.relu2", net.add("b.add", y, sc))
    y = net.avgpool("avgpool", y, net.shape(y)[1])
    y = net.flatten("flatten", y)
    y = net.relu("fc1.relu", net.linear("fc1", y, 6))
    net.linear("fc", y, 5)
    return ModelLayers("mini_resnet", net.input_shape, tuple(net.layers))


def _compile_and_check(graph, tmp_path, layers=None, memory="90%", **kw):
    s = solve(graph, "m4", memory=memory, runtime=None, time_limit=20, find_min_budgets=False)
    assert s.feasible, s.status
    zp = zoo_program(s.graph, seed=3, layers=layers)
    r = compile_program(zp, s, out=tmp_path / "proj", run=True, check=True, fit_time_limit_s=20, **kw)
    assert r.run.ok, r.run.problem()
    assert r.check.ok, "\n".join(r.check.lines())
    return r


def test_linear_untiled_batch4_matches_pytorch(tmp_path):
    r = _compile_and_check(build_model("linear", 4), tmp_path)
    assert r.check.worst("loss").relative < 1e-6
    assert r.check.worst("grad").relative < 1e-5
    assert r.arena_bytes <= r.fit.available


def test_linear_tiled_by_features_matches_pytorch(tmp_path):
    g = build_tiled("linear", {"fc1": 4, "relu1": 4, "fc2": 3, "relu2": 2, "fc3": 2}, 3).graph
    r = _compile_and_check(g, tmp_path, memory="100%")
    kinds = set(r.project.tables.kernels)
    assert {"zoo_linear_weight_grad", "zoo_linear_grad_input", "zoo_relu_grad"} <= kinds
    assert r.check.worst("grad").relative < 1e-5


@pytest.mark.parametrize(
    "tiles", [{}, {"conv1": 4, "bn1": 4, "relu1": 4, "b.conv1": 2, "b.conv2": 4, "b.add": 2, "b.relu2": 2}]
)
def test_small_resnet_matches_pytorch(tmp_path, tiles):
    ml = _small_resnet()
    g = build_tiled(ml, tiles, 2).graph
    r = _compile_and_check(g, tmp_path, layers=ml, memory="100%")
    assert r.check.worst("grad").relative < 1e-4
    if tiles:
        kinds = set(r.project.tables.kernels)
        assert {"zoo_bn_stats", "zoo_bn_grad_stats", "zoo_conv_weight_grad", "zoo_avgpool_partial"} <= kinds


def test_schedule_of_another_graph_is_refused():
    g = build_model("linear", 4)
    s = solve(g, "m4", memory="100%", runtime=None, time_limit=10, find_min_budgets=False)
    zp = zoo_program(s.graph)
    other = zoo_program(build_model("linear", 2))
    with pytest.raises(LoweringError, match="another|match"):
        lower_zoo(other, s)
    assert is_zoo_graph(s.graph) and zp.batch_size == 4
    bad = build_model("linear", 4)
    bad = type(bad)(bad.name, bad.nodes, bad.edges, {**bad.meta, "model": "no_such_model"})
    assert not is_zoo_graph(bad)
    with pytest.raises(LoweringError, match="names no zoo model"):
        zoo_program(bad)


def test_loss_over_tiled_logits_is_refused_naming_the_layer():
    g = build_tiled("linear", {"fc5": 2}, 2).graph
    with pytest.raises(LoweringError, match="fc5"):
        lower_zoo(zoo_program(g))


def test_recomputing_a_weight_gradient_tile_is_refused(tmp_path):
    ml = _small_resnet()
    g = build_tiled(ml, {"conv1": 4, "bn1": 4, "relu1": 4}, 1).graph
    s = solve(g, "m4", memory="100%", runtime=None, time_limit=10, find_min_budgets=False)
    zp = zoo_program(s.graph, layers=ml)
    kp = lower_zoo(zp, s)
    acc = {nd.node for nd in kp.nodes if nd.accumulates}
    assert acc, "a tiled conv has accumulating weight-gradient tiles"
    steps = list(s.steps)
    at = next(i for i, st in enumerate(steps) if st.op == "compute" and st.node in acc)
    v = steps[at].node
    steps[at + 1 : at + 1] = [Step("free", v), Step("compute", v)]
    from poet.schedule.validate import validate

    s2 = s.with_(steps=tuple(steps), totals=validate(s.graph, tuple(steps), s.budget))
    with pytest.raises(LoweringError, match="again"):
        compile_program(zp, s2, out=tmp_path / "p")


# ---------------------------------------------------------------- kernels against torch, on tiles


def _pieces(t: torch.Tensor, cuts) -> tuple[list, list]:
    """``t`` (B, C, R, W) as separate contiguous pieces at row ``cuts``, and the source scalars."""
    bounds = [0, *cuts, t.shape[2]]
    ps = [t[:, :, a:b].contiguous() for a, b in zip(bounds, bounds[1:])]
    return ps, [1, len(ps), *(v for a in bounds[:-1] for v in (a, 0))]


def test_conv_tile_with_halo_and_its_gradients_match_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 9, 7, generator=g)
    w = torch.randn(5, 3, 3, 3, generator=g)
    bias = torch.randn(5, generator=g)
    ref = torch.nn.functional.conv2d(x, w, bias, stride=2, padding=1)  # 5 x 4 output rows
    pieces, sc = _pieces(x, [2, 5, 6])
    y = torch.empty(2, 5, 2, 4)  # output rows [1, 3): input rows 1..5 with the window
    hostlib.call("zoo_conv", [w, bias, *pieces], [y], [2, 1, 1, 9, *sc])
    assert torch.allclose(y, ref[:, :, 1:3], atol=1e-5)
    dy = torch.randn(ref.shape, generator=g)
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    torch.nn.functional.conv2d(xr, wr, None, stride=2, padding=1).backward(dy)
    dpieces, dsc = _pieces(dy, [1, 3])
    dx = torch.empty(2, 3, 4, 7)  # input rows [3, 7)
    hostlib.call("zoo_conv_grad_input", [w, *dpieces], [dx], [2, 1, 3, 5, *dsc])
    assert torch.allclose(dx, xr.grad[:, :, 3:7], atol=1e-5)
    dw, db = torch.zeros_like(w), torch.zeros(5)
    for lo, hi in ((0, 2), (2, 5)):  # two weight-gradient tiles accumulate
        hostlib.call("zoo_conv_weight_grad", [*pieces, *dpieces], [dw, db], [2, 1, lo, hi, 9, 1, *sc, *dsc])
    assert torch.allclose(dw, wr.grad, atol=1e-4)
    assert torch.allclose(db, dy.sum((0, 2, 3)), atol=1e-5)


def test_batchnorm_statistics_chain_and_backward_match_torch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 6, 5, generator=g) * 3 + 10  # a large mean: the chain must not cancel
    gamma, beta = torch.rand(4, generator=g) + 0.5, torch.randn(4, generator=g)
    cuts = [(0, 1), (1, 4), (4, 6)]
    prev = None
    for lo, hi in cuts:
        out = torch.empty(4, 2)
        ps, sc = _pieces(x[:, :, lo:hi], [])
        sc[2] = lo  # the piece's first row (its first channel: 0)
        hostlib.call("zoo_bn_stats", [prev, *ps], [out], [lo, hi, *sc])
        prev = out
    var, mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    assert torch.allclose(prev[:, 0], mean, rtol=1e-6)
    assert torch.allclose(prev[:, 1] / (2 * 6 * 5), var, rtol=1e-5)
    xr = x.clone().requires_grad_(True)
    gr, br = gamma.clone().requires_grad_(True), beta.clone().requires_grad_(True)
    y = torch.nn.functional.batch_norm(xr, None, None, gr, br, training=True, eps=1e-5)
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    xs, xsc = _pieces(x, [1, 4])
    ys = torch.empty(2, 4, 3, 5)
    hostlib.call("zoo_bn", [gamma, beta, prev, *xs], [ys], [1, 6, 1e-5, *xsc])
    assert torch.allclose(ys, y.detach()[:, :, 1:4], atol=1e-5)
    # the gradient read from two readers (two groups), summed
    d1, d2 = dy * 0.25, dy * 0.75
    p1, s1 = _pieces(d1, [3])
    p2, s2 = _pieces(d2, [2, 5])
    two = [2, *s1[1:], *s2[1:]]
    bprev = None
    dgamma, dbeta = torch.empty(4), torch.empty(4)
    for k, (lo, hi) in enumerate(cuts):
        out = torch.empty(4, 2)
        gs = [dgamma, dbeta] if k == len(cuts) - 1 else [None, None]
        hostlib.call("zoo_bn_grad_stats", [bprev, prev, *p1, *p2, *xs], [out, *gs], [lo, hi, 6, 1e-5, *two, *xsc])
        bprev = out
    assert torch.allclose(dgamma, gr.grad, atol=1e-4) and torch.allclose(dbeta, br.grad, atol=1e-4)
    dx = torch.empty(2, 4, 2, 5)
    hostlib.call("zoo_bn_grad", [gamma, prev, bprev, *p1, *p2, *xs], [dx, None, None], [4, 6, 1e-5, *two, *xsc])
    assert torch.allclose(dx, xr.grad[:, :, 4:6], atol=1e-4)


def test_maxpool_tile_gradient_matches_torch():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 2, 7, 7, generator=g)
    xr = x.clone().requires_grad_(True)
    y = torch.nn.functional.max_pool2d(xr, 3, 2, 1)
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    xs, xsc = _pieces(x, [3])
    yt = torch.empty(1, 2, 2, 4)
    hostlib.call("zoo_maxpool", [*xs], [yt], [3, 2, 1, 1, 7, *xsc])
    assert torch.equal(yt, y.detach()[:, :, 1:3])
    dys, dsc = _pieces(dy, [2])
    dx = torch.empty(1, 2, 3, 7)
    hostlib.call("zoo_maxpool_grad", [*xs, *dys], [dx], [3, 2, 1, 2, 7, 4, *xsc, *dsc])
    assert torch.allclose(dx, xr.grad[:, :, 2:5], atol=1e-6)


def test_cross_entropy_kernels_match_torch():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 7, generator=g) * 4
    lab = torch.tensor([0, 6, 3])
    zr = z.clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(zr, lab)
    loss.backward()
    zs = z.reshape(3, 1, 7, 1)
    per, tot = torch.empty(3), torch.empty(1)
    hostlib.call("zoo_cross_entropy", [zs, lab], [per, tot], [7, 1, 1, 0, 0])
    assert abs(float(tot) - loss.item()) < 1e-6 * abs(loss.item())
    dz = torch.empty(3, 1, 4, 1)
    hostlib.call("zoo_cross_entropy_grad", [zs, lab], [dz], [3, 7, 1, 1, 0, 0])
    assert torch.allclose(dz.reshape(3, 4), zr.grad[:, 3:7], atol=1e-7)
    with pytest.raises(hostlib.KernelError):
        hostlib.call("zoo_cross_entropy", [zs, torch.tensor([0, 7, 1])], [per, tot], [7, 1, 1, 0, 0])


def test_the_example_batch_is_generated_reproducibly():
    zp = zoo_program(build_model("linear", 4), seed=5)
    (x1, y1), (x2, y2) = zp.example_batch, zp.example_batch
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert x1.shape == (4, 784) and y1.dtype == np.int64 and y1.max() < 10


def test_poet_compile_takes_a_zoo_schedule_without_model(tmp_path, capsys):
    from poet.cli import main
    from poet.schedule.io import save_schedule

    s = solve(build_model("linear", 2), "m4", memory="100%", runtime=None, time_limit=10, find_min_budgets=False)
    save_schedule(s, tmp_path / "s.json")
    rc = main(["compile", "--schedule", str(tmp_path / "s.json"), "--out", str(tmp_path / "c"), "--check", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "against PyTorch: match within the bounds" in out
