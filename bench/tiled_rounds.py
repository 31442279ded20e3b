"""The portfolio with and without the neighbourhood rounds of the MILP phase, side by side, on the small
tiled rows where its CP-SAT pass alone stops in local optima (docs/tiling.md, issue 33).

    PYTHONPATH=. python bench/tiled_rounds.py                       # cnn2-t2 cnn3-t2 resnet-t2, 2 runs, 60 s
    PYTHONPATH=. python bench/tiled_rounds.py --rows resnet-t2 --runs 5 --limit 30

Each run solves the row as ``poet solve`` does (``method="auto"``) twice, one after the other: with
``SolvePolicy.tiled_neighbourhood_share`` 0 (CP-SAT alone in the pass) and with the default (rounds of
CP-SAT and the neighbourhood search); then the neighbourhood search alone (``improve_by_neighbourhoods``)
for the same time on the row's MILP, from the greedy rules' cheapest plan.  Every schedule is validated (the first two
by ``poet.solve``, the third here); the energies are in mJ with their gap to the cheapest schedule of
bench/tiled_truth.json (``best known``) and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiled_truth  # noqa: E402

from poet.schedule import validate  # noqa: E402
from poet.solve.milp import build, decode, plan_to_start  # noqa: E402
from poet.solve.milp.neighbourhoods import improve_by_neighbourhoods  # noqa: E402
from poet.solve.policy import SolvePolicy  # noqa: E402
from poet.solve.search.greedy import best_greedy  # noqa: E402
from poet.solve.stage.emit import emit  # noqa: E402

ROWS = ("cnn2-t2", "cnn3-t2", "resnet-t2")


def alone(name: str, limit: float, seed: int) -> float:
    """The neighbourhood search alone for ``limit`` seconds from the greedy rules' plan: the validated energy."""
    s = tiled_truth.solve_row(name, method="heuristic", time_limit=5)
    g, budget = s.graph, s.budget
    f = build(g, budget, tighten=True)
    x, why = plan_to_start(f, g, best_greedy(g, budget, time_limit=10.0))
    if x is None:
        raise SystemExit(f"{name}: the rules' plan does not map onto the MILP ({why})")
    run = improve_by_neighbourhoods(f, g, x, time_limit=limit, seed=seed)
    return validate(g, emit(g, decode(f, run.x)), budget).energy_j


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=sorted(tiled_truth.INSTANCES))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per solve (default 60)")
    a = ap.parse_args()
    rows = json.loads(tiled_truth.DATA_FILE.read_text())
    print("| row | run | CP-SAT alone (mJ) | rounds (mJ) | neighbourhoods alone (mJ) | best known (mJ) | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in a.rows:
        best = tiled_truth.reference(rows[name])[0] if name in rows else None
        for run in range(a.runs):
            out = []
            for share in (0.0, SolvePolicy().tiled_neighbourhood_share, None):
                if share is None:
                    e = alone(name, a.limit, run)
                else:
                    policy = SolvePolicy(tiled_neighbourhood_share=share)
                    e = tiled_truth.solve_row(name, method="auto", time_limit=a.limit, policy=policy).totals.energy_j
                out.append(f"{e * 1e3:.5f}" + (f" ({e / best - 1:+.2%})" if best else ""))
            known = f"{best * 1e3:.5f}" if best else "-"
            print(
                f"| {name} | {run + 1} | {out[0]} | {out[1]} | {out[2]} | {known} | {os.getloadavg()[0]:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
