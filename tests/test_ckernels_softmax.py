"""The softmax and log-softmax C kernels and their gradients against a float64 reference (and torch)
on strided layouts, along every dimension.

The kernels use pk_expf/pk_logf (<= 2 ulp) and a cascaded sum, so they are not bit-identical to
torch's vectorised kernels; the bounds are a few ulp of the value, scaled where the formula subtracts
(|x - max| for log-softmax, the magnitudes of the terms for the gradients)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402

aten = torch.ops.aten

CASES = [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 40), -1), ((2, 40, 3), 1), ((1, 300), 1)]


def scaled(shape, seed):
    return 4 * randn(*shape, seed=seed)  # scores of a few units, as attention and classifiers give


@pytest.mark.parametrize("shape, dim", CASES)
def test_softmax_and_log_softmax(shape, dim):
    x0 = scaled(shape, 1)
    y64 = torch.softmax(x0.double(), dim)
    ly64 = torch.log_softmax(x0.double(), dim)
    spread = (x0.double() - x0.double().amax(dim, keepdim=True)).abs()
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(shape)):
        hostlib.call("softmax", [x], [out], [dim, 0])
        assert_within(out, y64, (16 + spread) * U32 * y64 + 1e-38, f"softmax {nx} -> {no}")
        hostlib.call("log_softmax", [x], [out], [dim, 0])
        assert_within(out, ly64, 8 * U32 * (spread + ly64.abs() + 1), f"log_softmax {nx} -> {no}")
    assert_within(torch.softmax(x0, dim), y64, (16 + spread) * U32 * y64 + 1e-38, "torch's own softmax")


@pytest.mark.parametrize("shape, dim", CASES)
def test_softmax_gradients(shape, dim):
    x0, g0 = scaled(shape, 2), randn(*shape, seed=3)
    y = torch.softmax(x0, dim)
    ly = torch.log_softmax(x0, dim)
    y64, ly64, g64 = y.double(), ly.double(), g0.double()
    want = aten._softmax_backward_data(g64, y64, dim, torch.float64)
    mag = y64 * (g64.abs() + (g64 * y64).abs().sum(dim, keepdim=True))
    want_log = aten._log_softmax_backward_data(g64, ly64, dim, torch.float64)
    mag_log = g64.abs() + ly64.exp() * g64.abs().sum(dim, keepdim=True)
    for (ng, g), (no, out) in itertools.product(layouts(g0), empty_layouts(shape)):
        hostlib.call("softmax_backward", [g, y], [out], [dim])
        assert_within(out, want, 16 * U32 * mag + 1e-38, f"softmax backward {ng} -> {no}")
        hostlib.call("log_softmax_backward", [g, ly], [out], [dim])
        assert_within(out, want_log, 16 * U32 * mag_log + 1e-38, f"log_softmax backward {ng} -> {no}")


def test_a_row_of_minus_infinity_is_nan_unless_safe():
    x = torch.tensor([[0.5, float("-inf"), 1.0], [float("-inf")] * 3])
    out = torch.empty(2, 3)
    hostlib.call("softmax", [x], [out], [1, 0])
    assert torch.isnan(out[1]).all() and torch.isnan(torch.softmax(x, 1)[1]).all()
    assert out[0, 1] == 0.0
    hostlib.call("softmax", [x], [out], [1, 1])
    assert torch.equal(out[1], torch.zeros(3)) and torch.equal(out[1], aten._safe_softmax(x, 1)[1])
    assert_within(out[0], torch.softmax(x[0].double(), 0), 16 * U32, "finite row")


def test_bad_dimension_and_shapes_are_refused():
    x = randn(3, 4)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("softmax", [x], [torch.empty(3, 4)], [2, 0])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("softmax_backward", [x, x], [torch.empty(4, 3)], [1])
