"""Accuracy of POET's deterministic C math library (poet/cbackend/runtime/pk_math.c).

Sweeps each function over its domain (points evenly spaced in bit pattern, so every binade counts)
and prints the largest and mean error in ulps against torch/numpy in float64, the input where the
largest error occurs and the share of results that are the correctly rounded value.

    python bench/pk_math_accuracy.py                 # 2^22 points per float function, 2^20 per double one
    python bench/pk_math_accuracy.py --points 1048576
"""

from __future__ import annotations

import argparse

from poet.cbackend import mathcheck


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1 << 22, help="points per float32 function (double: a quarter)")
    args = ap.parse_args(argv)
    print("| function | dtype | points | max error (ulp) | mean error (ulp) | worst input | correctly rounded |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = [(n, "float32", args.points) for n in mathcheck.FLOAT_FUNCTIONS]
    rows += [(n, "float64", args.points // 4) for n in mathcheck.DOUBLE_FUNCTIONS]
    for name, dtype, points in rows:
        a = mathcheck.measure(name, points, dtype)
        print(
            f"| {a.name} | {a.dtype} | {a.points} | {a.max_ulp:.3f} | {a.mean_ulp:.4f} | {a.worst_input!r} | "
            f"{100 * a.exact_fraction:.2f}% |"
        )


if __name__ == "__main__":
    main()
