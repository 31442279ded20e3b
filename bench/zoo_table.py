"""Solve every zoo network on a set of devices at two RAM budgets; print a Markdown table.

    python bench/zoo_table.py                       # all models, a72 and m4, 2 budgets, 1.2x deadline
    python bench/zoo_table.py --models linear,resnet18_cifar --time-limit 60

Budgets are placed between the two hard limits of each graph: the RAM below
which no schedule exists (largest node output plus its inputs) and the peak of
plain backprop (above which nothing needs saving). ``--fracs 0.2,0.6`` means
20% and 60% of the way from the first to the second; 0 is the tightest budget.
Each row is one `poet.solve` call with the default method and a time limit.
The numbers come from this machine and are not fixed anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time

from poet import solve
from poet.graph.zoo import MODELS
from poet.solve.api import costed_graph
from poet.solve.baselines import keep_all_peak
from poet.units import fmt_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="a72,m4")
    ap.add_argument("--fracs", default="0.2,0.6")
    ap.add_argument("--runtime", default="1.2x", help="one or more deadlines, comma separated (1.2x,2x)")
    ap.add_argument("--gap", type=float, default=1e-3, help="relative gap at which a schedule counts as optimal")
    ap.add_argument("--paging-time", default="serial")
    ap.add_argument("--strategy", default="poet")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)

    print(
        f"strategy {a.strategy}, method {a.method}, gap {a.gap:g}, paging time {a.paging_time}, "
        f"time limit {a.time_limit:.0f} s per solve\n"
    )
    print(
        "| model | device | nodes | RAM budget | deadline | status | gap | solve s | energy J | vs plain | "
        "recomputes | page-ins | peak RAM | method |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for dev in a.devices.split(","):
            g = costed_graph(model, dev)
            lo, hi = g.min_ram_bytes(), keep_all_peak(g)
            for frac, runtime in ((float(f), r) for f in a.fracs.split(",") for r in a.runtime.split(",")):
                ram = int(lo + frac * (hi - lo))
                t0 = time.perf_counter()
                s = solve(
                    g,
                    memory=ram,
                    runtime=runtime,
                    strategy=a.strategy,
                    paging_time=a.paging_time,
                    time_limit=a.time_limit,
                    threads=a.threads,
                    method=a.method,
                    gap=a.gap,
                    find_min_budgets=False,
                )
                sec = time.perf_counter() - t0
                gap = s.report.gap
                gap_s = "" if gap is None else f"{gap:.1e}"
                if s.feasible:
                    t = s.totals
                    row = (
                        f"{s.status} | {gap_s} | {sec:.1f} | {t.energy_j:.5g} | "
                        f"{t.energy_j / g.plain_energy_j - 1:+.2%} | {t.recomputes} | {t.page_ins} | "
                        f"{fmt_bytes(t.peak_ram_bytes)}"
                    )
                else:
                    row = f"{s.status} | {gap_s} | {sec:.1f} | - | - | - | - | -"
                print(
                    f"| {model} | {dev} | {len(g)} | {fmt_bytes(ram)} ({frac:.0%}) | {runtime} | {row} | "
                    f"{s.report.method} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
