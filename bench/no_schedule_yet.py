"""A solve with no schedule yet must keep searching until its limit (issue 37, "A time limit spent on nothing").

    python bench/no_schedule_yet.py                         # layered:250 seeds, remat and poet, 80%, 60 s
    python bench/no_schedule_yet.py --seeds 11,39 --strategies remat --time-limit 30

Generated random layered DAGs (``layered:NODES:SEED``, the family of the published 250-node benchmark
graphs) at a fraction of their topological (keep-all) peak, no deadline, one ``poet.solve`` per
seed and strategy.  Prints, per solve: the status, what found the schedule, the wall seconds, the gap,
and how the search for a first schedule went (its record in the report, where it ran).  The default
seeds are the first eight and the seven of 1-60 where the four idle-gap covers fail at 80%.
"""

from __future__ import annotations

import argparse
import sys
import time

from poet import solve
from poet.solve.api import costed_graph

SEEDS = "1,2,3,4,5,6,7,8,11,19,28,39,42,52,57"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=250)
    ap.add_argument("--seeds", default=SEEDS)
    ap.add_argument("--strategies", default="remat,poet")
    ap.add_argument("--memory", default="80%")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--device", default="a72")
    a = ap.parse_args(argv)
    print(f"layered:{a.nodes}:SEED on {a.device} at {a.memory} of the peak, no deadline, {a.time_limit:.0f}-s limit\n")
    print("| seed | strategy | status | method | wall s | gap | first-schedule search |")
    print("|---|---|---|---|---|---|---|")
    found = {}
    for strategy in a.strategies.split(","):
        for seed in a.seeds.split(","):
            g = costed_graph(f"layered:{a.nodes}:{seed}", a.device)
            t0 = time.perf_counter()
            s = solve(g, memory=a.memory, strategy=strategy, time_limit=a.time_limit, find_min_budgets=False)
            wall = time.perf_counter() - t0
            hunt = next((p for p in s.report.phases if p.name == "schedule hunt"), None)
            facts = "-" if hunt is None else ", ".join(f"{k} {v}" for k, v in hunt.facts.items())
            gap = "" if s.report.gap is None else f"{s.report.gap:.2%}"
            row = f"| {seed} | {strategy} | {s.status} | {s.report.method} | {wall:.1f} | {gap} | {facts} |"
            print(row, flush=True)
            found.setdefault(strategy, []).append(bool(s.steps))
    for strategy, got in found.items():
        print(f"\n{strategy}: a schedule on {sum(got)} of {len(got)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
