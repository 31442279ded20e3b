"""Convolutions in C (forward, input/weight/bias gradients, the tile kernels) against float64 torch.

The C kernels sum in a fixed order that is not oneDNN's, so results are compared with the float64
value within the first-order bound of float32 summation: (terms + 2) u sum|terms| for a sequential
sum (forward, input gradient), (row length + 64) u sum|terms| for the weight and bias gradients'
row sums combined by a cascade.  sum|terms| is the same convolution of |values| in float64.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402
from ckernel_specs import run_kernel, trace  # noqa: E402

from poet.cbackend import hostlib, vocabulary  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten

# (N, C, H, W), (O, KH, KW), stride, padding, dilation, groups, bias
CASES = {
    "3x3": ((2, 3, 7, 6), (4, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    "strided stem": ((2, 3, 8, 8), (4, 3, 3), (2, 2), (1, 1), (1, 1), 1, False),
    "depthwise s2": ((2, 4, 7, 7), (4, 3, 3), (2, 2), (1, 1), (1, 1), 4, False),
    "pointwise": ((3, 6, 4, 5), (5, 1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    "grouped dilated": ((1, 4, 9, 8), (6, 3, 2), (2, 1), (0, 2), (2, 1), 2, True),
}


def geometry(case):
    (_, c, _, _), (o, kh, kw), stride, padding, dilation, groups, bias = CASES[case]
    return (c // groups, kh, kw, o), stride, padding, dilation, groups, bias


def make(case, seed=0):
    (n, c, h, w), (o, kh, kw), stride, padding, dilation, groups, bias = CASES[case]
    x = randn(n, c, h, w, seed=seed)
    wt = randn(o, c // groups, kh, kw, seed=seed + 1)
    b = randn(o, seed=seed + 2) if bias else None
    return x, wt, b, (stride, padding, dilation, groups)


def f64(t, absolute=False):
    return None if t is None else (t.abs() if absolute else t).double()


def scalars(stride, padding, dilation, groups):
    return (*stride[:1], *stride[1:], padding[0], padding[1], dilation[0], dilation[1], groups)


def conv64(x, w, b, stride, padding, dilation, groups):
    d = None if b is None else b.double()
    return aten.convolution(x.double(), w.double(), d, stride, padding, dilation, False, [0, 0], groups)


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_within_the_summation_bound_on_every_layout(case):
    x0, w0, b, geo = make(case)
    want = conv64(x0, w0, b, *geo)
    bound = (w0[0].numel() + 2) * U32 * conv64(x0.abs(), w0.abs(), None if b is None else b.abs(), *geo)
    for (nx, x), (nw, w) in itertools.product(layouts(x0), layouts(w0)):
        for no, out in empty_layouts(want.shape):
            hostlib.call("convolution", [x, w, b], [out], scalars(*geo))
            assert_within(out, want, bound, f"{case}: x {nx}, w {nw}, out {no}")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, False), (False, False, True)])
def test_backward_every_output_mask(case, mask):
    x0, w0, b, geo = make(case, seed=3)
    stride, padding, dilation, groups = geo
    go0 = randn(*conv64(x0, w0, b, *geo).shape, seed=7)
    args = (stride, padding, dilation, False, [0, 0], groups, list(mask))
    want = aten.convolution_backward(go0.double(), x0.double(), w0.double(), [w0.shape[0]], *args)
    mag = aten.convolution_backward(go0.abs().double(), x0.abs().double(), w0.abs().double(), [w0.shape[0]], *args)
    o, kh, kw = w0.shape[0], w0.shape[2], w0.shape[3]
    rows = go0.shape[3] + 64
    bounds = ((o // groups * kh * kw + 2) * U32, rows * U32, rows * U32)
    for (ng, go), (nx, x) in itertools.product(layouts(go0), layouts(x0)):
        outs = [torch.full(like.shape, float("nan")) if m else None for m, like in zip(mask, (x0, w0, go0[0, :, 0, 0]))]
        hostlib.call("convolution_backward", [go, x, w0], outs, scalars(*geo))
        for i, name in enumerate(("grad_input", "grad_weight", "grad_bias")):
            if mask[i]:
                assert_within(outs[i], want[i], bounds[i] * mag[i], f"{case} {name}: go {ng}, x {nx}")


def test_one_d_convolution_and_its_backward():
    x, w, b = randn(2, 3, 11), randn(4, 3, 3, seed=1), randn(4, seed=2)
    out = torch.empty(2, 4, 6)
    hostlib.call("convolution", [x, w, b], [out], (1, 2, 0, 1, 1, 1, 1))  # stride 2, padding 1
    want = aten.convolution(x.double(), w.double(), b.double(), [2], [1], [1], False, [0], 1)
    assert_within(out, want, 11 * U32 * want.abs().max(), "conv1d")
    go = randn(2, 4, 6, seed=3)
    gi, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty(4)
    hostlib.call("convolution_backward", [go, x, w], [gi, gw, gb], (1, 2, 0, 1, 1, 1, 1))
    ref = aten.convolution_backward(go.double(), x.double(), w.double(), [4], [2], [1], [1], False, [0], 1, [True] * 3)
    for got, r in zip((gi, gw, gb), ref):
        assert_within(got, r, 80 * U32 * r.abs().max(), "conv1d backward")


def test_traced_convolutions_run_through_their_specs():
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    dw = torch.nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=6, bias=False)

    def step(x):
        y = dw(conv(x))
        (gx,) = torch.autograd.grad(y.square().sum(), [x])
        return y, gx

    x = randn(2, 4, 9, 9).requires_grad_()
    nodes, values = trace(step, x)
    seen = set()
    for n in nodes:
        if n.target not in (aten.convolution.default, aten.convolution_backward.default):
            continue
        seen.add(n.target)
        want, got = run_kernel(n, values)
        for w, g in zip(want, got):
            if w is not None:
                torch.testing.assert_close(g, w.detach(), rtol=2e-5, atol=2e-5 * float(w.detach().abs().max()))
    assert seen == {aten.convolution.default, aten.convolution_backward.default}


def test_transposed_and_3d_convolutions_are_refused_with_the_node_named():
    nodes, _ = trace(
        lambda x, w: aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
        randn(1, 2, 4, 4),
        randn(2, 3, 3, 3),
    )
    with pytest.raises(UnsupportedOp, match="transposed"):
        vocabulary.spec_for(nodes[0])
    nodes, _ = trace(lambda x, w: torch.nn.functional.conv3d(x, w), randn(1, 2, 3, 3, 3), randn(2, 2, 1, 1, 1))
    conv = [n for n in nodes if n.target == aten.convolution.default]
    with pytest.raises(UnsupportedOp, match="1-d and 2-d"):
        vocabulary.spec_for(conv[0])


def test_inconsistent_shapes_are_errors_not_overruns():
    x, w = randn(1, 3, 5, 5), randn(4, 3, 3, 3)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):  # output one row too many
        hostlib.call("convolution", [x, w, None], [torch.empty(1, 4, 6, 5)], (1, 1, 1, 1, 1, 1, 1))
    with pytest.raises(hostlib.KernelError, match="bad arguments"):  # channels not divisible by groups
        hostlib.call("convolution", [x, randn(4, 1, 3, 3), None], [torch.empty(1, 4, 5, 5)], (1, 1, 1, 1, 1, 1, 2))
    with pytest.raises(hostlib.KernelError, match="bad arguments"):  # bias of the wrong length
        hostlib.call("convolution", [x, w, randn(3)], [torch.empty(1, 4, 5, 5)], (1, 1, 1, 1, 1, 1, 1))


# ------------------------------------------------------------------ tiles


def pieces_of(x, lo, hi, cuts):
    """Rows [lo, hi) of x as views split at the given cut rows (as a tile reads its neighbours)."""
    edges = [lo, *[c for c in cuts if lo < c < hi], hi]
    return [x[:, :, a:b] for a, b in zip(edges, edges[1:])]


def input_rows(o0, o1, kh, sh, ph, dh, h):
    """The input rows output rows [o0, o1) read, clipped to [0, h), and the zero rows beyond."""
    start, stop = o0 * sh - ph, (o1 - 1) * sh - ph + dh * (kh - 1) + 1
    return max(start, 0), min(stop, h), max(0, -start), max(0, stop - h)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tile_conv_equals_the_python_tile(case):
    x0, w0, b, (stride, padding, dilation, groups) = make(case, seed=11)
    kh, oh = w0.shape[2], conv64(x0, w0, b, stride, padding, dilation, groups).shape[2]
    sc = lambda k, top, bottom: (k, top, bottom, stride[0], stride[1], padding[1], dilation[0], dilation[1], groups)
    for o0, o1 in ((0, oh // 2), (oh // 2, oh), (0, oh)):
        lo, hi, top, bottom = input_rows(o0, o1, kh, stride[0], padding[0], dilation[0], x0.shape[2])
        for nx, x in layouts(x0):
            ps = pieces_of(x, lo, hi, [x0.shape[2] // 3, x0.shape[2] // 2])
            geo = (stride, padding, dilation, groups)
            want = tiled_ops.tile_conv([p.double() for p in ps], top, bottom, w0.double(), f64(b), *geo)
            absps = [p.abs().double() for p in ps]
            mag = tiled_ops.tile_conv(absps, top, bottom, w0.abs().double(), f64(b, True), *geo)
            out = torch.full(want.shape, float("nan"))
            hostlib.call("tile_conv", [*ps, w0, b], [out], sc(len(ps), top, bottom))
            assert_within(out, want, (w0[0].numel() + 2) * U32 * mag, f"{case} rows {o0}:{o1} {nx}")


def grad_region(a, b, kh, sh, ph, dh, oh):
    """The output rows [j0, j1) whose windows reach input rows [a, b); the region their windows span."""
    j0 = max(0, -((-(a + ph - dh * (kh - 1))) // sh))
    j1 = min(oh, (b - 1 + ph) // sh + 1)
    return j0, j1, j0 * sh - ph, max(0, (j1 - j0 - 1) * sh + dh * (kh - 1) + 1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tile_conv_input_grad_equals_the_python_tile(case):
    x0, w0, b, (stride, padding, dilation, groups) = make(case, seed=13)
    go0 = randn(*conv64(x0, w0, b, stride, padding, dilation, groups).shape, seed=14)
    kh, h, oh = w0.shape[2], x0.shape[2], go0.shape[2]
    for a, bb in ((0, h // 2), (h // 2, h), (0, h), (h - 1, h)):
        j0, j1, start, rows = grad_region(a, bb, kh, stride[0], padding[0], dilation[0], oh)
        ps = pieces_of(go0, j0, j1, [oh // 2]) if j1 > j0 else []
        args = (start, rows, a, bb, list(x0.shape), None, stride, padding, dilation, groups)
        want = tiled_ops.tile_conv_input_grad([p.double() for p in ps], *args[:5], w0.double(), *args[6:])
        mag = tiled_ops.tile_conv_input_grad([p.abs().double() for p in ps], *args[:5], w0.abs().double(), *args[6:])
        out = torch.full(want.shape, float("nan"))
        sc = (len(ps), start, rows, a, bb, stride[0], stride[1], padding[1], dilation[0], dilation[1], groups)
        hostlib.call("tile_conv_input_grad", [*ps, w0], [out], sc)
        terms = w0.shape[0] // groups * w0.shape[2] * w0.shape[3] + 2
        assert_within(out, want, terms * U32 * mag, f"{case} input rows {a}:{bb}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_tile_conv_weight_grad_accumulates_like_the_python_tile(case):
    x0, w0, b, (stride, padding, dilation, groups) = make(case, seed=17)
    go0 = randn(*conv64(x0, w0, b, stride, padding, dilation, groups).shape, seed=18)
    kh, oh = w0.shape[2], go0.shape[2]
    acc_w = acc_b = None
    want_b = b is not None
    bias_sizes = [w0.shape[0]]
    for o0, o1 in ((0, oh // 2), (oh // 2, oh)):
        lo, hi, top, bottom = input_rows(o0, o1, kh, stride[0], padding[0], dilation[0], x0.shape[2])
        ps = pieces_of(x0, lo, hi, [x0.shape[2] // 2])
        go = go0[:, :, o0:o1]
        args = (top, bottom, w0.double(), bias_sizes, stride, padding, dilation, groups, True, want_b)
        want = tiled_ops.tile_conv_weight_grad(
            None if acc_w is None else acc_w.double(),
            None if acc_b is None else acc_b.double(),
            go.double(),
            [p.double() for p in ps],
            *args,
        )
        gw, gb = torch.full(w0.shape, float("nan")), torch.full(bias_sizes, float("nan")) if want_b else None
        sc = (len(ps), top, bottom, stride[0], stride[1], padding[1], dilation[0], dilation[1], groups)
        hostlib.call("tile_conv_weight_grad", [acc_w, acc_b, go, *ps], [gw, gb], sc)
        scale = float(go.abs().max() * x0.abs().max()) * go[:, 0].numel()
        assert_within(gw, want[0], (go.shape[3] + 70) * U32 * scale, f"{case} weight rows {o0}:{o1}")
        if want_b:
            assert_within(gb, want[1], 70 * U32 * float(go.abs().sum()), f"{case} bias rows {o0}:{o1}")
        acc_w, acc_b = gw, gb
