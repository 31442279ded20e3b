"""Pooling, sums and means in C against torch: max/avg pooling and their gradients bit for bit (aten's
loops: same windows, first maximum, NaN wins, row-by-row float sums); the tile kernels bit for bit
against the Python tiles; sums and means within the cascade-sum bound of float64."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402
from ckernel_specs import run_kernel, trace  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten

# kernel, stride, padding, dilation, ceil_mode
MAX_CASES = [
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), False),
    ((3, 2), (1, 2), (1, 0), (2, 1), True),
    ((3, 3), (2, 2), (1, 1), (1, 1), True),
]
# kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
AVG_CASES = [
    ((2, 2), (2, 2), (0, 0), False, True, None),
    ((3, 3), (2, 2), (1, 1), False, True, None),
    ((3, 3), (2, 2), (1, 1), True, False, None),
    ((3, 2), (1, 2), (1, 1), False, True, 5),
]


def sample(shape, seed=0):
    x = randn(*shape, seed=seed)
    x.view(-1)[::7] = x.view(-1)[0]  # ties: the first maximum must win
    return x


@pytest.mark.parametrize("case", range(len(MAX_CASES)))
def test_max_pool_and_indices_bit_for_bit(case):
    kernel, stride, padding, dilation, ceil = MAX_CASES[case]
    x0 = sample((2, 3, 9, 8))
    x0[0, 0, 4, 4] = float("nan")
    want, idx = aten.max_pool2d_with_indices(x0, kernel, stride, padding, dilation, ceil)
    for (nx, x), (no, y) in itertools.product(layouts(x0), empty_layouts(want.shape)):
        ix = torch.full(want.shape, -1, dtype=torch.int64)
        hostlib.call("max_pool2d", [x], [y, ix], (*kernel, *stride, *padding, *dilation, int(ceil)))
        torch.testing.assert_close(y, want, rtol=0, atol=0, equal_nan=True, msg=f"{nx} {no}")
        assert torch.equal(ix, idx), (nx, no)
    go = randn(*want.shape, seed=3)
    gi = torch.full(x0.shape, float("nan"))
    hostlib.call("max_pool2d_backward", [go, idx], [gi])
    assert torch.equal(gi, aten.max_pool2d_with_indices_backward(go, x0, kernel, stride, padding, dilation, ceil, idx))


def test_max_pool_of_a_3d_input_and_bad_indices():
    x = sample((3, 6, 6))
    want, idx = aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    y, ix = torch.empty(want.shape), torch.empty(want.shape, dtype=torch.int64)
    hostlib.call("max_pool2d", [x], [y, ix], (2, 2, 2, 2, 0, 0, 1, 1, 0))
    assert torch.equal(y, want) and torch.equal(ix, idx)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call(
            "max_pool2d_backward", [torch.ones(1, 1, 2, 2), torch.full((1, 1, 2, 2), 99)], [torch.empty(1, 1, 4, 4)]
        )


@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_avg_pool_and_gradient_bit_for_bit(case):
    kernel, stride, padding, ceil, include_pad, divisor = AVG_CASES[case]
    x0 = sample((2, 3, 9, 8))
    want = aten.avg_pool2d(x0, kernel, stride, padding, ceil, include_pad, divisor)
    sc = (*kernel, *stride, *padding, int(ceil), int(include_pad), divisor or 0)
    for (nx, x), (no, y) in itertools.product(layouts(x0), empty_layouts(want.shape)):
        hostlib.call("avg_pool2d", [x], [y], sc)
        assert torch.equal(y, want), (nx, no)
    go0 = randn(*want.shape, seed=5)
    ref = aten.avg_pool2d_backward(go0, x0, kernel, stride, padding, ceil, include_pad, divisor)
    for (ng, go), (no, gi) in itertools.product(layouts(go0), empty_layouts(x0.shape)):
        hostlib.call("avg_pool2d_backward", [go], [gi], sc)
        assert torch.equal(gi, ref), (ng, no)


def test_traced_pooling_through_the_specs():
    def f(x):
        y = torch.nn.functional.max_pool2d(x, 3, 2, 1) + torch.nn.functional.avg_pool2d(x, 2)[:, :, :4, :4]
        (g,) = torch.autograd.grad(y.square().sum(), [x])
        return y, g

    x = randn(2, 3, 8, 8).requires_grad_()
    nodes, values = trace(f, x)
    covered = set()
    for n in nodes:
        if "pool" in str(n.target):
            covered.add(n.target)
            want, got = run_kernel(n, values)
            for w, g in zip(want, got):
                assert torch.equal(g, w.detach()), n.name
    assert len(covered) == 4, covered


# ------------------------------------------------------------------ sums and means

REDUCTIONS = [
    ((2, 3, 4, 5), [2, 3], False),
    ((2, 3, 4, 5), [0], True),
    ((6, 7), [0, 1], False),
    ((4, 5, 6), [-1], True),
]


@pytest.mark.parametrize("shape, dims, keepdim", REDUCTIONS)
@pytest.mark.parametrize("mean", [False, True])
def test_sum_and_mean_within_the_cascade_bound(shape, dims, keepdim, mean):
    x0 = randn(*shape, seed=1) + 0.5
    op = torch.mean if mean else torch.sum
    want = op(x0.double(), dims, keepdim=keepdim)
    count = x0.numel() // want.numel()
    bound = 40 * U32 * op(x0.abs().double(), dims, keepdim=keepdim)
    mask = sum(1 << (d % len(shape)) for d in dims)
    for (nx, x), (no, y) in itertools.product(layouts(x0), empty_layouts(want.shape)):
        hostlib.call("sum", [x], [y], (int(mean), mask))
        assert_within(y, want, bound, f"{nx} {no} count {count}")


def test_sums_of_other_dtypes():
    i = torch.arange(24).view(2, 3, 4) - 5
    y = torch.empty(2, 4, dtype=torch.int64)
    hostlib.call("sum", [i], [y], (0, 0b010))
    assert torch.equal(y, i.sum(1))
    m = randn(3, 4) > 0
    y = torch.empty((), dtype=torch.int64)
    hostlib.call("sum", [m], [y], (0, 0b11))
    assert int(y) == int(m.sum())
    x = randn(3, 5, dtype=torch.float64)
    y = torch.empty(3, dtype=torch.float64)
    hostlib.call("sum", [x], [y], (1, 0b10))
    torch.testing.assert_close(y, x.mean(1), rtol=1e-15, atol=0)
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("sum", [i], [torch.empty(2, 4, dtype=torch.int64)], (1, 0b010))  # an integer mean


def test_traced_reductions_through_the_specs():
    def f(x):
        return x.sum((2, 3)), x.mean((2, 3)), x.sum(0, keepdim=True), x.sum(), x.mean(), x.sum(-1), (x > 0).sum(1)

    nodes, values = trace(f, randn(2, 3, 4, 5))
    for n in nodes:
        if n.target in (aten.gt.Scalar,):
            continue
        want, got = run_kernel(n, values)
        torch.testing.assert_close(got[0], want[0], rtol=4e-7, atol=1e-6)


# ------------------------------------------------------------------ tiles


def row_pieces(x, lo, hi, cut):
    edges = [lo, *([cut] if lo < cut < hi else []), hi]
    return [x[:, :, a:b] for a, b in zip(edges, edges[1:])]


def window_rows(o0, o1, k, s, p, d, h):
    start, stop = o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1
    return max(start, 0), min(stop, h), max(0, -start), max(0, stop - h), start


@pytest.mark.parametrize("case", [0, 1])
def test_tile_max_pool_and_grad_equal_the_python_tiles(case):
    kernel, stride, padding, dilation, _ = MAX_CASES[case]
    x0 = sample((2, 3, 9, 8))
    oh = aten.max_pool2d_with_indices(x0, kernel, stride, padding, dilation, False)[0].shape[2]
    outs = []
    for o0, o1 in ((0, oh // 2), (oh // 2, oh)):
        lo, hi, top, bottom, start = window_rows(o0, o1, kernel[0], stride[0], padding[0], dilation[0], x0.shape[2])
        for nx, x in layouts(x0):
            ps = row_pieces(x, lo, hi, 4)
            want = tiled_ops.tile_max_pool(ps, top, bottom, start, x0.shape[3], kernel, stride, padding, dilation)
            y, ix = torch.empty(want[0].shape), torch.empty(want[1].shape, dtype=torch.int64)
            sc = (len(ps), top, bottom, start, *kernel, *stride, padding[1], *dilation)
            hostlib.call("tile_max_pool", ps, [y, ix], sc)
            assert torch.equal(y, want[0]) and torch.equal(ix, want[1]), (nx, o0)
        outs.append(want)
    go = [randn(*o[0].shape, seed=7 + i) for i, o in enumerate(outs)]
    for a, b in ((0, 4), (4, 9), (0, 9)):
        want = tiled_ops.tile_max_pool_grad(go, [o[1] for o in outs], a, b, list(x0.shape))
        gi = torch.full(want.shape, float("nan"))
        hostlib.call("tile_max_pool_grad", [*go, *[o[1] for o in outs]], [gi], (len(go), a, b))
        assert torch.equal(gi, want), (a, b)
    gi = torch.full((2, 3, 2, 8), float("nan"))
    hostlib.call("tile_max_pool_grad", [], [gi], (0, 3, 5))  # no output row reaches the tile
    assert torch.equal(gi, tiled_ops.tile_max_pool_grad([], [], 3, 5, [2, 3, 9, 8]))


@pytest.mark.parametrize("case", [0, 1, 3])
def test_tile_avg_pool_and_grad_equal_the_python_tiles(case):
    kernel, stride, padding, _, include_pad, divisor = AVG_CASES[case]
    x0 = sample((2, 3, 9, 8))
    go0 = randn(*aten.avg_pool2d(x0, kernel, stride, padding, False, include_pad, divisor).shape, seed=9)
    oh = go0.shape[2]
    for o0, o1 in ((0, oh // 2), (oh // 2, oh)):
        lo, hi, top, bottom, _ = window_rows(o0, o1, kernel[0], stride[0], padding[0], 1, x0.shape[2])
        for nx, x in layouts(x0):
            ps = row_pieces(x, lo, hi, 4)
            want = tiled_ops.tile_avg_pool(ps, top, bottom, kernel, stride, padding, include_pad, divisor)
            y = torch.full(want.shape, float("nan"))
            hostlib.call(
                "tile_avg_pool",
                ps,
                [y],
                (len(ps), top, bottom, *kernel, *stride, padding[1], int(include_pad), divisor or 0),
            )
            assert torch.equal(y, want), (nx, o0)
    kh, sh, ph = kernel[0], stride[0], padding[0]
    for a, b in ((0, 4), (4, 9), (8, 9)):
        j0 = max(0, -((-(a + ph - (kh - 1))) // sh))
        j1 = min(oh, (b - 1 + ph) // sh + 1)
        start, rows = j0 * sh - ph, max(0, (j1 - j0 - 1) * sh + kh)
        ps = row_pieces(go0, j0, j1, j0 + 1) if j1 > j0 else []
        want = tiled_ops.tile_avg_pool_grad(
            ps, start, rows, a, b, list(x0.shape), kernel, stride, padding, include_pad, divisor, torch.float32
        )
        gi = torch.full(want.shape, float("nan"))
        sc = (len(ps), start, rows, a, b, *kernel, *stride, padding[1], int(include_pad), divisor or 0)
        hostlib.call("tile_avg_pool_grad", ps, [gi], sc)
        assert torch.equal(gi, want), (a, b, len(ps))


def test_tile_sums_equal_the_python_tiles():
    x0 = randn(4, 3, 6, 5)
    parts = [x0[:, :, :2], x0[:, :, 2:]]
    partials = []
    for p in parts:
        want = tiled_ops.tile_sum_partial(p, [2, 3], False, torch.float32)
        got = torch.empty(want.shape, dtype=torch.float64)
        hostlib.call("sum", [p], [got], (0, 0b1100))
        torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-14)
        partials.append(want)
    for scale in (1.0, 1 / 30):
        want = tiled_ops.tile_sum_combine(partials, scale, torch.float32)
        y = torch.empty(want.shape)
        hostlib.call("tile_sum_combine", partials, [y], (2, scale))
        assert torch.equal(y, want)
