"""The POET paper's five questions, and its TX2 comparison against POFO, answered by one command.

    python bench/paper.py --quick            # reduced grid, under 20 minutes on 2 cores
    python bench/paper.py                    # the full grid (an hour or more)
    python bench/paper.py --jobs 2 --out bench/paper_runs/full --doc docs/paper.md

Every point is one solve (``poet.solve``, or ``poet solve --json`` for the tiled RQ2 points), run
in a worker process, ``--jobs`` side by side.  Each finished point is appended at once to
``OUT/points.jsonl``: a second run with the same ``--out`` skips what is there (resumable; Ctrl-C
keeps every finished point).  A line on stderr counts the points done and the time left.  Every
number comes from a schedule the validator replayed (``validated`` in each row).  At the end
``bench/paper_report.py`` writes the markdown (``--doc``) and its figures (docs/img/paper/).

The grids are below (``grids``): where the paper gives its grid it is used, where it does not the
report says what was chosen instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Point:
    rq: str
    model: str
    device: str
    cost: str  # "ours" (serial paging time) or "original" (the original code's rules, paging hidden)
    strategy: str
    ram: float  # fraction of the way from the smallest feasible RAM to the keep-all peak; bytes if > 1
    runtime: str | None  # "1.2x", or None: no deadline
    time_limit: float
    kind: str = "solve"  # solve | fastest (shortest deadline at ram) | minram (least RAM at runtime) | cli
    method: str = "auto"

    @property
    def key(self) -> str:
        return "|".join(str(v) for v in asdict(self).values())


def grids(quick: bool) -> list[Point]:
    """Every point of the run."""
    pts: list[Point] = []
    tl = 30.0  # per solve, as docs/sweeps.md's sweeps
    # RQ1: joint vs remat-only vs paging-only (the paper: "up to 40%"; it plots no grid we can read
    # off, so: tight, middle and loose RAM, two deadlines, both cost models)
    rq1_models = (
        [("resnet18_cifar", "m4")]
        if quick
        else [(m, d) for m in ("resnet18_cifar", "vgg16_cifar") for d in ("m4", "a72")]
    )
    for model, dev in rq1_models:
        for cost in ("ours", "original"):
            for ram in (0.1, 0.4) if quick else (0.1, 0.4, 0.7):
                for rt in ("1.2x",) if quick else ("1.2x", "2x"):
                    for s in ("poet", "remat", "paging"):
                        pts.append(Point("rq1", model, dev, cost, s, ram, rt, tl))
    # RQ2: 32 KB on a Cortex-M class device, from the tiling planner
    for model in ("resnet18_cifar", "bert"):
        pts.append(Point("rq2", model, "m0", "ours", "poet", 32768, "3x", 120.0 if quick else 600.0, "cli"))
    # RQ3: Capuchin against keep-all on the A72, ResNet-18, tight budgets (the paper's setting)
    for cost in ("ours", "original"):
        for ram in (0.05, 0.2) if quick else (0.0, 0.05, 0.2, 0.5):
            for s in ("capuchin-paper", "capuchin", "poet"):
                pts.append(Point("rq3", "resnet18", "a72", cost, s, ram, "2x", tl))
    # RQ4: provably optimal within 10 minutes (the paper's claim, its limit)
    rq4 = (
        [("resnet18_cifar", "a72")]
        if quick
        else [("resnet18_cifar", "a72"), ("resnet18_cifar", "m4"), ("bert", "a72"), ("bert", "m4")]
    )
    for model, dev in rq4:
        pts.append(Point("rq4", model, dev, "ours", "poet", 0.4, "1.2x", 60.0 if quick else 600.0))
    # RQ5: energy against the deadline at three RAM budgets
    for dev in ("m4",):  # on the A72 paging is nearly free: the curve is flat (docs/sweeps.md)
        for cost in ("ours", "original"):
            for ram in (0.1, 0.5) if quick else (0.1, 0.4, 0.7):
                for rt in (
                    ("1.0x", "1.1x", "1.3x", "2x") if quick else ("1.0x", "1.05x", "1.1x", "1.2x", "1.5x", "2x", "3x")
                ):
                    pts.append(Point("rq5", "resnet18_cifar", dev, cost, "poet", ram, rt, tl))
    # TX2: POET against POFO on a chain (vgg16, as POFO needs chains); throughput and memory
    tx2 = [("vgg16_cifar", 0.05)] if quick else [(m, r) for m in ("vgg16_cifar", "vgg16") for r in (0.0, 0.05, 0.3)]
    for model, ram in tx2:
        pts.append(Point("tx2", model, "jetsontx2", "ours", "pofo", ram, None, tl))
        pts.append(Point("tx2", model, "jetsontx2", "ours", "poet", ram, None, 20.0, "fastest"))
        pts.append(Point("tx2", model, "jetsontx2", "ours", "poet", ram, "pofo", 20.0, "minram"))
    return pts


# ---------------------------------------------------------------------------------------------
# one point


def _ram_bytes(g, ram: float) -> int:
    from poet.solve.baselines import keep_all_peak

    if ram > 1:
        return int(ram)
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + ram * (hi - lo))


def _row(p: Point, g, s, extra=None) -> dict:
    from poet.schedule import validate
    from poet.solve.baselines import keep_all_peak

    row = dict(asdict(p), key=p.key, plain_energy_j=g.plain_energy_j, plain_runtime_s=g.plain_runtime_s)
    row.update(keep_all_peak_bytes=keep_all_peak(g), min_ram_bytes=g.min_ram_bytes(), nodes=len(g.nodes))
    row.update(ram_budget_bytes=s.budget.ram_bytes, runtime_budget_s=s.budget.runtime_s, status=s.status)
    rep = s.report
    row.update(gap=rep.gap, method=rep.method, solve_s=rep.solve_seconds, message=(rep.message or "")[:300])
    if s.steps:
        t = validate(g, s.steps, s.budget)  # the independent replay: what the numbers are
        row.update(validated=True, energy_j=t.energy_j, runtime_s=t.runtime_s, peak_ram_bytes=t.peak_ram_bytes)
        row.update(recomputes=t.recomputes, page_outs=t.page_outs, paging_energy_j=t.paging_energy_j)
    else:
        row.update(validated=False, energy_j=None, runtime_s=None, peak_ram_bytes=None)
    row.update(extra or {})
    return row


def _solve(g, p: Point, ram: int, runtime, strategy=None, find_min=False):
    import poet

    paging = "hidden" if p.cost == "original" else "serial"
    return poet.solve(
        g,
        memory=ram,
        runtime=runtime,
        strategy=strategy or p.strategy,
        paging_time=paging,
        time_limit=p.time_limit,
        threads=1,
        method=p.method,
        find_min_budgets=find_min,
    )


def _pofo_runtime(p: Point) -> float | None:
    """The runtime of POFO's schedule at the same model, device and RAM (the minram points' deadline)."""
    from paper_costs import costed

    g = costed(p.model, p.device, p.cost)
    s = _solve(g, p, _ram_bytes(g, p.ram), None, strategy="pofo")
    return s.totals.runtime_s if s.steps else None


def _pofo_peak(p: Point) -> int:
    from paper_costs import costed

    g = costed(p.model, p.device, p.cost)
    s = _solve(g, p, _ram_bytes(g, p.ram), None, strategy="pofo")
    return s.totals.peak_ram_bytes if s.steps else _ram_bytes(g, p.ram)


BISECTION_STEPS = 6


def _bisect(solve_at, lo: float, hi: float):
    """The smallest budget in [lo, hi] at which ``solve_at`` returns a validated schedule (to 1/2^6 of the
    range), and the budgets tried.  The upper end is tried first: if it fails, nothing is returned."""
    tried, best = [], None
    s = solve_at(hi)
    tried.append([hi, s.status])
    if not s.steps:
        return None, tried
    best = s
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        s = solve_at(mid)
        tried.append([mid, s.status])
        if s.steps:
            best, hi = s, mid
        else:
            lo = mid
    return best, tried


def run_point(p: Point) -> dict:
    """Solve one point and return its row (every schedule replayed by the validator)."""
    t0 = time.perf_counter()
    if p.kind == "cli":
        return _run_cli(p, t0)
    from paper_costs import costed

    g = costed(p.model, p.device, p.cost)
    ram = _ram_bytes(g, p.ram)
    if p.kind == "solve":
        row = _row(p, g, _solve(g, p, ram, p.runtime))
    elif p.kind == "fastest":
        # the shortest deadline POET meets at this RAM, by bisection between the plain pass and POFO's runtime
        hi = _pofo_runtime(p) or 2 * g.plain_runtime_s
        best, tried = _bisect(lambda x: _solve(g, p, ram, x), g.plain_runtime_s, hi)
        row = _row(p, g, best, {"bisection": tried}) if best else dict(asdict(p), key=p.key, status="no schedule")
    else:  # minram: the least RAM at which POET meets POFO's runtime, by bisection
        deadline = _pofo_runtime(p)
        pofo_peak = _pofo_peak(p)
        if deadline is None:
            row = dict(asdict(p), key=p.key, status="no pofo schedule", validated=False, energy_j=None)
        else:
            best, tried = _bisect(lambda m: _solve(g, p, int(m), deadline * (1 + 1e-6)), g.min_ram_bytes(), pofo_peak)
            row = (
                _row(p, g, best, {"pofo_runtime_s": deadline, "bisection": tried})
                if best
                else dict(asdict(p), key=p.key, status="no schedule", validated=False, energy_j=None)
            )
    row["wall_s"] = time.perf_counter() - t0
    return row


def _run_cli(p: Point, t0: float) -> dict:
    cmd = [sys.executable, "-m", "poet", "solve", "--model", p.model, "--device", p.device]
    cmd += ["--memory", str(int(p.ram)), "--runtime", p.runtime, "--time-limit", str(p.time_limit)]
    cmd += ["--threads", "1", "--json", "--no-cache", "--quiet"]
    row = dict(asdict(p), key=p.key, command="poet solve " + " ".join(cmd[4:]))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=p.time_limit * 3 + 300, cwd=ROOT)
        d = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
        row.update(status=d.get("status", f"failed: {out.stderr.strip()[-300:]}"), cli=d)
    except subprocess.TimeoutExpired:
        row.update(status="timed out", cli={})
    row["wall_s"] = time.perf_counter() - t0
    return row


# ---------------------------------------------------------------------------------------------
# the run


def load_rows(path: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
                rows[r["key"]] = r
            except (ValueError, KeyError):
                continue  # a line cut by a kill: that point runs again
    return rows


def run(points: list[Point], out: Path, jobs: int) -> dict[str, dict]:
    out.mkdir(parents=True, exist_ok=True)
    store = out / "points.jsonl"
    rows = load_rows(store)
    todo = [p for p in points if p.key not in rows]
    # the long ones first, so that the side-by-side workers finish together
    todo.sort(key=lambda p: -p.time_limit)
    print(
        f"{len(points)} points, {len(points) - len(todo)} already in {store}, {len(todo)} to run on {jobs} workers",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    done = 0
    with ProcessPoolExecutor(max_workers=jobs) as pool, store.open("a") as f:
        futs = {pool.submit(run_point, p): p for p in todo}
        try:
            for fut in as_completed(futs):
                p = futs[fut]
                try:
                    row = fut.result()
                except Exception as e:  # a crash is a result too: recorded, and the run goes on
                    row = dict(asdict(p), key=p.key, status=f"error: {type(e).__name__}: {e}"[:300], validated=False)
                rows[p.key] = row
                f.write(json.dumps(row, default=str) + "\n")
                f.flush()
                done += 1
                el = time.perf_counter() - t0
                eta = el / done * (len(todo) - done)
                what = f"{p.rq} {p.model} {p.device} {p.cost} {p.strategy} ram={p.ram} rt={p.runtime} {p.kind}"
                print(
                    f"[{done}/{len(todo)}] {what}: {row.get('status')} ({row.get('wall_s', 0):.0f} s) | "
                    f"{el / 60:.1f} min, ~{eta / 60:.1f} min left",
                    file=sys.stderr,
                    flush=True,
                )
        except KeyboardInterrupt:
            for fu in futs:
                fu.cancel()
            print(f"stopped: {done} points kept in {store}; run again to resume", file=sys.stderr)
            raise
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the reduced grid (under 20 minutes on 2 cores)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="points solved side by side")
    ap.add_argument("--out", default=None, help="run directory (default bench/paper_runs/quick or full)")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "paper.md"), help="the markdown written at the end")
    ap.add_argument("--only", default="", help="comma-separated RQs to run (rq1,...,tx2); default all")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be 1 or more")
    out = Path(a.out or ROOT / "bench" / "paper_runs" / ("quick" if a.quick else "full"))
    points = grids(a.quick)
    if a.only:
        keep = set(a.only.split(","))
        points = [p for p in points if p.rq in keep]
    t0 = time.perf_counter()
    try:
        rows = run(points, out, a.jobs)
    except KeyboardInterrupt:
        return 130
    from paper_report import write_report

    wrote = write_report([rows[p.key] for p in points if p.key in rows], Path(a.doc), quick=a.quick, run_dir=out)
    print(f"wrote {', '.join(str(w) for w in wrote)} ({(time.perf_counter() - t0) / 60:.1f} min)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
