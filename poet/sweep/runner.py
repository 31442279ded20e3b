"""Running sweeps: one sweep directory being filled (SweepRun) and the loop that feeds a backend.

The loop is the same for one sweep and for a study of many: free places of the backend (a local
process pool or a Ray cluster) are filled from the sweeps in turn; before a point is sent out,
finished points of its sweep are searched for a result that is provably its answer (:mod:`.reuse`).
Results come back to this process, which re-validates every schedule and writes every file, so
the directory is the same whichever backend solved the points.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..fileio import atomic_write_text
from ..schedule.core import FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL
from ..units import fmt_energy
from .grid import SWEEP_FORMAT, SweepSpec, check_grid, order_key, point_key, point_tiles
from .io import DirLock, prepare_out_dir, rows_to_csv, schedule_file
from .points import budget_of, clear_totals, make_row, set_totals
from .reuse import pick, reusable

ERROR = "error"


class SweepRun:
    """The state of one sweep directory: its grid, the finished points and the points left.

    Constructing it checks the whole request (strategies, budgets, solver options) without
    touching the disk; :meth:`open` then checks the directory, takes its lock and loads the
    points of an earlier run to resume.
    """

    def __init__(self, spec: SweepSpec, out, *, force: bool = False, retry: bool = False, label: str = ""):
        from ..solve.api import SolveOptions, costed_graph
        from ..solve.baselines import keep_all_peak
        from ..solve.strategies import STRATEGIES

        check_grid(spec, STRATEGIES)
        self.spec, self.out, self.label = spec, Path(out), label
        self.force, self.retry = force, retry
        self.g = g = costed_graph(spec.model, spec.device, batch_size=spec.batch_size)
        self.spec_d = asdict(spec)
        self.points = spec.points()
        self.budgets = {}
        for _, m, r in self.points:  # parse everything before touching the disk
            if (m, r) not in self.budgets:
                self.budgets[(m, r)] = budget_of(g, self.spec_d, m, r)
        SolveOptions(time_limit_s=spec.time_limit_s, threads=spec.threads, gap=spec.gap, method=spec.method)
        context = {
            "plain_energy_j": g.plain_energy_j,
            "plain_runtime_s": g.plain_runtime_s,
            "keep_all_peak_bytes": keep_all_peak(g),
            "min_ram_bytes": g.min_ram_bytes(),
            "fixed_ram_bytes": g.fixed_ram_bytes,
            "nodes": len(g.nodes),
            "graph_name": g.name,
        }
        self.doc = {
            "format": SWEEP_FORMAT,
            "identity": spec.identity(),
            "spec": self.spec_d,
            "context": context,
            "points": [],
        }
        self.done: dict[str, dict] = {}
        self.earlier: dict[str, dict] = {}  # retried points: kept unless the new solve does better
        self.todo: list = []
        self.running: set = set()
        self.lock = None
        self._graph_dict = None
        self._tiled_dicts: dict = {}  # RAM budget -> the tiled graph (dict form) its points are solved on

    # -- the directory ------------------------------------------------------------------

    def open(self) -> None:
        previous = prepare_out_dir(self.out, self.spec, self.force)
        self.lock = DirLock(self.out)
        (self.out / "schedules").mkdir(exist_ok=True)
        wanted = {point_key(*p) for p in self.points}
        for row in previous:
            if self.retry and row.get("status") in (NO_SOLUTION, FEASIBLE, ERROR) and row["key"] in wanted:
                self.earlier[row["key"]] = row
                continue
            self.done[row["key"]] = row
        self.todo = [p for p in self.points if point_key(*p) not in self.done]
        self.todo.sort(
            key=lambda p: order_key(
                {
                    "strategy": p[0],
                    "ram_budget_bytes": self.budgets[p[1:]].ram_bytes,
                    "runtime_budget_s": self.budgets[p[1:]].runtime_s,
                }
            )
        )
        self.save()

    def close(self) -> None:
        if self.lock is not None:
            self.save()
            self.lock.release()
            self.lock = None

    def save(self) -> None:
        # points waiting for a retry keep their earlier row until the retry is recorded
        pending_retry = [r for k, r in self.earlier.items() if k not in self.done]
        rows = sorted(list(self.done.values()) + pending_retry, key=order_key)
        self.doc["points"] = rows
        atomic_write_text(self.out / "sweep.json", json.dumps(self.doc, indent=1, default=float))
        atomic_write_text(self.out / "sweep.csv", rows_to_csv(rows))

    @property
    def finished(self) -> int:
        return len(self.points) - len(self.todo) - len(self.running)

    # -- points ---------------------------------------------------------------------------

    def take(self):
        """The next point to send out, or the row of one filled in from finished points:
        ``("solve", point)`` or ``("reused", row)``."""
        p = pick(self.todo, self.running, self.budgets)
        self.todo.remove(p)
        row = self._reuse(p)
        if row is not None:
            return "reused", row
        self.running.add(p)
        return "solve", p

    def finish(self, p, row: dict | None, sched: dict | None, error: str | None) -> dict:
        """Record the result of a point that was sent out; returns its row."""
        self.running.discard(p)
        s, m, r = p
        if row is None or row.get("key") != point_key(*p):
            row = make_row(self.spec_d, self.g, s, m, r, self.budgets[(m, r)], None)
            row.update(status=ERROR, message=(error or "the worker returned no row for this point")[:300])
            sched = None
        elif sched is not None:
            sched = self._checked(p, row, sched)
        self._record(row, sched)
        return row

    def _checked(self, p, row: dict, sched: dict) -> dict | None:
        """Validate a schedule that came back from a worker against this sweep's graph and budgets;
        the row's numbers become the validator's.  A schedule that fails is not written."""
        from ..graph.io import graph_to_dict
        from ..schedule.io import schedule_from_dict

        b = self.budgets[p[1:]]
        if self._graph_dict is None:
            self._graph_dict = graph_to_dict(self.g)
        why = None
        try:
            sc = schedule_from_dict(sched, source=f"point {row['key']}")
        except Exception as e:  # noqa: BLE001 - whatever a worker sent, it must not end the sweep
            why = f"{type(e).__name__}: {e}"
        else:
            if (sc.budget.ram_bytes, sc.budget.runtime_s, sc.budget.paging_time) != (
                b.ram_bytes,
                b.runtime_s,
                b.paging_time,
            ):
                why = "its budgets are not this point's"
            elif sched.get("graph") != self._point_graph(p, row):
                why = "its graph is not this sweep's" + (" tiling for this budget" if row.get("tiled_nodes") else "")
        if why is not None:
            clear_totals(row)
            row.update(status=ERROR, message=f"the schedule from the worker was refused: {why}"[:300])
            return None
        set_totals(row, sc.totals)
        return sched

    def _point_graph(self, p, row: dict) -> dict:
        """The graph a point's schedule must carry: the sweep's, or (a tiled point) the tiling of its budget,
        planned again here (once per budget) so that a worker's graph is checked, not trusted."""
        if not row.get("tiled_nodes"):
            return self._graph_dict
        from ..graph.io import graph_to_dict
        from .points import tiled_graph

        ram = self.budgets[p[1:]].ram_bytes
        if ram not in self._tiled_dicts:
            self._tiled_dicts[ram] = graph_to_dict(tiled_graph(self.spec_d, p[1], p[2]).graph)
        return self._tiled_dicts[ram]

    def _record(self, row: dict, sched: dict | None) -> None:
        old = self.earlier.pop(row["key"], None)
        if (
            old is not None
            and old.get("energy_j") is not None
            and row.get("status") != OPTIMAL
            and (row.get("energy_j") is None or float(row["energy_j"]) > float(old["energy_j"]))
        ):
            old = dict(old)
            old["message"] = (
                f"{old.get('message') or ''} [a retry ({row.get('method')}, "
                f"{row.get('solve_seconds') or 0:.0f} s) ended {row.get('status')}"
                f"{'' if row.get('energy_j') is None else ' at ' + fmt_energy(float(row['energy_j']))};"
                f" this earlier result is kept]"
            )[:400]
            self.done[row["key"]] = old
            self.save()
            return
        if sched is not None:
            fn = schedule_file(row["key"])
            atomic_write_text(self.out / fn, json.dumps(sched))
            row["schedule_file"] = str(fn)
        self.done[row["key"]] = row
        self.save()

    def _reuse(self, p) -> dict | None:
        s, m, r = p
        b = self.budgets[(m, r)]
        g = self.g
        if point_tiles(self.spec_d, g.min_ram_bytes(), b.ram_bytes):
            return None  # a tiled point's graph depends on its budget: solved, never filled in
        dl = math.inf if b.runtime_s is None else b.runtime_s
        untiled = [r for r in self.done.values() if not r.get("tiled_nodes")]
        hit = reusable(s, b.ram_bytes, dl, untiled, g.plain_energy_j)
        if hit is None:
            return None
        src, status, why = hit
        row = make_row(self.spec_d, g, s, m, r, b, None)
        row.update(status=status, reused_from=src["key"], solve_seconds=0.0, message=f"reused from {src['key']}: {why}")
        sched = None
        if status != INFEASIBLE:
            from ..schedule.io import schedule_from_dict

            sd = json.loads((self.out / src["schedule_file"]).read_text())
            sd["budget"] = {"ram_bytes": b.ram_bytes, "runtime_s": b.runtime_s, "paging_time": b.paging_time}
            sd["strategy"], sd["status"] = s, status
            sd["solver"] = {**sd.get("solver", {}), "reused_from": src["key"], "message": row["message"]}
            sc = schedule_from_dict(sd)  # re-validated against *these* budgets
            set_totals(row, sc.totals)
            lower = "lower bound" in why
            row.update(
                gap=0.0 if lower else src.get("gap"),
                bound_energy_j=g.plain_energy_j if lower else src.get("bound_energy_j"),
            )
            sched = sd
        self._record(row, sched)
        return row


class Progress:
    """One stderr line per finished point: counts, points in flight, elapsed time and an ETA."""

    def __init__(self, total: int, done: int, stream, enabled: bool = True, labelled: bool = False):
        self.total, self.done, self.stream, self.enabled, self.labelled = total, done, stream, enabled, labelled
        self.t0 = time.perf_counter()
        self.solved = 0

    def say(self, text: str) -> None:
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()

    def tick(self, label: str, row: dict, how: str, in_flight: int, remaining_solves: int) -> None:
        self.done += 1
        if how == "solved":
            self.solved += 1
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        eta = f", ETA ~{hms(el / self.solved * remaining_solves)}" if self.solved and remaining_solves else ""
        e = row.get("energy_j")
        what = row.get("status") or "?"
        if e not in (None, ""):
            what += f" {fmt_energy(float(e))}"
        who = f"{label:<22} " if self.labelled else ""
        self.stream.write(
            f"[{self.done}/{self.total}] {who}{row['strategy']:>9} mem {row['memory']:>7} "
            f"rt {row['runtime']:>5}: {what} ({how}) | in flight {in_flight} | "
            f"elapsed {hms(el)}{eta}\n"
        )
        self.stream.flush()


def hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def drive(runs: list[SweepRun], backend, *, progress: bool = True, stream=None) -> None:
    """Open every sweep directory, solve every point left on ``backend``, and close them again.

    Ctrl-C (or SIGTERM) cancels the points in flight; every finished point is already saved, and
    running the same command again resumes.
    """
    stream = stream or sys.stderr
    backend.check()
    opened: list[SweepRun] = []
    old_term = _on_sigterm()
    try:
        for run in runs:
            run.open()
            opened.append(run)
        total = sum(len(r.points) for r in runs)
        prog = Progress(total, sum(r.finished for r in runs), stream, progress, labelled=len(runs) > 1)
        for run in runs:
            if len(run.todo) < len(run.points):
                prog.say(
                    f"resuming: {len(run.points) - len(run.todo)} of {len(run.points)} points already in "
                    f"{run.out / 'sweep.json'}"
                )
        left = sum(len(r.todo) for r in runs)
        if left:
            prog.say(
                f"{total} points in {len(runs)} sweep{'s' if len(runs) > 1 else ''}, {left} to do, "
                f"on {backend.describe()}"
            )
            started = backend.start()
            if started:
                prog.say(started)
            prog.t0 = time.perf_counter()
        _loop(runs, backend, prog)
    except KeyboardInterrupt:
        backend.cancel()
        saved = sum(len(r.done) for r in opened)
        where = runs[0].out / "sweep.json" if len(runs) == 1 else f"{len(opened)} sweep directories"
        stream.write(
            f"\ninterrupted: {saved} of {sum(len(r.points) for r in runs)} points saved in {where}; "
            f"run the same command again to resume\n"
        )
        raise
    finally:
        try:
            backend.close()
        finally:
            _restore_sigterm(old_term)
            for run in opened:
                run.close()


def _loop(runs: list[SweepRun], backend, prog: Progress) -> None:
    def remaining():
        return sum(len(r.todo) + len(r.running) for r in runs)

    while any(r.todo or r.running for r in runs):
        while backend.in_flight() < backend.slots():
            waiting = [i for i, r in enumerate(runs) if r.todo]
            if not waiting:
                break
            i = min(waiting, key=lambda j: len(runs[j].running))  # the sweeps in turn
            run = runs[i]
            kind, x = run.take()
            if kind == "reused":
                prog.tick(run.label, x, "reused", backend.in_flight(), remaining())
            else:
                backend.submit((i, x), run.spec_d, x, backend.graph_arg(run.g))
        if not backend.in_flight():
            continue
        for (i, p), row, sched, error in backend.wait(timeout=1.0):
            row = runs[i].finish(p, row, sched, error)
            prog.tick(runs[i].label, row, "solved", backend.in_flight(), remaining())


def run_sweep(
    spec: SweepSpec,
    out,
    *,
    jobs: int | None = None,
    force: bool = False,
    retry: bool = False,
    progress: bool = True,
    stream=None,
    backend=None,
) -> dict:
    """Run (or resume) one sweep into directory ``out``; returns the sweep document.

    ``backend``: where points are solved (default: a local process pool of ``jobs`` processes;
    see :class:`poet.sweep.local.LocalBackend` and :class:`poet.sweep.ray_backend.RayBackend`)."""
    if backend is None:
        from .local import LocalBackend

        backend = LocalBackend(jobs=jobs, threads=spec.threads)
    run = SweepRun(spec, out, force=force, retry=retry)
    drive([run], backend, progress=progress, stream=stream)
    return run.doc


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


def make_backend(cluster: str | None, *, jobs: int | None = None, threads: int | None = None):
    """Where points are solved: ``None``/``"local"`` a local process pool, ``"ray"`` a Ray started
    here, anything else the address of a running Ray cluster."""
    if cluster in (None, "", "local"):
        from .local import LocalBackend

        return LocalBackend(jobs=jobs, threads=threads)
    from .ray_backend import RayBackend

    return RayBackend(cluster, jobs=jobs, threads=threads)
