"""Arena bytes of the issue's three schedules once every buffer has an address, and the re-solve loop.

For each case the schedule is made as ``poet solve`` makes it (the command, with ``--out``), then:

* its peak of live activation bytes (the schedule's RAM figure);
* the arena of a malloc-style first fit (blocks placed as the steps allocate them), of TFLite
  Micro's offline "largest first" alone, and of :func:`poet.cbackend.arena.plan_arena` (the best of
  its orders, then a seeded search of moves);
* :func:`poet.cbackend.fit.fit_arena`: while the arena is above what the budget leaves, solve again
  with the budget lowered by the overshoot (each schedule validated against the real budget).

    PYTHONPATH=. python bench/arena_fit.py [--cases r18-m0,r18-m4,bert-m4] [--time-limit 240] [--refit-limit 900]

Measured results are in docs/mcu.md ("Arena").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from poet.cbackend.arena import first_fit_bytes, place, plan_arena, residencies
from poet.cbackend.fit import fit_arena
from poet.schedule.io import load_schedule

CASES = {
    "r18-m0": ["--model", "resnet18_cifar", "--device", "m0", "--memory", "32768", "--runtime", "3x"],
    "r18-m4": ["--model", "resnet18_cifar", "--device", "m4", "--memory", "256KiB", "--runtime", "3x"],
    "bert-m4": ["--model", "bert", "--device", "m4", "--memory", "256KiB", "--runtime", "3x"],
}


def largest_first(res) -> int:
    return place(res, sorted(range(len(res)), key=lambda i: (-res[i].nbytes, res[i].start)))[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds per solve")
    ap.add_argument("--refit-limit", type=float, default=900.0, help="seconds for the re-solve loop")
    ap.add_argument("--arena-limit", type=float, default=60.0, help="seconds for one arena plan")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="arena-fit-"))
    rows = []
    for name in a.cases.split(","):
        out = tmp / f"{name}.json"
        cmd = [
            sys.executable,
            "-m",
            "poet",
            "solve",
            *CASES[name],
            "--time-limit",
            str(a.time_limit),
            "--quiet",
            "--no-cache",
            "--out",
            str(out),
        ]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name}: poet solve failed ({r.returncode}): {r.stderr[-500:]}")
            continue
        s = load_schedule(out)
        solve_s = time.monotonic() - t0
        res = residencies(s)
        fixed = s.graph.fixed_ram_bytes
        avail = s.budget.ram_bytes - fixed
        peak = s.totals.peak_ram_bytes - fixed
        t0 = time.monotonic()
        plan = plan_arena(s, time_limit_s=a.arena_limit)
        plan_s = time.monotonic() - t0
        ff, lf = first_fit_bytes(res), largest_first(res)
        print(f"{name}: {' '.join(CASES[name])}: {len(s.steps)} steps, {len(res)} buffers, solved in {solve_s:.0f} s")
        print(f"  activations: budget {avail:,} B, schedule peak {peak:,} B")
        for label, b in (("first fit", ff), ("largest first", lf), ("planner", plan.arena_bytes)):
            print(f"  {label:14s} arena {b:,} B ({(b - peak) / max(peak, 1):+.1%} over the peak)")
        print(f"  planner: {plan.order}; {plan_s:.1f} s; orders {plan.orders_tried}")
        t0 = time.monotonic()
        fit = fit_arena(
            s,
            time_limit_s=a.refit_limit,
            arena_time_limit_s=a.arena_limit,
            progress=lambda t: print("   ", t, flush=True),
        )
        print(
            f"  re-solve loop ({time.monotonic() - t0:.0f} s): {'fits' if fit.fits else 'does NOT fit'}; "
            f"arena {fit.plan.arena_bytes:,} B of {avail:,} B"
        )
        print("\n".join(fit.lines()), flush=True)
        rows.append((name, len(res), peak, ff, lf, plan.arena_bytes, fit))
    print("\n| case | buffers | peak B | first fit B | largest first B | planner B | re-solved: arena B (solves) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, n, peak, ff, lf, pb, fit in rows:
        last = fit.plan.arena_bytes
        print(
            f"| {name} | {n:,} | {peak:,} | {ff:,} | {lf:,} | {pb:,} | {last:,} {'fits' if fit.fits else 'no fit'} "
            f"({len(fit.attempts) - 1}) |"
        )


if __name__ == "__main__":
    main()
