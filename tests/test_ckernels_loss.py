"""The loss C kernels against torch: nll_loss forward and backward (every reduction, a class weight,
ignore_index, 1-D and 2-D inputs), the tiled loss's partial sums and combination, mse_loss.

nll_loss sums in aten's CPU order, so it must equal torch bit for bit (also past 16 and 256 rows,
where aten's cascade carries its partial sums); mse_loss's sum is a different cascade, within a
float32 summation bound."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten


def batch(rows, classes, seed, ignore=-100):
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(rows, classes, generator=g), 1)
    target = torch.randint(0, classes, (rows,), generator=g)
    target[torch.rand(rows, generator=g) < 0.2] = ignore
    return logp, target


@pytest.mark.parametrize("rows", [1, 7, 40, 300])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_forward_and_backward_equal_aten(rows, weighted, reduction):
    logp0, target = batch(rows, 5, seed=rows)
    weight = torch.rand(5, generator=torch.Generator().manual_seed(1)) + 0.5 if weighted else None
    want, want_tw = aten.nll_loss_forward(logp0, target, weight, reduction, -100)
    grad = randn(*want.shape, seed=2)
    want_gi = aten.nll_loss_backward(grad, logp0, target, weight, reduction, -100, want_tw)
    for (nl, logp), (nt_, tgt) in itertools.product(layouts(logp0), layouts(target)):
        out, tw = torch.full(want.shape, float("nan")), torch.tensor(float("nan"))
        hostlib.call("nll_loss", [logp, tgt, weight], [out, tw], [reduction, -100])
        assert torch.equal(out, want) and torch.equal(tw, want_tw), (nl, nt_)
        for no, gi in empty_layouts(logp0.shape):
            hostlib.call("nll_loss_backward", [grad, logp, tgt, weight, want_tw], [gi], [reduction, -100])
            assert torch.equal(gi, want_gi), (nl, nt_, no)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_of_one_row_without_a_batch_dimension(reduction):
    logp, target = torch.log_softmax(randn(6, seed=3), 0), torch.tensor(4)
    want, want_tw = aten.nll_loss_forward(logp, target, None, reduction, -100)
    out, tw = torch.empty(want.shape), torch.empty(())
    hostlib.call("nll_loss", [logp, target, None], [out, tw], [reduction, -100])
    assert torch.equal(out, want) and torch.equal(tw, want_tw)
    gi = torch.empty(6)
    hostlib.call("nll_loss_backward", [torch.tensor(0.7), logp, target, None, tw], [gi], [reduction, -100])
    assert torch.equal(gi, aten.nll_loss_backward(torch.tensor(0.7), logp, target, None, reduction, -100, want_tw))


def test_nll_loss_all_rows_ignored_gives_nan_for_the_mean_as_aten():
    logp, _ = batch(4, 3, seed=4)
    target = torch.full((4,), 2)
    out, tw = torch.empty(()), torch.empty(())
    hostlib.call("nll_loss", [logp, target, None], [out, tw], [1, 2])
    want, want_tw = aten.nll_loss_forward(logp, target, None, 1, 2)
    assert torch.isnan(out) and torch.isnan(want) and torch.equal(tw, want_tw)


def test_nll_loss_target_out_of_range_is_an_error():
    logp, _ = batch(3, 4, seed=5)
    for bad in (4, -2):
        with pytest.raises(hostlib.KernelError, match="bad arguments"):
            outs = [torch.empty(()), torch.empty(())]
            hostlib.call("nll_loss", [logp, torch.tensor([0, bad, 1]), None], outs, [1, -100])


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", [1, 2])
def test_tiled_loss_partials_and_combination_equal_the_python_tiles(weighted, reduction):
    logp, target = batch(50, 4, seed=6)
    weight = torch.rand(4, generator=torch.Generator().manual_seed(7)) + 0.5 if weighted else None
    bounds = [(0, 17), (17, 33), (33, 50)]
    parts = []
    for a, b in bounds:
        want = tiled_ops.tile_nll_partial(logp[a:b], target[a:b], weight, -100)
        got = torch.empty(2, dtype=torch.float64)
        hostlib.call("nll_partial", [logp[a:b], target[a:b], weight], [got], [-100])
        assert torch.equal(got, want)
        parts.append(got)
    want_loss, want_tw = tiled_ops.tile_nll_combine(parts, reduction, torch.float32)
    loss, tw = torch.empty(()), torch.empty(())
    hostlib.call("nll_combine", parts, [loss, tw], [reduction, len(parts)])
    assert torch.equal(loss, want_loss) and torch.equal(tw, want_tw)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 40, 9)])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_mse_loss_and_its_gradient(shape, reduction):
    x0, y0 = randn(*shape, seed=8), randn(*shape, seed=9)
    want = aten.mse_loss(x0, y0, reduction)
    exact = aten.mse_loss(x0.double(), y0.double(), reduction)
    for (nx, x), (ny, y) in itertools.product(layouts(x0), layouts(y0)):
        out = torch.full(want.shape, float("nan"))
        hostlib.call("mse_loss", [x, y], [out], [reduction])
        if reduction == 0:
            assert torch.equal(out, want), (nx, ny)
        else:
            assert_within(out, exact, 40 * U32 * exact.abs(), f"{nx}, {ny}")  # every term is positive
    grad = randn(*want.shape, seed=10)
    want_gi = aten.mse_loss_backward(grad, x0, y0, reduction)
    for no, gi in empty_layouts(shape):
        hostlib.call("mse_loss_backward", [grad.expand(shape), x0, y0], [gi], [reduction])
        assert torch.equal(gi, want_gi), no
