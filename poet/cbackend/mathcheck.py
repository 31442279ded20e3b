"""How accurate ``runtime/pk_math.c`` is: dense sweeps of floats, errors in ulps against a reference.

The reference is torch's (or numpy's) float64 function, whose error is far below a float32 ulp; for
the double functions it is numpy's, which is within one ulp of the exact value, so an error measured
here of ``e`` double ulps is at most ``e + 1`` from the exact value.  Used by
tests/test_ckernels_math.py (which asserts the bounds documented in pk_math.h) and
bench/pk_math_accuracy.py (which prints the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import hostlib

# name -> (function number in kernels_math.c, domain swept)
FLOAT_FUNCTIONS = {
    "sqrt": (0, 0.0, 3.4e38),
    "exp": (1, -104.0, 89.0),
    "log": (2, 0.0, 3.4e38),
    "log1p": (3, -1.0, 3.4e38),
    "expm1": (4, -20.0, 89.0),
    "tanh": (5, -10.0, 10.0),
    "erf": (6, -5.0, 5.0),
    "sigmoid": (7, -110.0, 110.0),
}
DOUBLE_FUNCTIONS = {"sqrt": (0, 0.0, 1.7e308), "exp": (1, -745.0, 709.7), "log": (2, 0.0, 1.7e308)}


@dataclass(frozen=True)
class MathAccuracy:
    """One function's errors over one sweep."""

    name: str
    dtype: str  # 'float32' or 'float64'
    points: int
    max_ulp: float
    mean_ulp: float
    worst_input: float
    exact_fraction: float  # share of results bit-identical to the (rounded) reference


def float_sweep(lo: float, hi: float, n: int, dtype=np.float32) -> np.ndarray:
    """About ``n`` values of ``dtype`` from ``lo`` to ``hi``, evenly spaced in bit pattern (so every
    binade, subnormals included, gets its share), endpoints included."""
    uints = np.uint32 if dtype == np.float32 else np.uint64
    sign = 1 << (8 * np.dtype(dtype).itemsize - 1)

    def key(v):  # order-preserving integer of a float
        u = int(np.array([v], dtype).view(uints)[0])
        return -(u ^ sign) if u & sign else u

    ks = np.unique(np.linspace(key(lo), key(hi), n).round().astype(np.int64))
    mag = np.abs(ks).astype(np.uint64)
    return np.where(ks < 0, mag | np.uint64(sign), mag).astype(uints).view(dtype)


def _reference(name: str, x64):
    import torch

    if name == "sqrt":
        return torch.from_numpy(np.sqrt(x64.numpy()))  # IEEE sqrt (torch's float64 sqrt is not always)
    return getattr(torch, name)(x64)


def ulp_errors(y, ref, mantissa_bits: int, min_exponent: int):
    """|y - ref| in units of the last place of ``ref`` (the float format's ulp at ref's binade,
    subnormal spacing below; a correctly rounded result is within 0.5); 0 where ``y`` is the infinity
    ``ref`` rounds to, or both are NaN."""
    import torch

    ref = ref.double()
    y = y.double()
    _, e = torch.frexp(ref)
    ulp = torch.ldexp(torch.ones_like(ref), torch.clamp(e - mantissa_bits, min=min_exponent))
    err = (y - ref).abs() / ulp
    rounded = ref.float().double() if mantissa_bits == 24 else ref
    same = (torch.isinf(rounded) & (y == rounded)) | (torch.isnan(y) & torch.isnan(ref))
    err[same] = 0.0
    return err


def measure(name: str, points: int = 1 << 20, dtype: str = "float32") -> MathAccuracy:
    """Evaluate pk_math's ``name`` over a dense sweep of its domain and compare with the reference."""
    import torch

    table = FLOAT_FUNCTIONS if dtype == "float32" else DOUBLE_FUNCTIONS
    fn, lo, hi = table[name]
    x = torch.from_numpy(float_sweep(lo, hi, points, np.float32 if dtype == "float32" else np.float64).copy())
    y = torch.empty_like(x)
    hostlib.call("math_eval", [x], [y], [fn])
    with np.errstate(divide="ignore"):
        ref = _reference(name, x.double())
    bits, emin = (24, -149) if dtype == "float32" else (53, -1074)
    err = ulp_errors(y, ref, bits, emin)
    i = int(err.argmax())
    rounded = ref.float() if dtype == "float32" else ref
    exact = (y == rounded) | (torch.isnan(y) & torch.isnan(rounded))
    return MathAccuracy(
        name,
        dtype,
        len(x),
        float(err.max()),
        float(err.mean()),
        float(x[i]),
        float(exact.double().mean()),
    )
