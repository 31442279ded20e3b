"""Operator tiling across the zoo: minimum RAM untiled and tiled, graph size, and what a tiled schedule costs.

For each model, the auto tiling plan at 32 KiB and at 256 KiB (device-independent: bytes only), then on each
device a ``poet`` solve at both budgets (deadline ``--runtime``, default 3x plain backprop) with its status,
solve time, and energy / time overhead against plain untiled backprop (every node once, nothing paged).

    PYTHONPATH=. python bench/tiling.py                      # the docs/tiling.md table (long: one solve per cell)
    PYTHONPATH=. python bench/tiling.py --models resnet18_cifar --devices m0 --time-limit 60
    PYTHONPATH=. python bench/tiling.py --json out.json
    PYTHONPATH=. python bench/tiling.py --models transformer --devices m0 --budgets 32768 \
        --max-plan-nodes 2000000 --max-plan-seconds 600 --max-solve-nodes 300000  # ~200,000 nodes, minutes

Cells whose tiled graph has more than ``--max-solve-nodes`` nodes are planned but not solved (said so in the
table); a budget below the tiled minimum is reported with that minimum, not solved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poet.graph.tiling_plan import plan_tiling
from poet.hardware.cost import linear_cost_model
from poet.solve.api import SolveOptions, costed_graph, make_budget
from poet.solve.tiled import TiledProblem, solve_tiled
from poet.units import fmt_bytes

MODELS = ("resnet18_cifar", "vgg16_cifar", "bert", "transformer")
DEVICES = ("m0", "m4", "a72")
BUDGETS = (32768, 262144)


def run(
    models, devices, budgets, runtime: str, time_limit: float, max_solve_nodes: int, threads: int | None, caps=None
):
    rows = []
    for m in models:
        plans, plan_seconds = {}, {}
        for B in budgets:
            t = time.perf_counter()
            plans[B] = plan_tiling(m, B, **(caps or {}))
            p = plans[B]
            plan_seconds[B] = time.perf_counter() - t
            print(
                f"{m} @ {B} B: untiled min {p.untiled_min_bytes} B, tiled min {p.tiled_min_bytes} B, "
                f"nodes {p.nodes_before} -> {p.nodes_after}, fits {p.fits} ({time.perf_counter() - t:.1f} s plan)",
                file=sys.stderr,
                flush=True,
            )
        for dev in devices:
            g0 = costed_graph(m, dev)
            for B in budgets:
                p = plans[B]
                row = {
                    "model": m,
                    "device": dev,
                    "budget_bytes": B,
                    "untiled_min_bytes": p.untiled_min_bytes,
                    "tiled_min_bytes": p.tiled_min_bytes,
                    "nodes_before": p.nodes_before,
                    "nodes_after": p.nodes_after,
                    "tiled": p.tiled,
                    "plan_seconds": plan_seconds[B],
                    "method": None,
                    "limit": p.limit,
                    "plain_energy_j": g0.plain_energy_j,
                    "plain_runtime_s": g0.plain_runtime_s,
                    "status": None,
                    "solve_seconds": None,
                    "gap": None,
                    "energy_overhead": None,
                    "time_overhead": None,
                    "peak_ram_bytes": None,
                    "note": "",
                }
                budget = make_budget(g0, B, runtime)
                if not p.fits:
                    row["status"] = "below tiled minimum"
                    row["note"] = f"needs {p.tiled_min_bytes} B: {p.limit}"
                elif p.nodes_after > max_solve_nodes:
                    row["status"] = "not solved"
                    row["note"] = f"{p.nodes_after} nodes > --max-solve-nodes {max_solve_nodes}"
                else:
                    g = linear_cost_model(p.graph, dev) if p.tiled else g0
                    t = time.perf_counter()
                    s = solve_tiled(
                        TiledProblem(g, budget, g0, p, dev),
                        "poet",
                        SolveOptions(time_limit_s=time_limit, threads=threads),
                    )
                    row["solve_seconds"] = time.perf_counter() - t
                    row["status"] = s.status
                    row["method"] = s.report.method
                    row["gap"] = s.report.gap
                    if s.totals is not None:
                        row["energy_overhead"] = s.totals.energy_j / g0.plain_energy_j - 1
                        row["time_overhead"] = s.totals.runtime_s / g0.plain_runtime_s - 1
                        row["peak_ram_bytes"] = s.totals.peak_ram_bytes
                    else:
                        row["note"] = s.report.message[:160]
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def _pct(x):
    return "" if x is None else f"{100 * x:+.2f}%"


def table(rows) -> str:
    out = [
        (
            "| model | device | budget | min RAM untiled | min RAM tiled | nodes before -> after | status (gap) "
            "| solve time | energy overhead | time overhead |"
        ),
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        status = r["status"] or ""
        if r["gap"] is not None and r["status"] in ("feasible", "optimal"):
            status += f" ({100 * r['gap']:.2f}%)"
        if r["status"] == "below tiled minimum" and "graph's size" in r["note"]:
            status += " (auto tiling stopped at its size / time cap)"
        elif r["status"] == "no_solution":
            status += " (no schedule within the time limit)"
        elif r["status"] == "not solved":
            status += f" ({r['note']})"
        solve = "" if r["solve_seconds"] is None else f"{r['solve_seconds']:.0f} s"
        out.append(
            f"| {r['model']} | {r['device']} | {fmt_bytes(r['budget_bytes'])} | "
            f"{fmt_bytes(r['untiled_min_bytes'])} | {fmt_bytes(r['tiled_min_bytes'])} | "
            f"{r['nodes_before']} -> {r['nodes_after']} | {status} | {solve} | "
            f"{_pct(r['energy_overhead'])} | {_pct(r['time_overhead'])} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--devices", nargs="+", default=list(DEVICES))
    ap.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS), help="RAM budgets in bytes")
    ap.add_argument("--runtime", default="3x", help="deadline (default 3x plain untiled backprop)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per solve (default 120)")
    ap.add_argument(
        "--max-solve-nodes",
        type=int,
        default=100_000,
        help="plan but do not solve tiled graphs larger than this (default 100,000; graphs above "
        "SolvePolicy.tiled_portfolio_max_nodes go to the streaming page rule, linear in the graph)",
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--max-plan-nodes",
        type=int,
        default=None,
        help="auto tiling's node cap for this run (plan_tiling max_nodes; default 60,000)",
    )
    ap.add_argument(
        "--max-plan-seconds",
        type=float,
        default=None,
        help="auto tiling's planning time cap for this run (plan_tiling max_seconds; default 60 s)",
    )
    ap.add_argument("--json", help="also write the rows as JSON here")
    a = ap.parse_args(argv)
    caps = {"max_nodes": a.max_plan_nodes, "max_seconds": a.max_plan_seconds}
    rows = run(a.models, a.devices, a.budgets, a.runtime, a.time_limit, a.max_solve_nodes, a.threads, caps)
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
