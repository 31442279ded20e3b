"""Time limits on large graphs (issue 24): tiled zoo models and generated graphs of tens of thousands of nodes.

Every case runs ``python -m poet solve ... --json --no-cache`` in a subprocess, as a user would, and the
table says how long the solve and the whole command took against the time limit, what came back (status,
gap to the proven bound, which phase found the schedule) and where the time went (the phases over a
second).  The load average is printed before and after each case: the machine may be shared, and wall
times scale with it.

    python bench/large_graphs.py                                  # the default cases below, 60-s limit
    python bench/large_graphs.py --limit 30 --cases chain:40000:1,a72,80%,- --cases unet:20000:1,m4,50%,-
    python bench/large_graphs.py --cases bert_m4_262144.json,-,262144,3x --json out.jsonl

A case is ``MODEL,DEVICE,MEMORY,RUNTIME``: MODEL a zoo name (tiled automatically when the memory is below its
untiled minimum), a generated spec (``chain:20000:1``) or a ``poet-graph/1`` file (DEVICE ``-``); RUNTIME ``-``
for no deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CASES = [
    "resnet18_cifar,m0,32768,3x",
    "resnet18_cifar,m4,262144,3x",
    "resnet18_cifar,a72,32768,3x",
    "resnet18_cifar,a72,32768,1.5x",
    "chain:20000:1,a72,80%,-",
    "unet:20000:1,m4,50%,-",
    "fan:20000:1,m4,50%,-",
    "layered:5000:1,a72,80%,-",
]


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run_case(case: str, limit: float, strategy: str, kill_after: float) -> dict:
    model, device, memory, runtime = case.split(",")
    cmd = [sys.executable, "-m", "poet", "solve"]
    cmd += ["--graph", model] if model.endswith(".json") else ["--model", model, "--device", device]
    cmd += ["--memory", memory, "--strategy", strategy, "--time-limit", f"{limit:g}", "--json", "--no-cache"]
    if runtime != "-":
        cmd += ["--runtime", runtime]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = load()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc = None
    wall = time.perf_counter() - t0
    row = {"case": case, "limit_s": limit, "wall_s": round(wall, 1), "load_before": before, "load_after": load()}
    if proc is None:
        row["error"] = [f"killed after {kill_after:g} s without an answer"]
        return row
    try:
        d = json.loads(proc.stdout)
    except json.JSONDecodeError:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return row
    sv = d.get("solver", {})
    row.update(
        nodes=d.get("nodes"),
        status=d.get("status"),
        solve_s=round(sv.get("solve_seconds") or 0.0, 1),
        gap=sv.get("gap"),
        method=sv.get("method"),
        message=sv.get("message"),
        phases=[(p["name"], round(p["seconds"], 1)) for p in sv.get("phases", [])],
    )
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| case | nodes | limit s | solve s | wall s | status | gap | found by | phases over 1 s | load before/after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | | {r['limit_s']:g} | | {r['wall_s']} | error: {r['error']} | | | | |")
            continue
        gap = "" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
        slow = ", ".join(f"{n} {s:g}" for n, s in r["phases"] if s >= 1.0)
        out.append(
            f"| {r['case']} | {r['nodes']} | {r['limit_s']:g} | {r['solve_s']} | {r['wall_s']} | {r['status']} | "
            f"{gap} | {r['method']} | {slow} | {r['load_before']} / {r['load_after']} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", action="append", help="MODEL,DEVICE,MEMORY,RUNTIME (repeatable)")
    ap.add_argument("--limit", type=float, default=60.0, help="--time-limit of every solve (s)")
    ap.add_argument("--strategy", default="poet")
    ap.add_argument("--json", help="append one JSON line per case to this file")
    ap.add_argument("--kill-after", type=float, default=300.0, help="end a case that runs this long (s)")
    a = ap.parse_args()
    rows = []
    for case in a.cases or DEFAULT_CASES:
        row = run_case(case, a.limit, a.strategy, a.kill_after)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
