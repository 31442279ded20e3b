"""Budget sweeps: many (strategy, RAM budget, runtime budget) points of one model on one device.

A sweep directory holds

* ``sweep.json`` -- ``poet-sweep/1``: the sweep's identity (model, device,
  paging model, batch size), reference numbers of the graph, and every point
  finished so far; it is rewritten atomically after each point, so an
  interrupted sweep resumes from it (finished points are skipped);
* ``sweep.csv`` -- the same points as a flat table (:data:`COLUMNS`);
* ``schedules/`` -- the ``poet-schedule/1`` file of every feasible point;
* the plots written by :mod:`poet.report.plots`.

Points run in a process pool.  Before a point is solved, finished points are
searched for a result that is *provably* also the answer here (see
:func:`reusable`): then the point is filled in without solving and its
``reused_from`` column names the source point.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .schedule.core import FEASIBLE, HEURISTIC, INFEASIBLE, NO_SOLUTION, OPTIMAL, PAGING_SERIAL
from .units import BudgetError, fmt_bytes, fmt_energy

SWEEP_FORMAT = "poet-sweep/1"
MILP_STRATEGIES = ("poet", "remat", "paging")
DEFAULT_STRATEGIES = ("poet", "remat", "paging", "keep-all", "chen", "capuchin")

COLUMNS = [
    "key", "model", "device", "strategy", "paging_time", "memory", "ram_budget_bytes", "ram_fraction",
    "runtime", "runtime_budget_s", "runtime_budget_x", "status", "energy_j", "compute_energy_j",
    "paging_energy_j", "runtime_s", "peak_ram_bytes", "recomputes", "page_ins", "page_outs",
    "solve_seconds", "gap", "bound_energy_j", "method", "reused_from", "schedule_file", "message",
]

# Which strategies' feasible sets contain which (at equal budgets): a schedule of
# the key strategy that is optimal is a lower bound for the listed ones.
_SUPERSETS = {"poet": ("poet", "remat", "paging", "keep-all"), "remat": ("remat", "keep-all"),
              "paging": ("paging", "keep-all"), "keep-all": ("keep-all",)}
_RTOL = 1e-6


class SweepError(BudgetError):
    """A sweep request that cannot be carried out (bad range, unsafe output directory)."""


# -- the request -----------------------------------------------------------------

@dataclass
class SweepSpec:
    model: str
    device: str | None
    memories: list[str]
    runtimes: list[str]
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    paging_time: str = PAGING_SERIAL
    time_limit_s: float | None = 60.0
    batch_size: int = 1
    gap: float = 1e-3
    threads: int | None = None     # HiGHS threads per point (None: HiGHS decides)
    method: str = "auto"           # MILP formulation/solve variant, see poet.solve.milp.METHODS

    def identity(self) -> dict:
        """What must match for points of two runs to be comparable (and resumable)."""
        return {"model": self.model, "device": self.device, "paging_time": self.paging_time,
                "batch_size": self.batch_size}


def parse_memory_range(text: str, steps: int | None = None) -> list[str]:
    """``10%..100%`` with ``steps`` points, or a comma list (``20%,50%,3MB``)."""
    text = str(text).strip()
    m = re.fullmatch(r"([0-9.]+)%\s*\.\.\s*([0-9.]+)%", text)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        if not 0 < lo <= hi:
            raise SweepError(f"memory range {text!r} must go from a positive percentage up to a larger one")
        n = steps if steps is not None else 10
        if n < 1:
            raise SweepError("--steps must be at least 1")
        if n == 1 or lo == hi:
            vals = [hi]
        else:
            vals = [lo + (hi - lo) * j / (n - 1) for j in range(n)]
        return [f"{v:.4g}%" for v in vals]
    if ".." in text:
        raise SweepError(f"cannot read memory range {text!r}; write e.g. 10%..100% (with --steps) "
                         f"or a list like 20%,50%,3MB")
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise SweepError("empty --memory")
    return items


def parse_list(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def point_key(strategy: str, memory: str, runtime: str) -> str:
    return f"{strategy}|{memory}|{runtime}"


# -- one point (runs in a worker process) -------------------------------------------

_GRAPHS: dict = {}


def _graph(spec_d: dict):
    from .solve.api import costed_graph
    k = (spec_d["model"], spec_d["device"], spec_d["batch_size"])
    if k not in _GRAPHS:
        _GRAPHS[k] = costed_graph(spec_d["model"], spec_d["device"], batch_size=spec_d["batch_size"])
    return _GRAPHS[k]


def _budget(g, spec_d: dict, memory: str, runtime: str):
    from .solve.api import make_budget
    return make_budget(g, memory, None if runtime in ("none", "inf", "") else runtime, spec_d["paging_time"])


def solve_point(spec_d: dict, strategy: str, memory: str, runtime: str) -> tuple[dict, dict | None]:
    """Solve one point; returns (row, schedule dict or None).  Picklable in and out."""
    from .solve.api import SolveOptions, solve_costed
    g = _graph(spec_d)
    b = _budget(g, spec_d, memory, runtime)
    opts = SolveOptions(time_limit_s=spec_d["time_limit_s"], threads=spec_d["threads"], gap=spec_d["gap"],
                        method=spec_d.get("method", "auto"), find_min_budgets=False)
    t0 = time.perf_counter()
    try:
        s = solve_costed(g, b, strategy, opts)
    except Exception as e:  # a failing point must not kill the sweep; it is recorded
        row = _row(spec_d, g, strategy, memory, runtime, b, None)
        row.update(status="error", message=f"{type(e).__name__}: {e}", solve_seconds=time.perf_counter() - t0)
        return row, None
    row = _row(spec_d, g, strategy, memory, runtime, b, s)
    row["solve_seconds"] = s.solver.get("solve_seconds", time.perf_counter() - t0)
    return row, (s.to_dict() if s.steps else None)


def _row(spec_d: dict, g, strategy: str, memory: str, runtime: str, b, s) -> dict:
    from .solve.baselines import keep_all_peak
    span = keep_all_peak(g) - g.fixed_ram_bytes
    row = {c: None for c in COLUMNS}
    row.update(key=point_key(strategy, memory, runtime), model=spec_d["model"], device=spec_d["device"],
               strategy=strategy, paging_time=b.paging_time, memory=memory, ram_budget_bytes=b.ram_bytes,
               ram_fraction=(b.ram_bytes - g.fixed_ram_bytes) / span if span > 0 else None,
               runtime=runtime, runtime_budget_s=b.runtime_s,
               runtime_budget_x=(b.runtime_s / g.plain_runtime_s) if b.runtime_s and g.plain_runtime_s else None)
    if s is None:
        return row
    sv = s.solver
    row.update(status=s.status, gap=sv.get("gap"), bound_energy_j=sv.get("bound_energy_j"), method=sv.get("method"),
               message=str(sv.get("message", ""))[:300])
    if s.totals is not None:
        t = s.totals
        row.update(energy_j=t.energy_j, compute_energy_j=t.compute_energy_j, paging_energy_j=t.paging_energy_j,
                   runtime_s=t.runtime_s, peak_ram_bytes=t.peak_ram_bytes, recomputes=t.recomputes,
                   page_ins=t.page_ins, page_outs=t.page_outs)
    return row


# -- reuse of finished points ---------------------------------------------------------

def _deadline(row) -> float:
    return math.inf if row.get("runtime_budget_s") in (None, "") else float(row["runtime_budget_s"])


def _fits(row: dict, ram: int, deadline: float) -> bool:
    return (row.get("peak_ram_bytes") is not None and int(row["peak_ram_bytes"]) <= ram
            and float(row["runtime_s"]) <= deadline * (1 + _RTOL))


def _in_space(row: dict, strategy: str) -> bool:
    """Is this finished schedule a member of ``strategy``'s search space?"""
    paged = (row.get("page_ins") or 0) + (row.get("page_outs") or 0) > 0
    recomputed = (row.get("recomputes") or 0) > 0
    if strategy == "poet":
        return True
    if strategy == "remat":
        return not paged
    if strategy == "paging":
        return not recomputed
    if strategy == "keep-all":
        return not paged and not recomputed
    return False


def reusable(strategy: str, ram: int, deadline: float, done: list[dict], plain_energy_j: float):
    """A finished row whose result is provably the answer at (strategy, ram, deadline), or None.

    Returns ``(row, status, why)``.  Only exact arguments are used:

    * lower bound: every node is computed at least once and paging costs are
      non-negative, so a schedule of energy equal to one plain pass is optimal
      for every strategy whose space holds it, at any budget it fits;
    * dominance: an optimal schedule of strategy S at budgets (M', T') that are
      no tighter than (M, T), where S's space contains the target strategy's
      (poet contains remat and paging; all contain keep-all), that fits
      (M, T) and lies in the target's space, is optimal there (within the gap
      it was proven to);
    * infeasibility: proven infeasible at looser budgets for a strategy whose
      space contains the target's means infeasible here.

    Heuristic strategies (chen, capuchin) are never filled in from others.
    """
    if strategy not in _SUPERSETS:
        return None
    for r in done:
        if r.get("status") not in (OPTIMAL, FEASIBLE, HEURISTIC) or r.get("energy_j") is None:
            continue
        if (float(r["energy_j"]) <= plain_energy_j * (1 + 1e-9) and _fits(r, ram, deadline)
                and _in_space(r, strategy) and r.get("schedule_file")):
            return r, OPTIMAL, "energy equals the lower bound (one plain pass) and the schedule fits"
    for r in done:
        src = r.get("strategy")
        if src not in _SUPERSETS or strategy not in _SUPERSETS[src]:
            continue
        looser = int(r["ram_budget_bytes"]) >= ram and _deadline(r) >= deadline
        if not looser:
            continue
        if r.get("status") == OPTIMAL and r.get("schedule_file") and _fits(r, ram, deadline) \
                and _in_space(r, strategy):
            return r, OPTIMAL, f"optimal for {src} at looser budgets and fits these"
        if r.get("status") == INFEASIBLE:  # MILP proofs, or keep-all's fixed peak/runtime
            return r, INFEASIBLE, f"{src} proven infeasible at looser budgets"
    return None


# -- the sweep directory --------------------------------------------------------------

def _atomic_write(path: Path, text: str):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_sweep(path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "sweep.json"
    d = json.loads(p.read_text())
    if d.get("format") != SWEEP_FORMAT:
        raise SweepError(f"{p} is not a {SWEEP_FORMAT} file")
    return d


def rows_to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS})
    return buf.getvalue()


def prepare_out_dir(out: Path, spec: SweepSpec, force: bool) -> list[dict]:
    """Check that ``out`` may be written; return the points of a run to resume."""
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out} exists and is not a directory; choose another --out")
    if not out.exists():
        out.mkdir(parents=True)
        return []
    sj = out / "sweep.json"
    if sj.exists():
        try:
            d = load_sweep(sj)
        except (ValueError, SweepError) as e:
            if not force:
                raise SweepError(f"{sj} is not a readable sweep file ({e}); pass --force to overwrite it") from e
            return []
        if d.get("identity") != spec.identity():
            if not force:
                raise SweepError(f"{out} holds a sweep of {d.get('identity')}, not {spec.identity()}; "
                                 f"choose another --out, or pass --force to start it over")
            return []
        return list(d.get("points", []))
    if any(out.iterdir()) and not force:
        raise SweepError(f"--out {out} exists, is not empty and holds no sweep.json; refusing to write "
                         f"into it (choose another --out, or pass --force)")
    return []


class _Progress:
    def __init__(self, total: int, stream, enabled: bool = True):
        self.total, self.stream, self.enabled = total, stream, enabled
        self.done = 0
        self.t0 = time.perf_counter()
        self.solved_seconds: list[float] = []

    def tick(self, row: dict, jobs: int, remaining_solves: int, how: str):
        self.done += 1
        if how == "solved":
            self.solved_seconds.append(time.perf_counter() - self.t0)
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        n = len(self.solved_seconds)
        eta = ""
        if n and remaining_solves:
            eta = f", ETA ~{_hms(el / n * remaining_solves)}"
        e = row.get("energy_j")
        what = row.get("status") or "?"
        if e not in (None, ""):
            what += f" {fmt_energy(float(e))}"
        self.stream.write(f"[{self.done}/{self.total}] {row['strategy']:>9} mem {row['memory']:>7} "
                          f"rt {row['runtime']:>5}: {what} ({how}) | elapsed {_hms(el)}{eta}\n")
        self.stream.flush()


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_sweep(spec: SweepSpec, out, *, jobs: int | None = None, force: bool = False, retry: bool = False,
              progress: bool = True, stream=None) -> dict:
    """Run (or resume) a sweep into directory ``out``; returns the sweep document."""
    from .solve.api import STRATEGIES, SolveOptions, costed_graph
    from .solve.baselines import keep_all_peak
    from .schedule.io import load_schedule, save_schedule

    stream = stream or sys.stderr
    for s in spec.strategies:
        if s not in STRATEGIES:
            raise SweepError(f"unknown strategy {s!r}; choose from {', '.join(STRATEGIES)}")
    out = Path(out)
    g = costed_graph(spec.model, spec.device, batch_size=spec.batch_size)
    spec_d = asdict(spec)
    points = [(s, m, r) for r in spec.runtimes for m in spec.memories for s in spec.strategies]
    budgets = {}
    for s, m, r in points:  # parse everything before touching the disk
        budgets[(m, r)] = _budget(g, spec_d, m, r)
    SolveOptions(time_limit_s=spec.time_limit_s, threads=spec.threads, gap=spec.gap, method=spec.method)
    previous = prepare_out_dir(out, spec, force)
    lock = _Lock(out)
    (out / "schedules").mkdir(exist_ok=True)
    wanted = {point_key(*p) for p in points}
    done: dict[str, dict] = {}
    earlier: dict[str, dict] = {}   # retried points: kept unless the new solve does better
    for row in previous:
        if retry and row.get("status") in (NO_SOLUTION, FEASIBLE, "error") and row["key"] in wanted:
            earlier[row["key"]] = row
            continue
        done[row["key"]] = row
    context = {"plain_energy_j": g.plain_energy_j, "plain_runtime_s": g.plain_runtime_s,
               "keep_all_peak_bytes": keep_all_peak(g), "min_ram_bytes": g.min_ram_bytes(),
               "fixed_ram_bytes": g.fixed_ram_bytes, "nodes": len(g.nodes), "graph_name": g.name}
    doc = {"format": SWEEP_FORMAT, "identity": spec.identity(), "spec": spec_d, "context": context,
           "points": []}

    def save():
        # points waiting for a retry keep their earlier row until the retry is recorded
        pending_retry = [r for k, r in earlier.items() if k not in done]
        rows = sorted(list(done.values()) + pending_retry, key=_order_key)
        doc["points"] = rows
        _atomic_write(out / "sweep.json", json.dumps(doc, indent=1, default=float))
        _atomic_write(out / "sweep.csv", rows_to_csv(rows))

    def record(row: dict, sched: dict | None):
        old = earlier.pop(row["key"], None)
        if old is not None and old.get("energy_j") is not None and row.get("status") != OPTIMAL and (
                row.get("energy_j") is None or float(row["energy_j"]) > float(old["energy_j"])):
            old = dict(old)
            old["message"] = (f"{old.get('message') or ''} [a retry ({row.get('method')}, "
                              f"{row.get('solve_seconds') or 0:.0f} s) ended {row.get('status')}"
                              f"{'' if row.get('energy_j') is None else ' at ' + fmt_energy(float(row['energy_j']))};"
                              f" this earlier result is kept]")[:400]
            done[row["key"]] = old
            save()
            return
        if sched is not None:
            fn = Path("schedules") / (re.sub(r"[^A-Za-z0-9_.-]+", "_", row["key"]) + ".json")
            _atomic_write(out / fn, json.dumps(sched))
            row["schedule_file"] = str(fn)
        done[row["key"]] = row
        save()

    todo = [p for p in points if point_key(*p) not in done]
    todo.sort(key=lambda p: _order_key({"strategy": p[0], "ram_budget_bytes": budgets[(p[1], p[2])].ram_bytes,
                                        "runtime_budget_s": budgets[(p[1], p[2])].runtime_s}))
    save()
    jobs = max(1, jobs or os.cpu_count() or 1)
    prog = _Progress(len(points), stream, progress)
    prog.done = len(points) - len(todo)
    if progress and prog.done:
        stream.write(f"resuming: {prog.done} of {len(points)} points already in {out / 'sweep.json'}\n")

    def try_reuse(p) -> bool:
        s, m, r = p
        b = budgets[(m, r)]
        dl = math.inf if b.runtime_s is None else b.runtime_s
        hit = reusable(s, b.ram_bytes, dl, list(done.values()), g.plain_energy_j)
        if hit is None:
            return False
        src, status, why = hit
        row = _row(spec_d, g, s, m, r, b, None)
        row.update(status=status, reused_from=src["key"], solve_seconds=0.0,
                   message=f"reused from {src['key']}: {why}")
        sched = None
        if status != INFEASIBLE:
            from .schedule.io import schedule_from_dict
            sd = json.loads((out / src["schedule_file"]).read_text())
            sd["budget"] = {"ram_bytes": b.ram_bytes, "runtime_s": b.runtime_s, "paging_time": b.paging_time}
            sd["strategy"], sd["status"] = s, status
            sd["solver"] = {**sd.get("solver", {}), "reused_from": src["key"], "message": row["message"]}
            sc = schedule_from_dict(sd)  # re-validated against *these* budgets
            t = sc.totals
            row.update(energy_j=t.energy_j, compute_energy_j=t.compute_energy_j,
                       paging_energy_j=t.paging_energy_j, runtime_s=t.runtime_s, peak_ram_bytes=t.peak_ram_bytes,
                       recomputes=t.recomputes, page_ins=t.page_ins, page_outs=t.page_outs,
                       gap=0.0 if "lower bound" in why else src.get("gap"),
                       bound_energy_j=g.plain_energy_j if "lower bound" in why else src.get("bound_energy_j"))
            sched = sd
        record(row, sched)
        return True

    def remaining_solves():
        return len(todo) + len(running)

    running: dict = {}
    # spawn, not fork: a parent that already ran HiGHS holds a thread pool that a forked child would
    # inherit half-dead (solves then hang); fresh interpreters cost ~1 s each and are always safe.
    import multiprocessing
    pool = (ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init,
                                initargs=(max(1, (os.cpu_count() or 1) // jobs),),
                                mp_context=multiprocessing.get_context("spawn")) if todo else None)
    old_term = _on_sigterm()
    try:
        while todo or running:
            while todo and len(running) < jobs:
                p = _pick(todo, running, budgets)
                todo.remove(p)
                if try_reuse(p):
                    prog.tick(done[point_key(*p)], jobs, remaining_solves(), "reused")
                    continue
                fut = pool.submit(solve_point, spec_d, *p)
                running[fut] = p
            if not running:
                continue
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for f in finished:
                p = running.pop(f)
                row, sched = f.result()
                record(row, sched)
                prog.tick(row, jobs, remaining_solves(), "solved")
    except KeyboardInterrupt:
        if pool:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()   # our own workers: stop their solves now
            pool.shutdown(wait=False, cancel_futures=True)
            pool = None
        stream.write(f"\ninterrupted: {len(done)} of {len(points)} points saved in {out / 'sweep.json'}; "
                     f"run the same command again to resume\n")
        raise
    finally:
        if pool:
            pool.shutdown(wait=True)
        _restore_sigterm(old_term)
        lock.release()
    save()
    return doc


class _Lock:
    """``DIR/.sweep.lock`` with our pid: two sweeps must not write one directory at once."""

    def __init__(self, out: Path):
        self.path = out / ".sweep.lock"
        if self.path.exists():
            try:
                pid = int(self.path.read_text().strip() or 0)
            except ValueError:
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise SweepError(f"another sweep (pid {pid}) is writing into {out}; wait for it or stop it first")
        self.path.write_text(str(os.getpid()))

    def release(self):
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _worker_init(cores: int = 1):
    import signal

    from .solve.parallel import limit_workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    limit_workers(cores)     # the sweep's points run side by side: each solve gets its share of the cores


def _on_sigterm():
    """Treat SIGTERM like Ctrl-C (save and stop), when we are the main thread."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt
    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(old):
    import signal
    import threading
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)


def _order_key(row: dict):
    """Cheap fixed rules first, then MILPs from the loosest budgets down (so results can be reused)."""
    s = row["strategy"]
    milp = s in MILP_STRATEGIES
    rank = (MILP_STRATEGIES.index(s) if milp else
            {"keep-all": 0, "chen": 1, "capuchin": 2}.get(s, 3))
    rt = row.get("runtime_budget_s")
    rt = math.inf if rt in (None, "") else float(rt)
    return (1 if milp else 0, -float(row["ram_budget_bytes"]), -rt, rank)


def _pick(todo, running, budgets):
    """The first point that no running point of a containing strategy dominates (else the first)."""
    for p in todo:
        s, m, r = p
        b = budgets[(m, r)]
        blocked = False
        for q in running.values():
            qs, qm, qr = q
            if qs in _SUPERSETS and s in _SUPERSETS[qs]:
                bq = budgets[(qm, qr)]
                if bq.ram_bytes >= b.ram_bytes and (bq.runtime_s or math.inf) >= (b.runtime_s or math.inf):
                    blocked = True
                    break
        if not blocked:
            return p
    return todo[0]


def best_single(rows: list[dict]) -> dict:
    """Per (memory, runtime): the best energy of remat-only and paging-only (for savings tables)."""
    out: dict = {}
    for r in rows:
        if r["strategy"] in ("remat", "paging") and r.get("energy_j") not in (None, ""):
            k = (r["memory"], r["runtime"])
            e = float(r["energy_j"])
            if k not in out or e < out[k][0]:
                out[k] = (e, r["strategy"])
    return out


def describe(doc: dict) -> str:
    c = doc["context"]
    return (f"{doc['identity']['model']} on {doc['identity']['device']}: plain pass {fmt_energy(c['plain_energy_j'])}, "
            f"keep-all peak {fmt_bytes(c['keep_all_peak_bytes'])}, lower bound {fmt_bytes(c['min_ram_bytes'])}")
