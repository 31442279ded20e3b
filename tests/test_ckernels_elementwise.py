"""Activations, their gradients and unary math in C against torch, on contiguous, reversed and sliced
views: bit for bit where aten's formula has no transcendental function (relu, ReLU6/hardtanh,
hardswish, their gradients, sigmoid's gradient, integer powers), within a few ulps where it has
(sigmoid, silu, exp, log: pk_math against aten's vectorised functions).  sqrt is IEEE's (numpy's):
aten's vectorised float32 sqrt on this machine (AVX-512) is 1 ulp off in about 17% of inputs."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from ckernel_cases import empty_layouts, layouts, randn  # noqa: E402
from ckernel_specs import run_kernel, trace  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp  # noqa: E402

aten = torch.ops.aten
SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 6.0, -6.0, 2.5, -2.5, float("inf"), -float("inf"), float("nan"), 1e-30]


def inputs(shape, seed=0, scale=4.0):
    """Random values with every special value (signed zeros, infinities, NaN, the clamps' edges) in."""
    x = randn(*shape, seed=seed) * scale
    flat = x.view(-1)
    for i, v in enumerate(SPECIAL[: flat.numel()]):
        flat[i] = v
    return x


def assert_same(got, want, what=""):
    """Equal as torch's results: NaN where torch has NaN, every other element equal."""
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def ulp_distance(got, want):
    """|got - want| in ulps of float32 at want (want computed in float64)."""
    want = want.double()
    _, e = torch.frexp(want)
    ulp = torch.ldexp(torch.ones_like(want), torch.clamp(e - 24, min=-149))
    d = (got.double() - want).abs() / ulp
    d[(got.double() == want) | (torch.isnan(got) & torch.isnan(want))] = 0
    return d


UNARY_EXACT = {
    "relu": (lambda x: torch.relu(x), ()),
    "hardtanh": (lambda x: aten.hardtanh(x, 0.0, 6.0), (0.0, 6.0)),
    "hardswish": (lambda x: aten.hardswish(x), ()),
    "sqrt": (lambda x: torch.from_numpy(np.sqrt(x.numpy())), ()),  # IEEE, correctly rounded
    "neg": (torch.neg, ()),
    "abs": (torch.abs, ()),
    "reciprocal": (torch.reciprocal, ()),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's sqrt of negatives (NaN, as wanted)
@pytest.mark.parametrize("kernel", sorted(UNARY_EXACT))
def test_unary_bit_for_bit(kernel):
    fn, scalars = UNARY_EXACT[kernel]
    x0 = inputs((3, 4, 5))
    want = fn(x0)
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(x0.shape)):
        hostlib.call(kernel, [x], [out], scalars)
        assert_same(out, want, f"{kernel} {nx} -> {no}")


BINARY_EXACT = {
    "threshold_backward": (lambda g, x: aten.threshold_backward(g, x, 0.0), (0.0,)),
    "hardtanh_backward": (lambda g, x: aten.hardtanh_backward(g, x, 0.0, 6.0), (0.0, 6.0)),
    "hardswish_backward": (lambda g, x: aten.hardswish_backward(g, x), ()),
    "sigmoid_backward": (lambda g, y: aten.sigmoid_backward(g, torch.sigmoid(y)), ()),
}


@pytest.mark.parametrize("kernel", sorted(BINARY_EXACT))
def test_gradient_bit_for_bit(kernel):
    fn, scalars = BINARY_EXACT[kernel]
    x0, g0 = inputs((4, 3, 5), seed=1), randn(4, 3, 5, seed=2)
    second = torch.sigmoid(x0) if kernel == "sigmoid_backward" else x0
    want = fn(g0, x0)
    for (ng, g), (nx, x) in itertools.product(layouts(g0), layouts(second)):
        for no, out in empty_layouts(x0.shape):
            hostlib.call(kernel, [g, x], [out], scalars)
            assert_same(out, want, f"{kernel} {ng} {nx} -> {no}")


@pytest.mark.parametrize("exponent", [2.0, 3.0, -1.0, -2.0, 1.0, 0.0])
def test_pow_of_the_exponents_aten_computes_exactly(exponent):
    x = inputs((6, 7)).abs() + 0.1
    x.view(-1)[:3] = torch.tensor([0.0, float("inf"), float("nan")])
    out = torch.empty_like(x)
    hostlib.call("pow_scalar", [x], [out], [exponent])
    assert_same(out, torch.pow(x, exponent), f"x ** {exponent}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # 1/sqrt(0) = inf, as wanted
def test_square_roots_are_ieee():
    x = inputs((6, 7)).abs()
    for kernel, scalars, want in (
        ("sqrt", (), np.sqrt(x.numpy())),
        ("pow_scalar", (0.5,), np.sqrt(x.numpy())),
        ("rsqrt", (), np.float32(1) / np.sqrt(x.numpy())),
        ("pow_scalar", (-0.5,), np.float32(1) / np.sqrt(x.numpy())),
    ):
        out = torch.empty_like(x)
        hostlib.call(kernel, [x], [out], scalars)
        assert_same(out, torch.from_numpy(want), kernel)


# measured maxima (this file's inputs): sigmoid 1.9, silu 2.3, exp 1.0, log 0.9, pow 1.0
ULP_BOUND = {"sigmoid": 3, "silu": 4, "exp": 2, "log": 2, "pow_scalar": 2}


@pytest.mark.parametrize("kernel", sorted(ULP_BOUND))
def test_transcendental_within_a_few_ulps(kernel):
    x0 = inputs((5, 40), scale=6.0)
    if kernel in ("log", "pow_scalar"):
        x0 = x0.abs()
    ref = {
        "sigmoid": torch.sigmoid,
        "silu": torch.nn.functional.silu,
        "exp": torch.exp,
        "log": torch.log,
        "pow_scalar": lambda v: torch.pow(v, float(torch.tensor(1.7))),  # aten rounds the exponent to float
    }[kernel]
    scalars = (1.7,) if kernel == "pow_scalar" else ()
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(x0.shape)):
        hostlib.call(kernel, [x], [out], scalars)
        want = ref(x0.double())
        d = ulp_distance(out, want)
        assert torch.isnan(out).equal(torch.isnan(want)), (kernel, nx, no)
        assert d.max() <= ULP_BOUND[kernel], (kernel, nx, no, d.max())


def test_silu_backward_within_bound_of_the_float64_gradient():
    x0, g0 = inputs((8, 50), scale=6.0), randn(8, 50, seed=3)
    want = aten.silu_backward(g0.double(), x0.double())
    out = torch.empty_like(x0)
    hostlib.call("silu_backward", [g0, x0], [out])
    # sigmoid's error (<= 2 ulp) times the derivative's sensitivity: bounded by 5 ulp of |g| max(1, |x|)
    bound = 5 * 2.0**-24 * g0.abs() * x0.abs().clamp(min=1.0) * 2
    finite = torch.isfinite(want)
    assert ((out.double() - want).abs()[finite] <= bound[finite] + 1e-38).all()
    assert torch.isnan(out).equal(torch.isnan(want))


def test_float64_unary_math():
    x = randn(4, 5, dtype=torch.float64).abs() + 0.01
    for kernel, fn in (("sqrt", torch.sqrt), ("exp", torch.exp), ("log", torch.log), ("neg", torch.neg)):
        out = torch.empty_like(x)
        hostlib.call(kernel, [x.t()], [out.t()])
        torch.testing.assert_close(out, fn(x), rtol=4e-16, atol=0)


def test_specs_of_traced_activations_run_their_kernels():
    def f(x, g):
        return (
            torch.relu(x),
            torch.nn.functional.relu6(x),
            torch.nn.functional.hardswish(x),
            torch.clamp(x, min=-0.5),
            torch.clamp_min(x, 0.25),
            torch.clamp_max(x, 1.5),
            torch.clamp(x, -1.0, 2.0),
            torch.sigmoid(x),
            torch.nn.functional.silu(x),
            aten.silu_backward(g, x),
            aten.hardswish_backward(g, x),
            aten.hardtanh_backward(g, x, 0.0, 6.0),
            aten.threshold_backward(g, x, 0.0),
            x**2,
            torch.sqrt(x.abs() + 1),
        )

    x, g = inputs((2, 3, 4)), randn(2, 3, 4, seed=5)
    nodes, values = trace(f, x, g)
    assert nodes
    for n in nodes:
        want, got = run_kernel(n, values)
        for w, o in zip(want, got):
            if n.target == aten.hardswish_backward.default:  # aten's scalar and vector loops differ at NaN
                o, w = o[~torch.isnan(x)], w[~torch.isnan(x)]
            if n.target in (aten.sigmoid.default, aten.silu.default, aten.silu_backward.default, aten.sqrt.default):
                torch.testing.assert_close(o, w, rtol=1e-6, atol=1e-30, equal_nan=True)
            else:
                assert_same(o, w, n.name)


def test_float32_only_kernels_refuse_other_dtypes_at_the_spec():
    nodes, _ = trace(lambda x: torch.relu(x), torch.ones(3, dtype=torch.float64))
    with pytest.raises(UnsupportedOp, match="float32"):
        from poet.cbackend.vocabulary import spec_for

        spec_for(nodes[0])


def test_bad_calls_are_errors_not_crashes():
    x = torch.randn(3)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("relu", [x, x], [torch.empty(3)])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("relu", [x], [torch.empty(4)])  # shapes differ
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("hardswish", [x.double()], [torch.empty(3, dtype=torch.float64)])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("hardtanh", [x], [torch.empty(3)], [0.0])  # one bound missing
