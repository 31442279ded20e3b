"""The lower bounds of the issue-33 ``m4`` rows, each alone: the eviction cover, the reader-gap cover and the
residency bound, with the residency ILP's size and the seconds each takes (docs/tiling.md).

    PYTHONPATH=. python bench/tiled_bounds.py                          # the three rows, 120 s per bound
    PYTHONPATH=. python bench/tiled_bounds.py --rows vgg16_cifar:32768 --limit 300

A row is MODEL:RAM_BYTES, tiled as ``poet solve --model MODEL --device m4 --memory RAM --runtime 3x``
tiles it.  The residency ILP is solved in a child process (``poet/solve/lp/bound_process.py``) as the
portfolio's residency-bound phase solves a large one; ``--max-nonzeros`` skips larger ILPs (they are
still counted while built, up to that size).
"""

from __future__ import annotations

import argparse
import time

from poet.solve.bounds import eviction_cover
from poet.solve.problem import tiled_problem
from poet.solve.reader_gaps import reader_gap_bound
from poet.solve.residency_bound import residency_bound

ROWS = ("resnet18_cifar:262144", "vgg16_cifar:32768", "resnet18_cifar:32768")


def joules(bound: float | None, reason: str) -> str:
    """A bound, or why it was not computed."""
    return f"{bound:.4f} J" if bound is not None else f"- ({reason})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), help="MODEL:RAM_BYTES (default: the three rows)")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per bound (default 120)")
    ap.add_argument("--max-nonzeros", type=int, default=10_000_000, help="the largest residency ILP solved")
    a = ap.parse_args()
    print("| model | RAM (B) | nodes | plain | cover | reader-gap cover | residency bound | its nonzeros | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in a.rows:
        model, _, ram = row.partition(":")
        p = tiled_problem(model, "m4", memory=int(ram), runtime="3x")
        g, b = p.graph, p.budget
        cover = eviction_cover(g, b, time_limit=a.limit).bound
        gaps = reader_gap_bound(g, b, time_limit=a.limit)
        t0 = time.perf_counter()
        res = residency_bound(g, b, time_limit=a.limit, max_nodes=10**6, max_nonzeros=a.max_nonzeros, child_past=0)
        took = time.perf_counter() - t0
        print(
            f"| {model} | {int(ram):,} | {len(g.nodes):,} | {g.plain_energy_j:.4f} J | {cover:.4f} J | "
            f"{joules(gaps.bound, gaps.reason)} | {joules(res.bound, res.reason)} | {res.nonzeros:,} | {took:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
