"""Tiled execution of real modules: tiles computed from slices match autograd within the bound.

A tiled program sums in another order than the whole-tensor kernels, so
gradients are compared with ``loss.backward()`` relative to each parameter's
largest gradient (``GRADIENT_BOUND``), not bit for bit.  Also checked: every
tile kernel reads the rows its window reaches (its halo), the measured peak
with tiles and accumulators stays within the budget, a budget below the tiled
minimum is answered with that minimum, and ``tile="off"`` plans as before.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from numerics import tiled_error  # noqa: E402

import poet  # noqa: E402
from poet.execute import Executor, reference_schedule  # noqa: E402
from poet.execute import tiled_ops as K  # noqa: E402
from poet.execute.tiled import GRADIENT_BOUND, parameter_difference, relative_difference, tile_program  # noqa: E402
from poet.execute.tiled_spatial import reaching_rows  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.graph.windows import window_span  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
F = torch.nn.functional


class ConvZoo(torch.nn.Module):
    """Every spatial family once: strided/padded, grouped and depthwise convs, BN, pools, cat, add."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.grouped = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2, bias=True)
        self.dw = torch.nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False)
        self.pw = torch.nn.Conv2d(16, 8, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)))
        h = F.max_pool2d(h, 3, stride=1, padding=1)
        g = self.dw(F.relu(self.grouped(h)))
        h = F.gelu(self.bn2(self.pw(torch.cat([h, g], 1))) + h)
        h = F.avg_pool2d(h, 2)
        return self.fc(h.mean((2, 3)))


def _model():
    torch.manual_seed(0)
    return ConvZoo().train(), torch.randn(2, 3, 24, 20), torch.randint(0, 5, (2,))


def _autograd(m, x, y):
    ref = copy.deepcopy(m)
    loss = F.cross_entropy(ref(x), y)
    loss.backward()
    return ref, loss


@pytest.mark.parametrize("count", [2, 5])
def test_tiled_conv_families_match_autograd_within_the_bound(count):
    m, x, y = _model()
    prog = export_training_graph(m, (x,), F.cross_entropy, (y,))
    tp, rep = tile_program(prog, count, threshold=0)
    ops = {op for op, _, _ in rep.tiled.values()}
    for fam in (
        "convolution.default",
        "convolution_backward.default",
        "_native_batch_norm_legit_functional",
        "native_batch_norm_backward",
        "max_pool2d_with_indices.default",
        "max_pool2d_with_indices_backward",
        "avg_pool2d.default",
        "avg_pool2d_backward",
        "cat.default",
        "add.Tensor",
        "gelu.default",
        "mean.dim",
    ):
        assert any(fam in op for op in ops), (fam, sorted(ops))
    assert not rep.assembled, rep.assembled  # every tiled tensor is consumed tile by tile
    cg = costed_program(tp, "m4")
    assert sum(nd.tile is not None for nd in cg.nodes) > len(prog.graph)
    ref, ref_loss = _autograd(m, x, y)
    for kind in ("keep", "paging"):
        sched = reference_schedule(cg, kind, every=3)
        res = Executor(tp).run(sched, (x, y), apply=False)
        assert relative_difference(res.loss, ref_loss) <= GRADIENT_BOUND
        for name, p in ref.named_parameters():
            assert relative_difference(res.grads[name], p.grad) <= GRADIENT_BOUND, (kind, name)
        for name, b in ref.named_buffers():
            assert relative_difference(res.buffer_updates[name].float(), b.float()) <= GRADIENT_BOUND, name
        assert res.measured_peak_bytes == res.predicted_peak_bytes <= sched.budget.ram_bytes
        if kind == "paging":
            assert res.bytes_written == sched.totals.bytes_paged_out > 0


@pytest.mark.parametrize(
    "k,s,p,d,groups",
    [(3, 1, 1, 1, 1), (3, 2, 1, 1, 4), (5, 2, 2, 1, 8), (3, 1, 2, 2, 2), (1, 2, 0, 1, 1), (4, 3, 1, 1, 1)],
)
def test_each_tile_reads_the_rows_its_windows_reach(k, s, p, d, groups):
    # a tile computed from exactly the rows window_span/reaching_rows name (halo included, padding outside)
    # equals those rows of the whole op: a smaller halo would differ at the tile's edges
    torch.manual_seed(1)
    x = torch.randn(2, 8, 19, 7)
    w = torch.randn(8, 8 // groups, k, k)
    out = F.conv2d(x, w, None, s, p, d, groups)
    go = torch.randn_like(out)
    gi = torch.nn.grad.conv2d_input(x.shape, w, go, s, p, d, groups)
    H, Ho = x.shape[2], out.shape[2]
    for a, b in [(0, 1), (0, 3), (2, 5), (Ho - 2, Ho)]:
        lo, hi = window_span(a, b, k, s, p, d)
        t = K.tile_conv(
            [x[:, :, max(0, lo) : min(H, hi)]], max(0, -lo), max(0, hi - H), w, None, [s, s], [p, p], [d, d], groups
        )
        assert torch.allclose(t, out[:, :, a:b], atol=1e-5), (a, b)
    for a, b in [(0, 2), (3, 8), (H - 4, H)]:
        o0, o1 = reaching_rows(a, b, k, s, p, d, Ho)
        rs, re = window_span(o0, o1, k, s, p, d) if o1 > o0 else (a, a)
        pieces = [go[:, :, o0:o1]] if o1 > o0 else []
        t = K.tile_conv_input_grad(pieces, rs, re - rs, a, b, list(x.shape), w, [s, s], [p, p], [d, d], groups)
        assert torch.allclose(t, gi[:, :, a:b], atol=1e-5), (a, b)


def test_tile_metadata_records_halo_and_range():
    m, x, y = _model()
    tp, _ = tile_program(export_training_graph(m, (x,), F.cross_entropy, (y,)), 3, threshold=0)
    convs = [nd.tile for nd in tp.graph.nodes if nd.tile is not None and nd.op.endswith("tile_conv")]
    assert convs and all(t.axis == "rows" and t.count == 3 for t in convs)
    dw = [t for t in convs if t.of == "convolution_2"]  # the 5x5 depthwise conv
    assert [t.halo for t in dw] == [2, 2, 2]
    assert [(t.start[0], t.stop[0]) for t in dw] == [(0, 4), (4, 8), (8, 12)]


def _cnn_plan(memory, tile="auto", **kw):
    from poet import demo_models as models

    torch.manual_seed(0)
    m = models.SmallResNet(channels=4, blocks=1).train()
    x, y = torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))
    pl = poet.plan(
        m,
        (x,),
        F.cross_entropy,
        targets=(y,),
        device="m4",
        memory=memory,
        strategy="poet",
        time_limit=20,
        tile=tile,
        **kw,
    )
    return m, x, y, pl


def test_plan_tiles_below_the_untiled_minimum_and_stays_within_budget():
    m, x, y, untiled = _cnn_plan("100%", tile="off")
    lo = untiled.graph.min_ram_bytes()
    fixed = untiled.graph.fixed_ram_bytes
    budget = fixed + (lo - fixed) * 6 // 10
    off = _cnn_plan(budget, tile="off")[3]
    assert not off.feasible and str(lo) in off.schedule.report.message
    m, x, y, pl = _cnn_plan(budget)
    assert pl.feasible and pl.tiling.tiled
    assert pl.tiling.untiled_min_bytes == lo and pl.tiling.tiled_min_bytes <= budget
    text = str(pl)
    assert f"minimum RAM {lo} B untiled, {pl.tiling.tiled_min_bytes} B tiled" in text and "convolution" in text
    ref, ref_loss = _autograd(m, x, y)
    res = pl.run((x,), (y,))
    assert res.measured_peak_bytes <= budget
    assert relative_difference(res.loss, ref_loss) <= GRADIENT_BOUND
    for (name, p), q in zip(ref.named_parameters(), m.parameters()):
        assert relative_difference(q.grad, p.grad) <= GRADIENT_BOUND, name


def test_a_budget_below_the_tiled_minimum_is_answered_with_that_minimum():
    _, _, _, pl = _cnn_plan(1000)
    assert not pl.feasible
    tmin = pl.tiling.tiled_min_bytes
    assert tmin < pl.tiling.untiled_min_bytes
    assert pl.graph.min_ram_bytes() == tmin
    assert str(tmin) in pl.schedule.report.message
    assert f"smallest minimum reached is {tmin} B" in str(pl)


def test_forced_tile_count():
    _, _, _, pl = _cnn_plan("100%", tile=4)
    assert pl.tiling.tiled and pl.tiling.report.count == 4
    assert max(nd.tile.count for nd in pl.graph.nodes if nd.tile is not None) == 4
    with pytest.raises(ValueError, match="at least 2"):
        _cnn_plan("100%", tile=1)


def _gpt(batch):
    from poet import demo_models as models

    torch.manual_seed(0)
    m = models.TinyGPT(vocab=20, d=16, heads=2, layers=1, max_len=12).train()
    ids = torch.randint(0, 20, (batch, 12))
    return m, ids, torch.randint(0, 20, (batch, 12))


def test_tiled_transformer_over_whole_sequences_matches_autograd_within_the_bound():
    # a batch of 2 sequences: tiles of whole sequences, where attention needs no key/value streaming
    # (query tiles of one sequence, keys and values streamed: tests/test_torch_tiled_attention.py)
    from poet.demo_models import lm_loss

    m, ids, y = _gpt(2)
    prog = export_training_graph(m, (ids,), lm_loss, (y,))
    tp, rep = tile_program(prog, 2, threshold=0, min_split=0)
    ops = {op for op, _, _ in rep.tiled.values()}
    for fam in (
        "aten.bmm",
        "_softmax.default",
        "_softmax_backward",
        "addmm",
        "aten.mm",
        "native_layer_norm.",
        "native_layer_norm_backward",
        "embedding.default",
        "embedding_dense_backward",
        "gelu.default",
        "nll_loss_forward",
        "nll_loss_backward",
        "_log_softmax.default",
    ):
        assert any(fam in op for op in ops), (fam, sorted(ops))
    assert "tokens" in {nd.tile.axis for nd in tp.graph.nodes if nd.tile is not None}
    ref = copy.deepcopy(m)
    loss = lm_loss(ref(ids), y)
    loss.backward()
    res = Executor(tp).run(reference_schedule(costed_program(tp, "m4"), "remat", every=4), (ids, y), apply=False)
    assert relative_difference(res.loss, loss) <= GRADIENT_BOUND
    for name, p in ref.named_parameters():
        assert relative_difference(res.grads[name], p.grad) <= GRADIENT_BOUND, name


def _grad_ok(g_tiled, g32, g64) -> bool:
    """Within the bound of autograd's float32 gradient, or (a gradient whose sum cancels, where float32
    autograd is itself inexact) no more than twice as far from the float64 gradient as autograd's."""
    return tiled_error(g_tiled, g32, g64) <= 1


@pytest.mark.parametrize("name", ["dwnet", "gpt"])
def test_plan_trains_a_depthwise_resnet_and_a_causal_transformer_tiled(name):
    from poet import demo_models as models
    from poet.execute.tiled import TRAINED_LOSS_BOUND, TRAINED_PARAM_BOUND

    torch.manual_seed(0)
    if name == "dwnet":
        m, lf = models.DepthwiseResNet(channels=4, blocks=1).train(), F.cross_entropy
        batches = [((torch.randn(2, 3, 16, 16),), (torch.randint(0, 10, (2,)),)) for _ in range(2)]
    else:
        m, lf = models.TinyGPT(vocab=20, d=16, heads=2, layers=1, max_len=24).train(), models.lm_loss
        batches = [((torch.randint(0, 20, (1, 24)),), (torch.randint(0, 20, (1, 24)),)) for _ in range(2)]
    ref, ref64 = copy.deepcopy(m), copy.deepcopy(m).double()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    probe = poet.plan(
        m, *batches[0][0], lf, targets=batches[0][1], memory="100%", strategy="keep-all", tile="off", optimizer=opt
    )
    lo, fixed = probe.graph.min_ram_bytes(), probe.graph.fixed_ram_bytes
    budget = fixed + (lo - fixed) * 7 // 10
    pl = poet.plan(m, *batches[0][0], lf, targets=batches[0][1], memory=budget, time_limit=10, optimizer=opt)
    assert pl.feasible and pl.tiling.tiled, str(pl)
    for step, (x, y) in enumerate(batches):
        res = pl.train_step(x, y, optimizer=None)  # gradients land in .grad; step below
        ropt.zero_grad(set_to_none=True)
        loss = lf(ref(*x), *y)
        loss.backward()
        assert res.measured_peak_bytes <= budget
        assert abs(res.loss.item() - loss.item()) <= TRAINED_LOSS_BOUND * abs(loss.item())
        if step == 0:
            x64 = tuple(t.double() if t.is_floating_point() else t for t in x)
            lf(ref64(*x64), *y).backward()
            for (pn, p), q, r in zip(ref.named_parameters(), m.parameters(), ref64.parameters()):
                assert _grad_ok(q.grad, p.grad, r.grad), pn
        opt.step()
        ropt.step()
        opt.zero_grad(set_to_none=True)
    assert parameter_difference(m.parameters(), ref.parameters()) <= TRAINED_PARAM_BOUND
