#!/usr/bin/env python3
"""Solve-speed benchmark (issue #4): the faithful POET MILP next to the faster methods.

For every case (zoo network x device x runtime multiplier) and every method it
prints nodes, variables, constraints, solve seconds, status, relative gap and
the validated energy, in one table (markdown with ``--markdown``).

Budgets: RAM at ``--ram-frac`` of the way from the smallest possible RAM (largest
node plus its inputs) to the keep-everything peak -- tight enough that remat and
paging are both active -- and the deadline at each ``--mult`` times one plain
forward+backward.  Paging time counts as ``--paging-time`` (default serial).

    python bench/bench_solve.py --methods faithful,fast --time-limit 120
    python bench/bench_solve.py --models resnet18_cifar --devices a72 --mult 1.2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poet.schedule.core import Budget  # noqa: E402
from poet.solve import SolveOptions, costed_graph, solve_costed  # noqa: E402
from poet.solve.baselines import keep_all_peak  # noqa: E402

MODELS = ["linear", "vgg16_cifar", "vgg16", "resnet18_cifar", "resnet18", "transformer", "bert", "resnet50"]


def aten_resnet(blocks: int, device: str):
    """A residual conv net exported op by op (about 16 nodes per block), priced on ``device``."""
    from poet.demo_models import resnet_training_graph

    return resnet_training_graph(blocks, device)


def case_budget(g, mult: float, ram_frac: float, paging_time: str) -> Budget:
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return Budget(ram_bytes=int(lo + ram_frac * (hi - lo)), runtime_s=mult * g.plain_runtime_s, paging_time=paging_time)


def run_one(g, budget, method: str, time_limit: float, threads: int, gap: float) -> dict:
    t0 = time.perf_counter()
    opts = SolveOptions(time_limit_s=time_limit, threads=threads, gap=gap, method=method, find_min_budgets=False)
    s = solve_costed(g, budget, "poet", opts)
    wall = time.perf_counter() - t0
    r = s.report
    return {
        "method": method,
        "used": r.method,
        "vars": r.milp.variables if r.milp else 0,
        "rows": r.milp.constraints if r.milp else 0,
        "seconds": wall,
        "status": s.status,
        "gap": r.gap,
        "energy_j": s.totals.energy_j if s.steps else None,
        "bound_j": r.bound_energy_j,
    }


def fmt(r: dict, case: dict) -> str:
    gap = "-" if r["gap"] is None else f"{r['gap']:.2e}"
    e = "-" if r["energy_j"] is None else f"{r['energy_j']:.6g}"
    v = "-" if r["vars"] is None else str(r["vars"])
    c = "-" if r["rows"] is None else str(r["rows"])
    return (
        f"| {case['model']} | {case['device']} | {case['mult']}x | {case['ram_bytes']} | {case['nodes']} | "
        f"{r['method']} ({r['used']}) | {v} | {c} | {r['seconds']:.1f} | {r['status']} | {gap} | {e} |"
    )


HEADER = (
    "| model | device | runtime | RAM budget (B) | nodes | method (used) | vars | rows | seconds | status | "
    "gap | energy (J) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="a72,m4")
    ap.add_argument("--mult", default="1.2,2")
    ap.add_argument("--ram-frac", type=float, default=0.3)
    ap.add_argument("--paging-time", default="serial")
    ap.add_argument("--methods", default="faithful,auto")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gap", type=float, default=1e-2)
    ap.add_argument("--json", help="append one JSON line per result to this file")
    ap.add_argument(
        "--graphs",
        default="",
        help="comma-separated poet-graph/1 files (e.g. aten-level exports, "
        "already costed for a device) benchmarked after the zoo models; --models '' skips the zoo",
    )
    ap.add_argument(
        "--aten-resnet",
        default="",
        help="comma-separated block counts: export "
        "poet.demo_models.SmallResNet(channels=16, blocks=N) on a 1x3x32x32 batch at aten "
        "granularity (torch needed) and benchmark it on each --devices",
    )
    a = ap.parse_args(argv)
    print(
        f"# gap {a.gap}, time limit {a.time_limit} s, threads {a.threads}, ram-frac {a.ram_frac}, "
        f"paging time {a.paging_time}",
        flush=True,
    )
    print(HEADER, flush=True)
    todo = [(m, d, None) for m in a.models.split(",") if m for d in a.devices.split(",")]
    todo += [(Path(p).stem, "file", p) for p in a.graphs.split(",") if p]
    todo += [(f"aten_resnet{n}", d, int(n)) for n in a.aten_resnet.split(",") if n for d in a.devices.split(",")]
    for model, dev, src in todo:
        if True:
            if isinstance(src, int):
                g = aten_resnet(src, dev)
            else:
                g = costed_graph(src if src else model, None if src else dev)
            for mult in (float(m) for m in a.mult.split(",")):
                b = case_budget(g, mult, a.ram_frac, a.paging_time)
                case = {"model": model, "device": dev, "mult": mult, "ram_bytes": b.ram_bytes, "nodes": len(g.nodes)}
                for m in a.methods.split(","):
                    r = run_one(g, b, m, a.time_limit, a.threads, a.gap)
                    print(fmt(r, case), flush=True)
                    if a.json:
                        with open(a.json, "a") as fh:
                            fh.write(
                                json.dumps({**case, **r, "ram_frac": a.ram_frac, "paging_time": a.paging_time}) + "\n"
                            )


if __name__ == "__main__":
    main()
