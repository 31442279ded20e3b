"""The HiGHS backend: a :class:`~poet.solve.lp.problem.MilpProblem` in; a status, solution, bound and gap out.

HiGHS (open source, ``highspy``) is the default and the only backend; another (OR-Tools, Gurobi)
would register in :data:`BACKENDS` with the same signature as :func:`solve_highs` and stay optional.
"""

from __future__ import annotations

import math
import os
import sys
import time

import highspy
import numpy as np

from ..errors import SolveError
from .problem import MilpProblem, MilpResult

_BANNER_SILENCED = False


_SCHEDULER_THREADS: list = [None]  # the thread count HiGHS's process-wide scheduler was started with


def _use_threads(h, threads: int | None) -> None:
    """HiGHS starts one scheduler per process and refuses a later solve that asks for a
    different thread count (it returns without solving); restart the scheduler instead."""
    want = int(threads) if threads is not None else 0  # 0: HiGHS picks (all cores)
    if _SCHEDULER_THREADS[0] is not None and _SCHEDULER_THREADS[0] != want:
        type(h).resetGlobalScheduler(True)
    _SCHEDULER_THREADS[0] = want
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
    """
    h = new_highs()
    h.setOptionValue("output_flag", bool(verbose))
    h.setOptionValue("mip_rel_gap", float(gap))
    # Tight tolerances: the schedule is re-checked in exact arithmetic afterwards.
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    _use_threads(h, threads)
    h.setOptionValue("random_seed", 0)
    # HiGHS 1.16 can loop forever in the restart that follows root-node presolve reductions,
    # ignoring time_limit (seen on the 20-node linear net on m4); without restarts it honours it.
    h.setOptionValue("mip_allow_restart", False)
    for k, v in (options or {}).items():
        h.setOptionValue(k, v)

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
    h.passModel(lp)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(np.asarray(start, dtype=np.float64))
        sol.value_valid = True
        h.setSolution(sol)

    t0 = time.perf_counter()
    if progress is not None:
        last = [0.0]

        def on_interrupt(e):
            # Called by HiGHS from inside branch-and-bound; report at most once a second.
            now = time.perf_counter() - t0
            if now - last[0] < 1.0:
                return
            last[0] = now
            d = e.data_out
            obj = d.mip_primal_bound if np.isfinite(d.mip_primal_bound) else None
            bnd = d.mip_dual_bound if np.isfinite(d.mip_dual_bound) else None
            try:
                progress(
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

        h.cbMipInterrupt.subscribe(on_interrupt)
    # Keep every improving incumbent: with a user start, HiGHS 1.16 can report an improved
    # objective while getSolution() still returns the start vector.
    incumbents: list = []

    def on_improving(e):
        sol = e.data_out.mip_solution
        if sol is not None and len(sol) == p.num_cols:
            incumbents.append(np.array(sol, dtype=np.float64))

    h.cbMipImprovingSolution.subscribe(on_improving)
    if stop is None:
        run_status = h.run()
    else:
        # solved in a thread of highspy's, so that this one can poll and ask it to stop
        h.HandleUserInterrupt = True
        h.startSolve()
        asked = False
        try:
            while True:
                done, run_status = h.wait(0.1)
                if done:
                    break
                if not asked and stop():
                    h.cancelSolve()
                    asked = True
        except BaseException:  # a second Ctrl-C: let HiGHS's thread end too
            h.cancelSolve()
            raise
    seconds = time.perf_counter() - t0
    if run_status == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
        raise SolveError("HiGHS refused to start the solve (run with verbose=True / --verbose for its log)")

    def again(why: str, **changed) -> MilpResult:
        """The same solve once more, with ``changed`` arguments, in the time left; marked ``why``."""
        rest = None if time_limit is None else max(0.1, time_limit - (time.perf_counter() - t0))
        r2 = solve_highs(
            p,
            **{
                "time_limit": rest,
                "threads": threads,
                "gap": gap,
                "start": start,
                "progress": progress,
                "verbose": verbose,
                "options": options,
                "stop": stop,
                **changed,
            },
        )
        r2.seconds += seconds
        r2.extra[why] = True
        return r2

    ms = h.getModelStatus()
    info = h.getInfo()
    S = highspy.HighsModelStatus
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    x = np.asarray(h.getSolution().col_value) if has_sol else None
    obj = info.objective_function_value if has_sol else None
    if x is not None:
        c = np.asarray(p.c, dtype=np.float64)
        tol = 1e-9 * max(1.0, abs(obj))
        cands = [v for v in [x] + incumbents if float(c @ v) <= obj + tol]
        if cands:
            x = cands[0]
        elif start is not None and ms in (S.kTimeLimit, S.kInterrupt):
            # HiGHS 1.16 prices a start in its presolved space (resnet18_cifar/m4: 1.02325 of
            # plain for a start worth 1.02665) and, stopped by the time limit, hands back the
            # start: that is the incumbent.  A solve again without it would overrun the limit.
            x = np.asarray(start, dtype=np.float64)
            obj = float(c @ x)
        elif start is not None:
            # The incumbent HiGHS reports was not handed back (seen when presolve alone solves
            # a warm-started model): solve again without the start.
            return again("restarted_without_start", start=None)
    if ms == S.kSolveError and (options or {}).get("presolve") != "off":
        # HiGHS 1.16's presolve can reduce a small MILP to nothing and postsolve that to a point
        # violating a row, then stop with "Solve error" (seen on a 6-node chain): solve again
        # without presolve
        return again("resolved_without_presolve", options={**(options or {}), "presolve": "off"})
    bound = info.mip_dual_bound
    mgap = info.mip_gap if has_sol else None
    if has_sol and obj != info.objective_function_value:  # the start, priced here
        mgap = abs(obj - bound) / abs(obj) if obj and math.isfinite(bound) else math.inf
    detail = h.modelStatusToString(ms)
    extra = {"nodes": int(info.mip_node_count)}
    if ms == S.kInfeasible:
        return MilpResult("infeasible", None, None, None, None, seconds, detail, extra)
    if ms == S.kOptimal and has_sol:
        # HiGHS says optimal only within mip_rel_gap; report it as proven if the gap holds.
        status = "optimal" if (mgap is not None and mgap <= gap + 1e-12) else "feasible"
        return MilpResult(status, x, obj, bound, mgap, seconds, detail, extra)
    if has_sol:
        # stopped (time limit, ...) with the gap already proven: that is optimal within the gap
        status = "optimal" if (mgap is not None and mgap <= gap + 1e-12) else "feasible"
        return MilpResult(status, x, obj, bound, mgap, seconds, detail, extra)
    return MilpResult("no_solution", None, None, bound, None, seconds, detail, extra)


BACKENDS = {"highs": solve_highs}


def get_backend(name: str):
    """A backend by name.  Only HiGHS exists today; another (OR-Tools, Gurobi) would register
    in BACKENDS with the same signature as :func:`solve_highs` and must stay optional."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown solver backend {name!r}; available: {', '.join(BACKENDS)}") from None
