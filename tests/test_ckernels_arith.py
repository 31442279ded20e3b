"""Arithmetic, comparisons, dtype conversion and creation ops in C against torch, through their specs
on traced graphs and directly on strided views: bit for bit (float32 arithmetic is one IEEE operation
per element, as in aten; an alpha other than 1 is the exception: aten fuses a * alpha + b)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import empty_layouts, layouts, randn  # noqa: E402
from ckernel_specs import run_kernel, trace  # noqa: E402

from poet.cbackend import hostlib, vocabulary  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp  # noqa: E402

aten = torch.ops.aten


def check_traced(fn, *args, rtol=0.0):
    """Every op of ``fn`` run through its spec and kernel equals torch's value (within rtol)."""
    nodes, values = trace(fn, *args)
    assert nodes
    for n in nodes:
        want, got = run_kernel(n, values)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype, n.name
            torch.testing.assert_close(g, w, rtol=rtol, atol=0, equal_nan=True, msg=lambda m, n=n: f"{n.name}: {m}")
    return [n.target for n in nodes]


@pytest.mark.parametrize("kernel, fn", [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div)])
def test_float32_binary_bit_for_bit_on_every_layout(kernel, fn):
    a0, b0 = randn(3, 4, 5, seed=1), randn(3, 4, 5, seed=2)
    b0.view(-1)[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    want = fn(a0, b0)
    scalars = (1.0,) if kernel in ("add", "sub") else ()
    for (na, a), (nb, b) in itertools.product(layouts(a0), layouts(b0)):
        for no, out in empty_layouts(want.shape):
            hostlib.call(kernel, [a, b], [out], scalars)
            torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True, msg=f"{kernel} {na} {nb} {no}")


def test_broadcast_views_with_stride_zero():
    a, b = randn(4, 1, 5, seed=1), randn(3, 1, seed=2)
    want = a * b
    out = torch.empty(want.shape)
    hostlib.call("mul", [a.expand(want.shape), b.expand(want.shape)], [out])
    assert torch.equal(out, want)


def test_traced_arithmetic_with_tensors_and_numbers():
    def f(x, y):
        return (
            x + y,
            x - y,
            x * y,
            x / y,
            x + 2.5,
            x - 3,
            x * 1.1111111111111112,
            x / 256,
            1 - x,
            torch.rsub(x, y),
            -x,
            y.abs(),
        )

    targets = check_traced(f, randn(4, 5, seed=1), randn(5, seed=2))
    assert aten.add.Tensor in targets and aten.rsub.Scalar in targets


def test_alpha_is_within_one_ulp():
    # aten computes a + alpha * b with a fused multiply-add where the CPU has one; C rounds twice
    check_traced(lambda x, y: (torch.add(x, y, alpha=0.3), torch.sub(x, y, alpha=2.5)), randn(64), randn(64), rtol=2e-7)


def test_integer_and_mixed_dtypes():
    counter = torch.tensor(41, dtype=torch.int64)
    idx = torch.arange(12, dtype=torch.int64).view(3, 4)
    x = randn(3, 4)
    mask = x > 0
    check_traced(
        lambda c, i, x, m: (c + 1, i * 3 - c, i + x, x * m, i / 4, c.add(i, alpha=2), ~m, m.logical_not()),
        counter,
        idx,
        x,
        mask,
    )


def test_comparisons_give_bool_masks():
    x = randn(4, 6)
    x.view(-1)[:3] = torch.tensor([float("nan"), 0.5, -0.0])
    i = torch.arange(24).view(4, 6) - 12
    targets = check_traced(
        lambda x, i: (
            x > 0.5,
            x >= 0.5,
            x < 0,
            x <= 0,
            x == 0.5,
            x != 0.5,
            x > x.t().t() * 0.5,
            i == 3,
            i > 2.5,
            i < x,
        ),
        x,
        i,
    )
    assert aten.gt.Scalar in targets and aten.gt.Tensor in targets


def test_conversions_and_creation():
    def f(x, i):
        return (
            x.to(torch.float64),
            i.to(torch.float32),
            (x * 100).to(torch.int64),
            x.to(torch.bool),
            torch.zeros(3, 2),
            torch.ones(4, dtype=torch.int64),
            torch.full((2, 3), 7.5),
            torch.full((2,), True),
            torch.zeros_like(x),
            torch.ones_like(i),
            torch.full_like(x, -2.0),
            torch.arange(5),
            torch.arange(2, 11, 3),
            torch.arange(0.0, 1.0, 0.125),
            torch.scalar_tensor(3.25),
            x.new_zeros(2, 2),
            aten.fill.Scalar(x, 2.0),
            aten.fill.Tensor(i, torch.tensor(5)),
        )

    check_traced(f, randn(3, 4), torch.arange(6))


def test_uninitialised_tensors_are_zeros():
    """aten leaves empty's memory as it was; the C step zeros it, so nothing depends on what the arena held."""
    fn = lambda x: (torch.empty(3, 2), aten.empty_strided.default([2, 3], [1, 2]), x.new_empty(4))  # noqa: E731
    nodes, values = trace(fn, randn(2))
    for n in nodes:
        spec = vocabulary.spec_for(n)
        assert spec.kernel == "fill" and spec.scalars == (0.0,) and spec.inputs == ()
        out = torch.full(values[n].shape, float("nan"))
        hostlib.call("fill", [], [out], spec.scalars)
        assert torch.equal(out, torch.zeros(values[n].shape))


def test_bitwise_not_and_convert_layouts():
    m0 = randn(3, 5) > 0
    for (nm, m), (no, out) in itertools.product(layouts(m0), empty_layouts(m0.shape, torch.bool)):
        hostlib.call("bitwise_not", [m], [out])
        assert torch.equal(out, ~m0), (nm, no)
    x0 = randn(3, 5) * 1e3
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(x0.shape, torch.int64)):
        hostlib.call("convert", [x], [out])
        assert torch.equal(out, x0.to(torch.int64)), (nx, no)


def test_float_to_int_conversion_is_defined_for_nan_and_huge():
    x = torch.tensor([float("nan"), 1e30, -1e30, 2.9, -2.9])
    out = torch.empty(5, dtype=torch.int64)
    hostlib.call("convert", [x], [out])
    assert out.tolist() == [0, 2**63 - 1, -(2**63), 2, -2]


def test_unsupported_forms_are_refused_with_the_node_named():
    nodes, _ = trace(lambda x: torch.div(x, 2.0, rounding_mode="floor"), randn(3))
    with pytest.raises(UnsupportedOp, match="rounding_mode"):
        vocabulary.spec_for(nodes[0])


def test_bad_calls_are_errors():
    x = randn(3)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("add", [x, randn(4)], [torch.empty(3)], [1.0])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("add", [x, x], [torch.empty(3)])  # alpha missing
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("div", [torch.arange(3), torch.arange(3)], [torch.empty(3, dtype=torch.int64)])
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("gt", [x, x], [torch.empty(3)])  # a comparison writes bools
