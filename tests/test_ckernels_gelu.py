"""GELU (exact and tanh) and tanh, and their gradients, against float64 (and torch's float32) over a
dense sweep of inputs and on strided layouts.

The kernels evaluate aten's CPU formulas in float with pk_erff/pk_tanhf/pk_expf (<= 2 ulp).  Where
the formula cancels (1 + erf(x) for x well below 0) the error is a few ulp of |x|, not of the
result; torch's own float32 kernels have the same property, and the bounds say so."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402

aten = torch.ops.aten
MODES = {"none": 0, "tanh": 1}


def sweep():
    dense = torch.linspace(-12, 12, 48001)
    tiny = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 30.0, -30.0, 100.0, -100.0])
    return torch.cat([dense, tiny, 3 * randn(2000, seed=1)])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_gradient_over_a_sweep(approximate):
    x = sweep()
    x64 = x.double()
    y64 = aten.gelu(x64, approximate=approximate)
    y = torch.empty_like(x)
    hostlib.call("gelu", [x], [y], [MODES[approximate]])
    bound = 8 * U32 * (x64.abs() + y64.abs()) + 1e-45
    assert_within(y, y64, bound, f"gelu {approximate}")
    assert_within(aten.gelu(x, approximate=approximate), y64, bound, "torch's own gelu")
    g = randn(*x.shape, seed=2)
    want = aten.gelu_backward(g.double(), x64, approximate=approximate)
    gi = torch.empty_like(x)
    hostlib.call("gelu_backward", [g, x], [gi], [MODES[approximate]])
    assert_within(gi, want, 16 * U32 * g.double().abs() * (1 + x64.abs()) + 1e-45, f"gelu backward {approximate}")


def test_tanh_and_its_gradient():
    x = sweep()
    y64 = torch.tanh(x.double())
    y = torch.empty_like(x)
    hostlib.call("tanh", [x], [y], [])
    assert_within(y, y64, 3 * U32 * y64.abs() + 1e-45, "tanh within 2 ulp")
    g = randn(*x.shape, seed=3)
    gi = torch.empty_like(x)
    hostlib.call("tanh_backward", [g, y], [gi], [])
    assert_within(gi, aten.tanh_backward(g.double(), y.double()), 4 * U32 * g.double().abs() + 1e-45, "tanh backward")


@pytest.mark.parametrize("kernel, inputs", [("gelu", 1), ("gelu_backward", 2), ("tanh", 1), ("tanh_backward", 2)])
def test_strided_layouts_give_the_same_values(kernel, inputs):
    xs = [randn(3, 4, 5, seed=k) for k in range(inputs)]
    scalars = [] if kernel.startswith("tanh") else [1]
    want = torch.empty(3, 4, 5)
    hostlib.call(kernel, xs, [want], scalars)
    for combo in itertools.product(*[list(layouts(x)) for x in xs]):
        for no, out in empty_layouts((3, 4, 5)):
            hostlib.call(kernel, [v for _, v in combo], [out], scalars)
            assert torch.equal(out, want), ([n for n, _ in combo], no)
