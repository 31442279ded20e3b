"""A tiled zoo model end to end, phase by phase: nodes, bytes, seconds and peak RSS of each.

The phases of ``poet solve`` on a graph too large for the portfolio (docs/tiling.md): plan the tiles
(``plan_tiling``, which builds the tiled graph), cost it (``linear_cost_model``), solve it (the
streaming page rule, ``stream_schedule``), validate the steps (``poet.schedule.validate``), write the
schedule file (plain and compact step encodings, docs/formats.md) and read it back (validated again).
One JSON line per phase on stdout, as each ends; a line ``{"phase": "stopped", ...}`` says why a run
ended early (a budget below the tiled minimum, no schedule, the RSS limit).

    nice -n 10 python bench/bert_scale.py --model bert --device m0 --budget 262144
    nice -n 10 python bench/bert_scale.py --model bert --device m0 --budget 32768 \
        --max-plan-nodes 3000000 --max-plan-seconds 2400 --rss-limit-gb 8 --out /tmp/bert32k.json

``--max-plan-nodes`` / ``--max-plan-seconds`` lift the planner's caps (``plan_tiling``'s
``max_nodes`` / ``max_seconds``; the CLI's ``--max-tile-nodes`` / ``--max-tile-seconds``).  Peak RSS is
the process's high-water mark (``ru_maxrss``) when the phase ends, so it only grows; ``rss`` is the
resident size at that moment.  A watchdog thread ends the run when RSS passes ``--rss-limit-gb``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poet.graph.tiling_plan import plan_tiling
from poet.hardware.cost import linear_cost_model
from poet.schedule.compact import encode_steps
from poet.schedule.core import Schedule
from poet.schedule.io import load_schedule, save_schedule, steps_to_dicts
from poet.schedule.report import SolveReport
from poet.schedule.validate import validate
from poet.solve.api import costed_graph, make_budget
from poet.solve.search.stream import stream_schedule


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def watchdog(limit: int) -> None:
    """End the process (exit 3) once its RSS passes ``limit`` bytes: the machine is shared."""

    def run():
        while True:
            r = rss_bytes()
            if r > limit:
                print(json.dumps({"phase": "stopped", "why": f"RSS {r} B over the limit {limit} B"}), flush=True)
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=run, daemon=True).start()


class Phases:
    def __init__(self):
        self.t = time.perf_counter()

    def end(self, phase: str, **facts) -> None:
        now = time.perf_counter()
        row = {"phase": phase, "seconds": round(now - self.t, 2), "rss": rss_bytes(), "peak_rss": peak_rss_bytes()}
        print(json.dumps({**row, **facts}), flush=True)
        self.t = time.perf_counter()


def _step_bytes(steps) -> dict:
    """The steps' JSON size in the compact encoding and, below a million steps, as plain objects."""
    sizes = {"compact_steps_bytes": len(json.dumps(encode_steps(steps), separators=(",", ":")))}
    if len(steps) < 1_000_000:
        sizes["plain_steps_bytes"] = len(json.dumps(steps_to_dicts(steps), separators=(",", ":")))
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert")
    ap.add_argument("--device", default="m0")
    ap.add_argument("--budget", type=int, default=32768, help="RAM budget in bytes")
    ap.add_argument("--runtime", default="3x")
    ap.add_argument("--max-plan-nodes", type=int, default=None)
    ap.add_argument("--max-plan-seconds", type=float, default=None)
    ap.add_argument("--solve-seconds", type=float, default=3600.0, help="the page rule's time limit")
    ap.add_argument("--rss-limit-gb", type=float, default=8.0)
    ap.add_argument("--out", help="keep the schedule file here (default: a temporary file, removed)")
    a = ap.parse_args(argv)
    watchdog(int(a.rss_limit_gb * 2**30))
    ph = Phases()
    g0 = costed_graph(a.model, a.device)
    budget = make_budget(g0, a.budget, a.runtime)
    ph.end("price", nodes=len(g0.nodes), plain_energy_j=g0.plain_energy_j)
    caps = {k: v for k, v in (("max_nodes", a.max_plan_nodes), ("max_seconds", a.max_plan_seconds)) if v}
    plan = plan_tiling(a.model, budget.ram_bytes, fixed_ram_bytes=g0.fixed_ram_bytes, **caps)
    ph.end(
        "plan",
        nodes=plan.nodes_after,
        edges=sum(len(p) for p in plan.graph.preds),
        tiled_min_bytes=plan.tiled_min_bytes,
        fits=plan.fits,
        limit=plan.limit,
        layers_split=len(plan.counts),
    )
    if not plan.fits:
        print(json.dumps({"phase": "stopped", "why": "budget below the tiled minimum"}), flush=True)
        return 1
    g = linear_cost_model(plan.graph, a.device, g0.fixed_ram_bytes)
    del plan
    ph.end("cost", nodes=len(g.nodes), plain_energy_j=g.plain_energy_j)
    r = stream_schedule(g, budget, time_limit=a.solve_seconds)
    ph.end("solve", steps=len(r.steps), energy_j=r.energy_j, runtime_s=r.runtime_s)
    if not r.found:
        print(json.dumps({"phase": "stopped", "why": "the page rule found no schedule"}), flush=True)
        return 1
    totals = validate(g, r.steps, budget)
    ph.end(
        "validate",
        steps=len(r.steps),
        energy_j=totals.energy_j,
        gap_to_plain=(totals.energy_j - g.plain_energy_j) / totals.energy_j,
        peak_ram_bytes=totals.peak_ram_bytes,
        page_ins=totals.page_ins,
        page_outs=totals.page_outs,
    )
    s = Schedule(g, budget, r.steps, "feasible", "poet", totals, SolveReport(method="streaming page rule"))
    del r
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp()) / "s.json"
    save_schedule(s, out)  # compact steps from COMPACT_MIN_STEPS on
    ph.end("write", file_bytes=out.stat().st_size, **_step_bytes(s.steps))
    back = load_schedule(out)
    ph.end("read+validate", steps=len(back.steps), energy_j=back.totals.energy_j)
    if not a.out:
        out.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
