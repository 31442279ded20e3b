"""pk_matmul (mm, bmm, addmm, tile_mm_accumulate) against a float64 reference on strided layouts.

The kernel sums each output element over k in order in float32, so its error is bounded by the
classical bound of recursive summation: ``|C - C_exact| <= (k + 2) u (|beta| |add| + |alpha| |A| |B|)``
(u = 2^-24); torch's own float32 result lies within the same bound of the exact one.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402


def reference(add, a, b, beta, alpha):
    """The exact product (float64) and the error bound of a k-term float32 summation."""
    k = a.shape[-1]
    exact = alpha * (a.double() @ b.double())
    mag = abs(alpha) * (a.double().abs() @ b.double().abs())
    if add is not None and beta != 0:
        exact = exact + beta * add.double()
        mag = mag + abs(beta) * add.double().abs()
    return exact, (k + 2) * U32 * mag + 1e-30


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 4), (7, 13, 9), (5, 0, 6), (16, 33, 10)])
def test_mm_every_layout(m, k, n):
    a0, b0 = randn(m, k, seed=1), randn(k, n, seed=2)
    exact, bound = reference(None, a0, b0, 0.0, 1.0)
    first = None
    for (na, a), (nb, b), (no, out) in itertools.product(layouts(a0), layouts(b0), empty_layouts((m, n))):
        hostlib.call("matmul", [None, a, b], [out], [0.0, 1.0])
        assert_within(out, exact, bound, f"a {na}, b {nb}, out {no}")
        first = out.clone() if first is None else first
        assert torch.equal(out, first), f"a {na}, b {nb}, out {no}: the layout changed the result"
    assert_within(torch.mm(a0, b0), exact, bound, "torch's own mm")  # the bound is torch's too


@pytest.mark.parametrize("bias_shape", [(6,), (1, 6), (4, 6), ()])
@pytest.mark.parametrize("beta, alpha", [(1.0, 1.0), (0.5, -2.0), (0.0, 1.0)])
def test_addmm_bias_broadcast_beta_alpha(bias_shape, beta, alpha):
    a0, b0, bias0 = randn(4, 9, seed=3), randn(9, 6, seed=4), randn(*bias_shape, seed=5)
    exact, bound = reference(bias0, a0, b0, beta, alpha)
    for (nb, bias), (na, a), (no, out) in itertools.product(layouts(bias0), layouts(a0), empty_layouts((4, 6))):
        hostlib.call("matmul", [bias, a, b0], [out], [beta, alpha])
        assert_within(out, exact, bound, f"bias {nb}, a {na}, out {no}")


def test_addmm_beta_zero_ignores_nan_in_bias():
    a, b = randn(3, 4, seed=6), randn(4, 5, seed=7)
    bias = torch.full((5,), float("nan"))
    out = torch.empty(3, 5)
    hostlib.call("matmul", [bias, a, b], [out], [0.0, 1.0])
    assert torch.isfinite(out).all()
    assert torch.equal(out, torch.addmm(bias, a, b, beta=0.0))  # k = 4: both sum in order here


def test_linear_layer_shapes_transposed_weight():
    """x @ W^T + b as a traced linear layer gives it: the weight read through a transposed view."""
    x, w, bias = randn(8, 32, seed=8), randn(64, 32, seed=9), randn(64, seed=10)
    out = torch.empty(8, 64)
    hostlib.call("matmul", [bias, x, w.t()], [out], [1.0, 1.0])
    exact, bound = reference(bias, x, w.t(), 1.0, 1.0)
    assert_within(out, exact, bound, "linear")
    rel = ((out - torch.addmm(bias, x, w.t())).abs().max() / torch.addmm(bias, x, w.t()).abs().max()).item()
    assert rel < 1e-6  # and close to torch's own


@pytest.mark.parametrize("batch, m, k, n", [(1, 2, 3, 4), (3, 5, 7, 6), (4, 1, 16, 9)])
def test_bmm_every_layout_and_broadcast_batch(batch, m, k, n):
    a0, b0 = randn(batch, m, k, seed=11), randn(batch, k, n, seed=12)
    exact, bound = reference(None, a0, b0, 0.0, 1.0)
    for (na, a), (nb, b), (no, out) in itertools.product(layouts(a0), layouts(b0), empty_layouts((batch, m, n))):
        hostlib.call("matmul", [None, a, b], [out], [0.0, 1.0])
        assert_within(out, exact, bound, f"a {na}, b {nb}, out {no}")
    shared = randn(1, k, n, seed=13).expand(batch, k, n)  # stride 0 over the batch
    out = torch.empty(batch, m, n)
    hostlib.call("matmul", [None, a0, shared], [out], [0.0, 1.0])
    exact, bound = reference(None, a0, shared, 0.0, 1.0)
    assert_within(out, exact, bound, "expanded b")


@pytest.mark.parametrize("shapes", [((6, 5), (5, 4)), ((2, 6, 5), (2, 5, 4))])
@pytest.mark.parametrize("first", [True, False])
def test_tile_mm_accumulate_matches_the_python_tile(shapes, first):
    a, b = randn(*shapes[0], seed=14), randn(*shapes[1], seed=15)
    acc = None if first else randn(*(shapes[0][:-1] + shapes[1][-1:]), seed=16)
    want = tiled_ops.tile_mm_accumulate(acc, a, b)
    exact, bound = reference(acc, a, b, 1.0, 1.0)
    for no, out in empty_layouts(tuple(want.shape)):
        hostlib.call("matmul", [acc, a, b], [out], [1.0, 1.0])
        assert_within(out, exact, bound, f"out {no}")
        assert_within(out, want, 2 * bound, f"out {no} vs the Python tile")


@pytest.mark.parametrize(
    "a, b, out",
    [
        ((3, 4), (5, 6), (3, 6)),  # inner dimensions differ
        ((3, 4), (4, 6), (3, 5)),  # output of the wrong shape
        ((2, 3, 4), (3, 4, 6), (2, 3, 6)),  # batch sizes differ
        ((3, 4), (2, 4, 6), (3, 6)),  # ranks differ
    ],
)
def test_mismatched_shapes_are_refused(a, b, out):
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("matmul", [None, torch.zeros(a), torch.zeros(b)], [torch.zeros(out)], [0.0, 1.0])


def test_wrong_dtype_and_counts_are_refused():
    a, b = torch.zeros(2, 2), torch.zeros(2, 2)
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("matmul", [None, a.double(), b], [torch.zeros(2, 2)], [0.0, 1.0])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("matmul", [None, a, b], [torch.zeros(2, 2)], [0.0])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("matmul", [torch.zeros(3), a, b], [torch.zeros(2, 2)], [1.0, 1.0])  # bias not broadcastable
