"""Arena bytes of the issue's three schedules once every buffer has an address, and the re-solve loop.

For each case the schedule is made as ``poet solve`` makes it (the command, with ``--out``), then:

* its peak of live activation bytes (the schedule's RAM figure);
* the arena of a malloc-style first fit (blocks placed as the steps allocate them), of TFLite
  Micro's offline "largest first" alone, and of :func:`poet.cbackend.arena.plan_arena` (the best of
  its orders, then a seeded search of moves);
* :func:`poet.cbackend.fit.fit_arena`: while the arena is above what the budget leaves, solve again
  with the budget lowered by the overshoot (halfway back after an infeasible one), each schedule
  validated against the real budget.  These schedules are tiled to just fit their budget, so their
  graph has no schedule below it: the re-solve here is ``poet solve`` at the lower budget, which
  tiles the network again (finer tiles, smaller blocks).

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
    "r18-m4": ["--model", "resnet18_cifar", "--device", "m4", "--memory", "262144", "--runtime", "3x"],
    "bert-m4": ["--model", "bert", "--device", "m4", "--memory", "262144", "--runtime", "3x"],
}


def solve_case(args: list[str], ram: int, time_limit: float, out: Path):
    """``poet solve`` of a case at RAM budget ``ram`` (tiled for it): the schedule, or None and why."""
    argv = list(args)
    argv[argv.index("--memory") + 1] = str(ram)
    cmd = [sys.executable, "-m", "poet", "solve", *argv, "--time-limit", f"{time_limit:.0f}", "--quiet"]
    r = subprocess.run([*cmd, "--no-cache", "--out", str(out)], capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        lines = (r.stdout + r.stderr).strip().splitlines()
        why = [ln for ln in lines if ln.startswith(("No ", "Status:"))] or lines[-1:]
        return None, why[-1] if why else f"exit code {r.returncode}"
    return load_schedule(out), ""


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
        args = CASES[name]
        t0 = time.monotonic()
        s, why = solve_case(args, int(args[args.index("--memory") + 1]), a.time_limit, tmp / f"{name}.json")
        if s is None:
            print(f"{name}: poet solve failed: {why}")
            continue
        solve_s = time.monotonic() - t0
        res = residencies(s)
        fixed = s.graph.fixed_ram_bytes
        avail = s.budget.ram_bytes - fixed
        peak = s.totals.peak_ram_bytes - fixed
        t0 = time.monotonic()
        plan = plan_arena(s, time_limit_s=a.arena_limit)
        plan_s = time.monotonic() - t0
        ff, lf = first_fit_bytes(res), largest_first(res)
        print(f"{name}: {' '.join(args)}: {len(s.steps)} steps, {len(res)} buffers, solved in {solve_s:.0f} s")
        print(f"  activations: budget {avail:,} B, schedule peak {peak:,} B")
        for label, b in (("first fit", ff), ("largest first", lf), ("planner", plan.arena_bytes)):
            print(f"  {label:14s} arena {b:,} B ({(b - peak) / max(peak, 1):+.1%} over the peak)")
        print(f"  planner: {plan.order}; {plan_s:.1f} s; orders {plan.orders_tried}", flush=True)
        count = iter(range(1, 1000))

        def retile(sched, ram, left, args=args, name=name):
            got, why = solve_case(args, ram, min(a.time_limit, left), tmp / f"{name}-{next(count)}.json")
            if got is None:
                print(f"    {ram:,} B: {why}", flush=True)
                return sched.with_(steps=(), status="infeasible")
            return got

        t0 = time.monotonic()
        fit = fit_arena(
            s,
            time_limit_s=a.refit_limit,
            arena_time_limit_s=a.arena_limit,
            progress=lambda t: print("   ", t, flush=True),
            solver=retile,
        )
        print(
            f"  re-solve loop ({time.monotonic() - t0:.0f} s): {'fits' if fit.fits else 'does NOT fit'}; "
            f"arena {fit.plan.arena_bytes:,} B of {fit.available:,} B (nodes {len(fit.schedule.graph):,})"
        )
        print("\n".join(fit.lines()), flush=True)
        rows.append((name, len(res), peak, ff, lf, plan.arena_bytes, fit))
    print("\n| case | buffers | peak B | first fit B | largest first B | planner B | after re-solving |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, n, peak, ff, lf, pb, fit in rows:
        after = f"{fit.plan.arena_bytes:,} B, {'fits' if fit.fits else 'no fit'} ({len(fit.attempts) - 1} solves)"
        print(f"| {name} | {n:,} | {peak:,} | {ff:,} | {lf:,} | {pb:,} | {after} |")


if __name__ == "__main__":
    main()
