"""Derives the erf coefficients of poet/cbackend/runtime/pk_math.c (ERF_POLY) and prints them as C.

On each interval [0.5 + i/2, 1 + i/2] (i = 0..6) erf is fitted by a degree-8 polynomial in
t = x - midpoint: a least-squares Chebyshev fit on 400 Chebyshev nodes (close to the minimax
polynomial), converted to powers of t.  The constant term is printed as a float hi + lo pair so that
its rounding to float costs nothing; the other coefficients are rounded to float.  The largest
absolute error of the double polynomial on each interval is printed too (about 1e-11; float
evaluation then adds its rounding, which tests/test_ckernels_math.py bounds at 2 ulp).

    python bench/pk_math_fit.py
"""

from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import chebyshev, polynomial

DEGREE = 8
NODES = 400


def fit(f, lo: float, hi: float, degree: int = DEGREE) -> tuple[float, np.ndarray]:
    """(midpoint, power-series coefficients in t = x - midpoint) of a Chebyshev fit of f on [lo, hi]."""
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    u = np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)
    y = np.array([f(mid + half * v) for v in u])
    coef = chebyshev.cheb2poly(chebyshev.chebfit(u, y, degree))
    return mid, coef / half ** np.arange(degree + 1)


def main() -> None:
    print("static const float ERF_POLY[7][10] = {")
    for i in range(7):
        lo = 0.5 + i / 2
        mid, p = fit(math.erf, lo, lo + 0.5)
        xs = np.linspace(lo, lo + 0.5, 10001)
        err = max(abs(polynomial.polyval(xs - mid, p) - np.array([math.erf(v) for v in xs])))
        hi = np.float32(p[0])
        parts = [float(hi), float(np.float32(p[0] - float(hi)))] + [float(np.float32(c)) for c in p[1:]]
        print("    {" + ", ".join(f"{v!r}f" for v in parts) + f"}},  /* [{lo}, {lo + 0.5}]: |error| {err:.1e} */")
    print("};")


if __name__ == "__main__":
    main()
