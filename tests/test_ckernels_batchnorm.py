"""BatchNorm in C (training, eval, no running stats; backward; the tile kernels) against float64 and
against the Python tile kernels.

Statistics are summed in double and rounded once, so save_mean, save_invstd and the running
statistics are within 0.5 float32 eps (relative) of the exact values (aten's own reach 2.2 eps on
these shapes); the normalised output and the gradients are within a few eps of their magnitude.  The
tile kernels repeat the Python kernels' double arithmetic operation for operation: apply, input
gradient, the gradient combination and the statistics combination are bit for bit; the per-tile
sums (stats, gradient partials) are within 1e-15 relative (sums in another order).
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten
EPS32 = 2.0**-23
SHAPES = [(4, 3, 5, 6), (8, 16, 2, 2), (6, 3), (4, 3, 7)]


def per_channel(v, ndim):
    return v.view([1, -1] + [1] * (ndim - 2))


def exact_forward(x, w, b, rm, rv, momentum=0.1, eps=1e-5):
    dims = [d for d in range(x.dim()) if d != 1]
    xd = x.double()
    mean, var, unbiased = xd.mean(dims), xd.var(dims, unbiased=False), xd.var(dims, unbiased=True)
    invstd = 1 / torch.sqrt(var + eps)
    y = (xd - per_channel(mean, x.dim())) * per_channel(invstd, x.dim())
    if w is not None:
        y = y * per_channel(w.double(), x.dim())
    if b is not None:
        y = y + per_channel(b.double(), x.dim())
    return (
        y,
        mean,
        invstd,
        momentum * mean + (1 - momentum) * rm.double(),
        momentum * unbiased + (1 - momentum) * rv.double(),
    )


def make(shape, seed=0):
    c = shape[1]
    x = randn(*shape, seed=seed) * 3 + 1
    return (
        x,
        randn(c, seed=seed + 1),
        randn(c, seed=seed + 2),
        randn(c, seed=seed + 3),
        randn(c, seed=seed + 4).abs() + 0.5,
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_training_forward_statistics_correctly_rounded(shape, affine):
    x0, w, b, rm, rv = make(shape)
    if not affine:
        w = b = None
    want = exact_forward(x0, w, b, rm, rv)
    c = shape[1]
    for (nx, x), (no, y) in itertools.product(layouts(x0), empty_layouts(shape)):
        outs = [y] + [torch.full((c,), float("nan")) for _ in range(4)]
        hostlib.call("batch_norm", [x, w, b, rm, rv], outs, (1, 0.1, 1e-5))
        for i, name in enumerate(("save_mean", "save_invstd", "running_mean", "running_var"), start=1):
            assert_within(outs[i], want[i], 0.5 * EPS32 * want[i].abs() + 1e-30, f"{name} {nx}")
        scale = float(want[0].abs().max())
        assert_within(y, want[0], 8 * U32 * scale, f"y {nx} -> {no}")


@pytest.mark.parametrize("shape", SHAPES)
def test_training_forward_matches_aten_closely(shape):
    x, w, b, rm, rv = make(shape, seed=5)
    want = aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    got = [torch.empty_like(want[0])] + [torch.empty(shape[1]) for _ in range(4)]
    hostlib.call("batch_norm", [x, w, b, rm, rv], got, (1, 0.1, 1e-5))
    for g, wv in zip(got, want):
        torch.testing.assert_close(g, wv, rtol=3 * EPS32, atol=8 * U32 * float(wv.abs().max()))


def test_eval_and_no_stats_forms():
    x, w, b, rm, rv = make((4, 3, 5, 5), seed=2)
    y, sm, si = torch.empty_like(x), torch.empty(0), torch.empty(0)
    nrm, nrv = torch.empty(3), torch.empty(3)
    hostlib.call("batch_norm", [x, w, b, rm, rv], [y, sm, si, nrm, nrv], (0, 0.1, 1e-5))
    want = aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0]
    torch.testing.assert_close(y, want, rtol=0, atol=4 * U32 * float(want.abs().max()))
    assert torch.equal(nrm, rm) and torch.equal(nrv, rv)
    outs = [torch.empty_like(x), torch.empty(3), torch.empty(3)]  # no running statistics: three outputs
    hostlib.call("batch_norm", [x, w, b, None, None], outs, (1, 0.1, 1e-5))
    want = aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5)
    for g, wv in zip(outs, want):
        torch.testing.assert_close(g, wv, rtol=3 * EPS32, atol=8 * U32 * float(wv.abs().max()))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("train", [True, False])
def test_backward_within_bound_of_float64(shape, train):
    x0, w, b, rm, rv = make(shape, seed=7)
    fwd = aten._native_batch_norm_legit_functional(x0, w, b, rm, rv, True, 0.1, 1e-5)
    go0 = randn(*shape, seed=9)
    args = (rm, rv, fwd[1], fwd[2], train, 1e-5, [True] * 3)
    want = aten.native_batch_norm_backward(
        go0.double(), x0.double(), w.double(), *[a.double() for a in args[:4]], *args[4:]
    )
    for (ng, go), (nx, x) in itertools.product(layouts(go0), layouts(x0)):
        outs = [torch.full(shape, float("nan")), torch.full((shape[1],), float("nan")), torch.empty(shape[1])]
        hostlib.call("batch_norm_backward", [go, x, w, *args[:4]], outs, (int(train), 1e-5))
        for g, wv, name in zip(outs, want, ("grad_input", "grad_weight", "grad_bias")):
            assert_within(g, wv, 16 * U32 * float(wv.abs().max()), f"{name} go {ng} x {nx}")


def test_backward_output_mask():
    x, w, b, rm, rv = make((4, 3, 5, 5))
    fwd = aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    go = randn(4, 3, 5, 5, seed=4)
    gw = torch.empty(3)
    hostlib.call("batch_norm_backward", [go, x, w, rm, rv, fwd[1], fwd[2]], [None, gw, None], (1, 1e-5))
    want = aten.native_batch_norm_backward(go, x, w, rm, rv, fwd[1], fwd[2], True, 1e-5, [False, True, False])[1]
    torch.testing.assert_close(gw, want, rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_errors():
    x, w, b, rm, rv = make((4, 3, 5, 5))
    outs = [torch.empty_like(x)] + [torch.empty(3) for _ in range(4)]
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("batch_norm", [x, randn(4), b, rm, rv], outs, (1, 0.1, 1e-5))  # weight of 4 channels
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("batch_norm", [x, w, b, rm, rv], [torch.empty(4, 3, 5, 4)] + outs[1:], (1, 0.1, 1e-5))
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("batch_norm", [x.double(), w, b, rm, rv], outs, (1, 0.1, 1e-5))


# ------------------------------------------------------------------ tiles


def tiles(x, cuts):
    """x split along its rows (dimension 2) at ``cuts``, each tile a view of x."""
    edges = [0, *cuts, x.shape[2]]
    return [x[:, :, a:b] for a, b in zip(edges, edges[1:])]


def f64_stats(n, c):
    return torch.full((n, c), float("nan"), dtype=torch.float64)


@pytest.mark.parametrize("shape", [(4, 3, 6, 5), (2, 8, 9, 3)])
def test_tile_statistics_chain_equals_the_python_tiles(shape):
    x0, w, b, rm, rv = make(shape, seed=11)
    c = shape[1]
    for nx, x in layouts(x0):
        parts = tiles(x, [2, 5])
        stats = []
        for p in parts:
            got = f64_stats(3, c)
            hostlib.call("tile_bn_stats", [p], [got])
            want = tiled_ops.tile_bn_stats(p)
            torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15 * float(want.abs().max()), msg=nx)
            stats.append(want)  # the Python's values: the combination is compared bit for bit
        outs = [torch.empty(c), torch.empty(c), torch.empty(c), torch.empty(c)]
        hostlib.call("tile_bn_combine", [*stats, rm, rv], outs, (len(stats), 0.1, 1e-5))
        want = tiled_ops.tile_bn_combine(stats, rm, rv, 0.1, 1e-5, torch.float32)
        for g, wv in zip(outs, want):
            assert torch.equal(g, wv), nx
        mean, invstd = want[0], want[1]
        for p in parts:
            y = torch.full(p.shape, float("nan"))
            hostlib.call("tile_bn_apply", [p, mean, invstd, w, b], [y])
            assert torch.equal(y, tiled_ops.tile_bn_apply(p, mean, invstd, w, b)), nx
        y = torch.full(parts[0].shape, float("nan"))
        hostlib.call("tile_bn_apply", [parts[0], mean, invstd, None, None], [y])
        assert torch.equal(y, tiled_ops.tile_bn_apply(parts[0], mean, invstd, None, None))


def test_tile_combine_without_running_statistics():
    x = randn(4, 3, 6, 5)
    stats = [tiled_ops.tile_bn_stats(p) for p in tiles(x, [3])]
    mean, invstd = torch.empty(3), torch.empty(3)
    hostlib.call("tile_bn_combine", [*stats, None, None], [mean, invstd, None, None], (2, 0.1, 1e-5))
    want = tiled_ops.tile_bn_combine(stats, None, None, 0.1, 1e-5, torch.float32)
    assert torch.equal(mean, want[0]) and torch.equal(invstd, want[1])


@pytest.mark.parametrize("affine", [True, False])
def test_tile_gradient_chain_equals_the_python_tiles(affine):
    shape = (4, 3, 7, 5)
    x0, w, _, rm, rv = make(shape, seed=13)
    w = w if affine else None
    go0 = randn(*shape, seed=14)
    stats = [tiled_ops.tile_bn_stats(p) for p in tiles(x0, [3])]
    mean, invstd, _, _ = tiled_ops.tile_bn_combine(stats, rm, rv, 0.1, 1e-5, torch.float32)
    c = shape[1]
    for (ng, go), (nx, x) in itertools.product(layouts(go0), layouts(x0)):
        gparts, xparts = tiles(go, [3]), tiles(x, [3])
        partials = []
        for g, p in zip(gparts, xparts):
            got = f64_stats(2, c)
            hostlib.call("tile_bn_grad_partial", [g, p, mean], [got])
            want = tiled_ops.tile_bn_grad_partial(g, p, mean)
            torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15 * float(want.abs().max()))
            partials.append(want)
        outs = [torch.empty(c), torch.empty(c), f64_stats(2, c)]
        hostlib.call("tile_bn_grad_combine", [*partials, invstd], outs, (len(partials),))
        want = tiled_ops.tile_bn_grad_combine(partials, invstd, torch.float32)
        for g, wv in zip(outs, want):
            assert torch.equal(g, wv), (ng, nx)
        sums, count = want[2], x0.numel() // c
        for g, p in zip(gparts, xparts):
            gi = torch.full(p.shape, float("nan"))
            hostlib.call("tile_bn_grad_input", [g, p, mean, invstd, w, sums], [gi], (count,))
            assert torch.equal(gi, tiled_ops.tile_bn_grad_input(g, p, mean, invstd, w, sums, count)), (ng, nx)


def test_tiled_chain_equals_whole_batch_norm_within_bound():
    """stats -> combine -> apply over three tiles gives the untiled op's output and running stats."""
    x, w, b, rm, rv = make((4, 5, 9, 4), seed=21)
    parts = tiles(x, [4, 7])
    stats = []
    for p in parts:
        stats.append(f64_stats(3, 5))
        hostlib.call("tile_bn_stats", [p], [stats[-1]])
    outs = [torch.empty(5) for _ in range(4)]
    hostlib.call("tile_bn_combine", [*stats, rm, rv], outs, (3, 0.1, 1e-5))
    want = exact_forward(x, w, b, rm, rv)
    for g, wv in zip(outs, want[1:]):
        assert_within(g, wv, EPS32 * wv.abs(), "combined statistics")
    ys = []
    for p in parts:
        ys.append(torch.empty(p.shape))
        hostlib.call("tile_bn_apply", [p, outs[0], outs[1], w, b], [ys[-1]])
    assert_within(torch.cat(ys, 2), want[0], 8 * U32 * float(want[0].abs().max()), "tiled output")
