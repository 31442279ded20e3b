"""The LayerNorm C kernels against a float64 reference (and torch) on strided layouts: forward
(normalised over the last one or two dimensions, with and without weight and bias), backward with
every output mask, and the tiled weight/bias gradient accumulated over tiles of tokens.

Two float passes with cascaded sums: bounds are a few tens of ulp of the magnitudes involved
(|x| rstd |w| for the output); the weight and bias gradients are sums over the rows in row order,
within (rows + 2) u of the summed magnitudes."""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten
CASES = [((4, 7), 1), ((2, 3, 16), 1), ((2, 3, 4), 2), ((1, 200, 32), 1), ((9,), 1)]


def inputs(shape, k, seed):
    x = 3 + 2 * randn(*shape, seed=seed)  # an offset mean: the two passes must not cancel
    w = 1 + 0.5 * randn(*shape[len(shape) - k :], seed=seed + 1)
    b = randn(*shape[len(shape) - k :], seed=seed + 2)
    return x, w, b


def reference(x, w, b, k, eps=1e-5):
    nshape = list(x.shape[x.dim() - k :])
    return aten.native_layer_norm(
        x.double(), nshape, None if w is None else w.double(), None if b is None else b.double(), eps
    )


@pytest.mark.parametrize("shape, k", CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward(shape, k, affine):
    x0, w0, b0 = inputs(shape, k, 1)
    w0, b0 = (w0, b0) if affine else (None, None)
    y64, mu64, rs64 = reference(x0, w0, b0, k)
    stat_shape = mu64.shape
    mag = (x0.double().abs() + mu64.abs()) * rs64 * (w0.double().abs() if affine else 1) + (
        b0.double().abs() if affine else 0
    )
    for (nx, x), (ny, y) in itertools.product(layouts(x0), empty_layouts(shape)):
        for wl, bl in itertools.product(
            layouts(w0) if affine else [("none", None)], layouts(b0) if affine else [("none", None)]
        ):
            mean, rstd = torch.full(stat_shape, float("nan")), torch.full(stat_shape, float("nan"))
            hostlib.call("layer_norm", [x, wl[1], bl[1]], [y, mean, rstd], [k, 1e-5])
            what = f"x {nx}, y {ny}, w {wl[0]}, b {bl[0]}"
            assert_within(mean, mu64, 16 * U32 * x0.double().abs().amax(), what + " mean")
            assert_within(rstd, rs64, 16 * U32 * rs64, what + " rstd")
            assert_within(y, y64, 32 * U32 * mag, what + " y")
    torch_y = aten.native_layer_norm(x0, list(shape[len(shape) - k :]), w0, b0, 1e-5)[0]
    assert_within(torch_y, y64, 32 * U32 * mag, "torch's own layer norm")


@pytest.mark.parametrize("shape, k", CASES)
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, True), (True, True, False)])
def test_layer_norm_backward(shape, k, mask):
    x0, w0, b0 = inputs(shape, k, 2)
    go0 = randn(*shape, seed=5)
    nshape = list(shape[len(shape) - k :])
    _, mean, rstd = aten.native_layer_norm(x0, nshape, w0, b0, 1e-5)
    want = aten.native_layer_norm_backward(
        go0.double(), x0.double(), nshape, mean.double(), rstd.double(), w0.double(), b0.double(), list(mask)
    )
    lead = list(range(len(shape) - k))
    xhat = (x0.double() - mean.double()) * rstd.double()
    g = go0.double() * w0.double()
    mag_gi = rstd.double() * (
        g.abs() + g.abs().mean(list(range(len(shape) - k, len(shape))), keepdim=True) * (1 + xhat.abs())
    )
    rows = x0.numel() // math.prod(nshape)
    mag_gw = (rows + 2) * ((go0.double() * xhat).abs().sum(lead) if lead else (go0.double() * xhat).abs())
    mag_gb = (rows + 2) * (go0.double().abs().sum(lead) if lead else go0.double().abs())
    for (ng, go), (nx, x) in itertools.product(layouts(go0), layouts(x0)):
        gi = torch.full(shape, float("nan")) if mask[0] else None
        gw = torch.full(nshape, float("nan")) if mask[1] else None
        gb = torch.full(nshape, float("nan")) if mask[2] else None
        hostlib.call("layer_norm_backward", [go, x, mean, rstd, w0], [gi, gw, gb], [k])
        what = f"go {ng}, x {nx}"
        if mask[0]:
            assert_within(gi, want[0], 64 * U32 * mag_gi, what + " grad input")
        if mask[1]:
            assert_within(gw, want[1], 4 * U32 * mag_gw, what + " grad weight")
        if mask[2]:
            assert_within(gb, want[2], 4 * U32 * mag_gb, what + " grad bias")


def test_layer_norm_backward_without_weight():
    x0 = 3 + 2 * randn(5, 12, seed=6)
    go = randn(5, 12, seed=7)
    _, mean, rstd = aten.native_layer_norm(x0, [12], None, None, 1e-5)
    want = aten.native_layer_norm_backward(
        go.double(), x0.double(), [12], mean.double(), rstd.double(), None, None, [True, False, False]
    )[0]
    gi = torch.empty(5, 12)
    hostlib.call("layer_norm_backward", [go, x0, mean, rstd, None], [gi, None, None], [1])
    assert_within(gi, want, 64 * U32 * rstd.double() * (go.abs().double() * 3 + go.abs().double().mean()), "grad input")


@pytest.mark.parametrize("want_w, want_b", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("first", [True, False])
def test_tile_layer_norm_param_grad_matches_the_python_tile(want_w, want_b, first):
    x, go = 1 + randn(2, 6, 8, seed=8), randn(2, 6, 8, seed=9)
    _, mean, rstd = aten.native_layer_norm(x, [8], None, None, 1e-5)
    acc_w = None if first or not want_w else randn(8, seed=10)
    acc_b = None if first or not want_b else randn(8, seed=11)
    want_gw, want_gb = tiled_ops.tile_layer_norm_param_grad(acc_w, acc_b, go, x, mean, rstd, want_w, want_b)
    xhat = (x - mean) * rstd
    gw = torch.full((8,), float("nan")) if want_w else None
    gb = torch.full((8,), float("nan")) if want_b else None
    hostlib.call("layer_norm_param_grad", [acc_w, acc_b, go, x, mean, rstd], [gw, gb])
    if want_w:
        bound = 16 * U32 * ((go * xhat).abs().sum((0, 1)) + (acc_w.abs() if acc_w is not None else 0))
        assert_within(gw, want_gw, bound, "grad weight")
    if want_b:
        bound = 16 * U32 * (go.abs().sum((0, 1)) + (acc_b.abs() if acc_b is not None else 0))
        assert_within(gb, want_gb, bound, "grad bias")
    assert (gw is None) == (want_gw is None) and (gb is None) == (want_gb is None)


def test_mismatched_statistics_are_refused():
    x = randn(4, 6)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call(
            "layer_norm", [x, None, None], [torch.empty(4, 6), torch.empty(3, 1), torch.empty(4, 1)], [1, 1e-5]
        )
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call(
            "layer_norm", [x, torch.ones(5), None], [torch.empty(4, 6), torch.empty(4, 1), torch.empty(4, 1)], [1, 1e-5]
        )
