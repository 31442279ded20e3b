"""The tiling harness at a larger size: the worst measured error of every aten op's tiled rule.

Runs the cases of ``tests/test_tiling_harness.py`` (one op at a time, drawn shapes, tile counts
and layouts) with more examples and prints, per op: examples run, how many were tiled, how many
were bit for bit, and the worst error in units of the bound (``tests/numerics.py``: relative to
float32 autograd, or to float64 where float32 is itself inexact).  docs/torch.md, "Tiling
numerics", quotes it.

    PYTHONPATH=. python bench/tiling_harness.py [--examples 30] [--only conv]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tiling_cases import cases  # noqa: E402
from tiling_harness import EagerFailed, run_case  # noqa: E402


def measure(op, build, examples: int) -> dict:
    row = {"examples": 0, "tiled": 0, "bitwise": 0, "worst": 0.0, "exact_case": False, "eager_failed": 0}

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate,),
    )
    @given(data=st.data())
    def run(data):
        case = build(data.draw)
        try:
            out = run_case(case, data.draw(st.integers(2, 4)))
        except EagerFailed:
            row["eager_failed"] += 1
            return
        row["examples"] += 1
        row["tiled"] += out.tiled
        row["bitwise"] += out.bitwise
        row["worst"] = max(row["worst"], out.error)
        row["exact_case"] = case.exact

    run()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--only", default="", help="ops whose name contains this")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    t0 = time.time()
    print(f"{'aten op':58} {'examples':>8} {'tiled':>6} {'bitwise':>8} {'worst / bound':>14}")
    worst_all = 0.0
    for op, build in sorted(cases().items(), key=lambda kv: str(kv[0])):
        if args.only not in str(op):
            continue
        r = measure(op, build, args.examples)
        worst_all = max(worst_all, r["worst"])
        flag = " (must be bitwise)" if r["exact_case"] else ""
        flag += f" ({r['eager_failed']} draws eager PyTorch itself cannot run)" if r["eager_failed"] else ""
        print(f"{str(op):58} {r['examples']:8d} {r['tiled']:6d} {r['bitwise']:8d} {r['worst']:14.3g}{flag}")
    print(f"worst over all ops: {worst_all:.3g} x the bound; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
