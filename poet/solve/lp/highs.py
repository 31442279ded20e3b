"""The HiGHS backend: a :class:`~poet.solve.lp.problem.MilpProblem` in; a status, solution, bound and gap out.

HiGHS (open source, ``highspy``) is the default and the only backend; another (OR-Tools, Gurobi)
would register in :data:`BACKENDS` with the same signature as :func:`solve_highs` and stay optional.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass

import highspy
import numpy as np

from ..errors import SolveError
from .cpsat import solve_cpsat
from .problem import MilpProblem, MilpResult

_BANNER_SILENCED = False


_SCHEDULER_THREADS: int | None = None  # the thread count HiGHS's process-wide scheduler was started with


def _use_threads(h, threads: int | None) -> None:
    """HiGHS starts one scheduler per process and refuses a later solve that asks for a
    different thread count (it returns without solving); restart the scheduler instead."""
    global _SCHEDULER_THREADS
    want = int(threads) if threads is not None else 0  # 0: HiGHS picks (all cores)
    if _SCHEDULER_THREADS is not None and _SCHEDULER_THREADS != want:
        type(h).resetGlobalScheduler(True)
    _SCHEDULER_THREADS = want
    if threads is not None:
        h.setOptionValue("threads", want)


def new_highs():
    """A ``highspy.Highs`` object, without the banner the first construction prints on stdout."""
    global _BANNER_SILENCED
    if _BANNER_SILENCED:
        return highspy.Highs()
    sys.stdout.flush()
    try:
        fd = os.dup(1)
    except OSError:  # no usable stdout: nothing to protect
        _BANNER_SILENCED = True
        return highspy.Highs()
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(fd, 1)
        os.close(fd)
    _BANNER_SILENCED = True
    return h


def solve_highs(
    p: MilpProblem,
    *,
    time_limit: float | None = None,
    threads: int | None = None,
    gap: float = 1e-3,
    start: np.ndarray | None = None,
    progress=None,
    verbose: bool = False,
    options: dict | None = None,
    stop=None,
) -> MilpResult:
    """Solve ``p`` with HiGHS.

    start:    a complete feasible assignment (or None) given to HiGHS as its first incumbent.
    progress: called about once a second during branch-and-bound with a dict
              ``elapsed_s, objective, bound, gap, nodes`` (objective None before the first incumbent).
    options:  extra HiGHS options by name (e.g. ``{"mip_heuristic_effort": 0.3}``).
    stop:     polled ten times a second; once true, HiGHS is asked to stop, which it does at its
              next callback (not during presolve: on the resnet18_cifar/m4 MILP, asked at 3 s it
              stopped at 6 s, asked at 12 s at 30 s) and the result is as at a time limit.

    Two HiGHS 1.16 failures are solved again, in the time left, and the result says so in its
    ``extra`` (``restarted_without_start``, ``resolved_without_presolve``): see :meth:`HighsRun.retry`.
    """
    request = HighsRequest(time_limit, threads, gap, start, progress, verbose, dict(options or {}), stop)
    seconds, marks = 0.0, {}
    while True:
        run = HighsRun(p, request)
        seconds += run.seconds
        again = run.retry()
        if again is None:
            result = run.result()
            result.seconds = seconds
            result.extra.update(marks)
            return result
        why, request = again
        marks[why] = True


@dataclass(frozen=True)
class HighsRequest:
    """What one solve asks of HiGHS (a retry changes some of it)."""

    time_limit: float | None
    threads: int | None
    gap: float
    start: np.ndarray | None
    progress: object
    verbose: bool
    options: dict
    stop: object


class ProgressReport:
    """HiGHS's branch-and-bound callback: the caller's progress, at most once a second."""

    def __init__(self, progress, t0: float):
        self.progress, self.t0, self.last = progress, t0, 0.0

    def __call__(self, e) -> None:
        now = time.perf_counter() - self.t0
        if now - self.last < 1.0:
            return
        self.last = now
        d = e.data_out
        obj = d.mip_primal_bound if np.isfinite(d.mip_primal_bound) else None
        bnd = d.mip_dual_bound if np.isfinite(d.mip_dual_bound) else None
        try:
            self.progress(
                {
                    "elapsed_s": now,
                    "objective": obj,
                    "bound": bnd,
                    "gap": d.mip_gap if obj is not None else None,
                    "nodes": int(d.mip_node_count),
                }
            )
        except Exception:  # a failing progress printer must not kill the solve
            pass


class Incumbents:
    """HiGHS's improving-solution callback, keeping every improving solution (``found``): with a user
    start, HiGHS 1.16 can report an improved objective while getSolution() still returns the start."""

    def __init__(self, num_cols: int):
        self.num_cols = num_cols
        self.found: list[np.ndarray] = []

    def __call__(self, e) -> None:
        sol = e.data_out.mip_solution
        if sol is not None and len(sol) == self.num_cols:
            self.found.append(np.array(sol, dtype=np.float64))


class HighsRun:
    """One run of HiGHS on a problem: set up, solved (:meth:`solve`), then read: either a result
    (:meth:`result`) or a reason to solve again (:meth:`retry`)."""

    def __init__(self, p: MilpProblem, request: HighsRequest):
        self.p, self.request = p, request
        self.h = h = new_highs()
        configure(h, request)
        h.passModel(highs_lp(p))
        if request.start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(np.asarray(request.start, dtype=np.float64))
            sol.value_valid = True
            h.setSolution(sol)
        self.t0 = time.perf_counter()
        if request.progress is not None:
            h.cbMipInterrupt.subscribe(ProgressReport(request.progress, self.t0))
        self.incumbents = Incumbents(p.num_cols)
        h.cbMipImprovingSolution.subscribe(self.incumbents)
        run_status = self.solve()
        self.seconds = time.perf_counter() - self.t0
        if run_status == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
            raise SolveError("HiGHS refused to start the solve (run with verbose=True / --verbose for its log)")
        self.status = h.getModelStatus()
        self.info = h.getInfo()
        self.x, self.objective, self.start_lost = self.solution()

    def solve(self):
        """HiGHS's run; with a stop to poll, in highspy's own thread, polled ten times a second."""
        h, stop = self.h, self.request.stop
        if stop is None:
            return h.run()
        h.HandleUserInterrupt = True
        h.startSolve()
        asked = False
        try:
            while True:
                done, run_status = h.wait(0.1)
                if done:
                    return run_status
                if not asked and stop():
                    h.cancelSolve()
                    asked = True
        except BaseException:  # a second Ctrl-C: let HiGHS's thread end too
            h.cancelSolve()
            raise

    def solution(self) -> tuple[np.ndarray | None, float | None, bool]:
        """The best solution and its objective, checked against what HiGHS priced it at, and whether the
        incumbent HiGHS reports was lost (seen when presolve alone solves a warm-started model)."""
        info, start = self.info, self.request.start
        if info.primal_solution_status != 2:  # kSolutionStatusFeasible
            return None, None, False
        x, obj = np.asarray(self.h.getSolution().col_value), info.objective_function_value
        c = np.asarray(self.p.c, dtype=np.float64)
        tol = 1e-9 * max(1.0, abs(obj))
        cands = [v for v in [x, *self.incumbents.found] if float(c @ v) <= obj + tol]
        if cands:
            return cands[0], obj, False
        S = highspy.HighsModelStatus
        if start is not None and self.status in (S.kTimeLimit, S.kInterrupt):
            # HiGHS 1.16 prices a start in its presolved space (resnet18_cifar/m4: 1.02325 of
            # plain for a start worth 1.02665) and, stopped by the time limit, hands back the
            # start: that is the incumbent.  A solve again without it would overrun the limit.
            x = np.asarray(start, dtype=np.float64)
            return x, float(c @ x), False
        return x, obj, start is not None

    def retry(self) -> tuple[str, HighsRequest] | None:
        """Why and how to solve again, in the time left: the incumbent HiGHS reports was not handed back
        (solve again without the start), or HiGHS 1.16's presolve reduced a small MILP to nothing and
        postsolved that to a point violating a row, then stopped with "Solve error" (seen on a 6-node
        chain; solve again without presolve)."""
        request = self.request
        limit = request.time_limit
        rest = None if limit is None else max(0.1, limit - (time.perf_counter() - self.t0))
        if self.start_lost:
            return "restarted_without_start", dataclasses.replace(request, time_limit=rest, start=None)
        if self.status == highspy.HighsModelStatus.kSolveError and request.options.get("presolve") != "off":
            options = {**request.options, "presolve": "off"}
            return "resolved_without_presolve", dataclasses.replace(request, time_limit=rest, options=options)
        return None

    def result(self) -> MilpResult:
        """The status, solution, bound and gap; ``optimal`` only when the gap asked for is proven."""
        info, x, obj, gap = self.info, self.x, self.objective, self.request.gap
        bound = info.mip_dual_bound
        mgap = info.mip_gap if x is not None else None
        if x is not None and obj != info.objective_function_value:  # the start, priced here
            mgap = abs(obj - bound) / abs(obj) if obj and math.isfinite(bound) else math.inf
        detail = self.h.modelStatusToString(self.status)
        extra = {"nodes": int(info.mip_node_count)}
        if self.status == highspy.HighsModelStatus.kInfeasible:
            return MilpResult("infeasible", None, None, None, None, self.seconds, detail, extra)
        if x is not None:
            # optimal or stopped (time limit, ...): optimal within mip_rel_gap only if that gap is proven
            status = "optimal" if (mgap is not None and mgap <= gap + 1e-12) else "feasible"
            return MilpResult(status, x, obj, bound, mgap, self.seconds, detail, extra)
        return MilpResult("no_solution", None, None, bound, None, self.seconds, detail, extra)


def configure(h, request: HighsRequest) -> None:
    """HiGHS's options for a request."""
    h.setOptionValue("output_flag", bool(request.verbose))
    h.setOptionValue("mip_rel_gap", float(request.gap))
    # Tight tolerances: the schedule is re-checked in exact arithmetic afterwards.
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    if request.time_limit is not None:
        h.setOptionValue("time_limit", float(request.time_limit))
    _use_threads(h, request.threads)
    h.setOptionValue("random_seed", 0)
    # HiGHS 1.16 can loop forever in the restart that follows root-node presolve reductions,
    # ignoring time_limit (seen on the 20-node linear net on m4); without restarts it honours it.
    h.setOptionValue("mip_allow_restart", False)
    for k, v in request.options.items():
        h.setOptionValue(k, v)


def highs_lp(p: MilpProblem):
    """The problem as HiGHS's model (row-wise matrix, integrality per column)."""
    lp = highspy.HighsLp()
    lp.num_col_ = p.num_cols
    lp.num_row_ = p.num_rows
    lp.col_cost_ = np.asarray(p.c, dtype=np.float64)
    lp.col_lower_ = np.asarray(p.col_lo, dtype=np.float64)
    lp.col_upper_ = np.asarray(p.col_hi, dtype=np.float64)
    lp.row_lower_ = np.asarray(p.row_lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(p.row_hi, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(p.starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(p.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(p.value, dtype=np.float64)
    lp.integrality_ = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous for b in p.integer]
    return lp


BACKENDS = {"highs": solve_highs, "cpsat": solve_cpsat}


def get_backend(name: str):
    """A backend by name: HiGHS (the default) or CP-SAT (:mod:`.cpsat`, optional: OR-Tools); another
    (Gurobi) would register in BACKENDS with the same signature as :func:`solve_highs`."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown solver backend {name!r}; available: {', '.join(BACKENDS)}") from None
