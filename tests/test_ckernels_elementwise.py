"""The elementwise C kernels against torch, on strided views (transposed, sliced, broadcast)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poet.cbackend import hostlib  # noqa: E402

aten = torch.ops.aten


def layouts(shape, seed=0):
    """The same values as a contiguous tensor, a transposed view and a strided slice of a bigger one."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(*shape, generator=g)
    big = torch.randn(*(2 * s + 1 for s in shape), generator=g)
    sliced = big[tuple(slice(1, 1 + 2 * s, 2) for s in shape)]
    sliced.copy_(base)
    yield "contiguous", base
    if len(shape) >= 2:
        yield "transposed", base.transpose(0, 1).contiguous().transpose(0, 1)
    yield "sliced", sliced


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4, 5)])
def test_relu_matches_torch(shape):
    for name, x in layouts(shape):
        y = torch.empty(shape)
        hostlib.call("relu", [x], [y])
        assert torch.equal(y, torch.relu(x)), name


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4, 5)])
def test_threshold_backward_matches_torch(shape):
    for name, x in layouts(shape):
        g = torch.randn(shape)
        out = torch.empty(shape[::-1]).t() if len(shape) == 2 else torch.empty(shape)  # a strided output too
        hostlib.call("threshold_backward", [g, x], [out], [0.0])
        assert torch.equal(out, aten.threshold_backward(g, x, 0.0)), name


def test_wrong_argument_count_is_an_error_not_a_crash():
    x = torch.randn(3)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("relu", [x, x], [torch.empty(3)])
