"""The CP-SAT backend (optional, ``ortools``): the same :class:`MilpProblem` in, the same result out.

CP-SAT takes integer coefficients only, so the problem is translated into a *relaxation* of itself,
never a restriction, and its proven bound stays a bound of the original:

* a row whose coefficients are exact fractions with a common denominator (the RAM rows: bytes over
  the budget) is multiplied by it and kept exact; the continuous columns (the RAM in use, ``U``) may
  appear only in such rows and become integers in the same unit (bytes), which they are in any
  solution of the original, since every other term of their rows is a whole number of bytes;
* any other row (the deadline: seconds over the deadline) is scaled to about 2^30 and rounded
  outwards: ``floor`` of each coefficient in a ``<=`` row, ``ceil`` in a ``>=`` row (columns are
  non-negative), the right-hand side the other way, so every solution of the original satisfies it;
* the objective's coefficients are rounded down at 2^33 per unit (a plain backprop's energy), so it
  is at most the original's on every column vector.

The solution CP-SAT returns satisfies the relaxation: the caller decodes and *validates* the
schedule (as it does with HiGHS's) and prices it exactly.  Its objective here is the original
``c.x``; its bound is CP-SAT's proven bound of the relaxation, which no schedule beats.
"""

from __future__ import annotations

import math
import threading
import time
from fractions import Fraction

import numpy as np

from ..errors import SolveError
from .problem import MilpProblem, MilpResult

OBJ_SCALE = 1 << 33  # objective units per problem unit
ROW_SCALE = 1 << 30  # a relaxed row's largest coefficient, scaled
MAX_DENOMINATOR = 1 << 40  # an exact row's common denominator may not exceed this


def available() -> bool:
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def _denominator(values, limit: int = MAX_DENOMINATOR) -> int | None:
    """The least common denominator of ``values`` if each is an exact fraction with one, else None."""
    den = 1
    for v in set(float(x) for x in values):
        if not math.isfinite(v):
            return None
        fr = Fraction(v).limit_denominator(1 << 32)
        if abs(float(fr) - v) > 1e-12 * max(1.0, abs(v)):
            return None
        den = math.lcm(den, fr.denominator)
        if den > limit:
            return None
    return den


def _rows(p: MilpProblem):
    starts = np.asarray(p.starts, dtype=np.int64)
    for r in range(p.num_rows):
        a, b = int(starts[r]), int(starts[r + 1])
        yield r, np.asarray(p.index[a:b], dtype=np.int64), np.asarray(p.value[a:b], dtype=np.float64)


class Translation:
    """The CP-SAT model of a problem's relaxation, and the units of its continuous columns."""

    def __init__(self, p: MilpProblem):
        from ortools.sat.python import cp_model

        if np.any(np.asarray(p.col_lo) < 0):
            raise SolveError("the CP-SAT backend needs non-negative columns")
        self.p, self.model = p, cp_model.CpModel()
        continuous = ~np.asarray(p.integer, dtype=bool)
        rows = list(_rows(p))
        exact_with_cont = [(r, cols, vals) for r, cols, vals in rows if np.any(continuous[cols])]
        # one unit for every continuous column: the common denominator of the rows holding them
        bounds = [p.row_lo[r] for r, _, _ in exact_with_cont] + [p.row_hi[r] for r, _, _ in exact_with_cont]
        bounds = [b for b in bounds if math.isfinite(b)]
        values = [v for _, _, vals in exact_with_cont for v in vals] + bounds
        ccols = np.flatnonzero(continuous)
        col_bounds = [b for c in ccols for b in (p.col_lo[c], p.col_hi[c]) if math.isfinite(b)]
        self.unit = _denominator(values + col_bounds) if len(ccols) else 1
        if self.unit is None:
            raise SolveError(
                "the CP-SAT backend takes continuous columns only in rows of exact fractions (RAM); "
                "this problem has others (overlapped paging?): use the HiGHS backend"
            )
        self.vars = []
        for j in range(p.num_cols):
            lo, hi = float(p.col_lo[j]), float(p.col_hi[j])
            if continuous[j]:
                lo_i = math.ceil(lo * self.unit - 1e-6)
                hi_i = math.floor(hi * self.unit + 1e-6) if math.isfinite(hi) else int(1 << 50)
            else:
                lo_i, hi_i = math.ceil(lo - 1e-9), math.floor(hi + 1e-9) if math.isfinite(hi) else int(1 << 50)
            self.vars.append(self.model.NewIntVar(lo_i, hi_i, f"x{j}"))
        self.relaxed_rows = 0
        for r, cols, vals in rows:
            self.add_row(cols, vals, float(p.row_lo[r]), float(p.row_hi[r]), continuous)
        c = np.asarray(p.c, dtype=np.float64)
        if np.any(c[continuous] != 0):
            raise SolveError("the CP-SAT backend needs a zero cost on continuous columns")
        coef = np.floor(c * OBJ_SCALE).astype(np.int64)
        nz = np.flatnonzero(coef)
        self.model.Minimize(sum(int(coef[j]) * self.vars[j] for j in nz))

    def add_row(self, cols, vals, lo: float, hi: float, continuous) -> None:
        terms_cont = bool(np.any(continuous[cols]))
        ends = [x for x in (lo, hi) if math.isfinite(x)]
        if terms_cont:
            k = self.unit  # exact: every term a whole number of units
            ints = np.rint(vals * k).astype(np.int64)
            # a continuous column is already in units: its coefficient is taken as it is
            ints = np.where(continuous[cols], np.rint(vals).astype(np.int64), ints)
            if np.any(np.abs(np.where(continuous[cols], vals, vals * k) - ints) > 1e-6):
                raise SolveError("the CP-SAT backend found a RAM row that is not in whole units")
            expr = sum(int(a) * self.vars[j] for j, a in zip(cols, ints) if a)
            if lo == hi:
                self.model.Add(expr == int(round(lo * k)))
                return
            if math.isfinite(lo):
                self.model.Add(expr >= math.ceil(lo * k - 1e-6))
            if math.isfinite(hi):
                self.model.Add(expr <= math.floor(hi * k + 1e-6))
            return
        k = _denominator(list(vals) + ends)
        if k is not None:
            ints = np.rint(vals * k).astype(np.int64)
            expr = sum(int(a) * self.vars[j] for j, a in zip(cols, ints) if a)
            if math.isfinite(lo):
                self.model.Add(expr >= int(round(lo * k)))
            if math.isfinite(hi):
                self.model.Add(expr <= int(round(hi * k)))
            return
        self.relaxed_rows += 1
        k = ROW_SCALE / max(float(np.max(np.abs(vals))), 1e-300)
        if math.isfinite(hi):
            ints = np.floor(vals * k).astype(np.int64)
            self.model.Add(sum(int(a) * self.vars[j] for j, a in zip(cols, ints) if a) <= math.ceil(hi * k))
        if math.isfinite(lo):
            ints = np.ceil(vals * k).astype(np.int64)
            self.model.Add(sum(int(a) * self.vars[j] for j, a in zip(cols, ints) if a) >= math.floor(lo * k))

    def hint(self, start: np.ndarray) -> None:
        continuous = ~np.asarray(self.p.integer, dtype=bool)
        for j, v in enumerate(start):
            self.model.AddHint(self.vars[j], int(round(v * self.unit)) if continuous[j] else int(round(v)))

    def values(self, solver) -> np.ndarray:
        continuous = ~np.asarray(self.p.integer, dtype=bool)
        x = np.array([solver.Value(v) for v in self.vars], dtype=np.float64)
        x[continuous] /= self.unit
        return x


def solve_cpsat(
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
    """Solve ``p``'s relaxation (module docstring) with CP-SAT; the signature of ``solve_highs``.

    ``options`` are CP-SAT parameters by name (``{"num_workers": 2}``)."""
    if not available():
        raise SolveError("the CP-SAT backend needs OR-Tools: pip install 'poet-edge[cp]'")
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    tr = Translation(p)
    if start is not None:
        tr.hint(start)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = int(threads) if threads else 2
    prm.relative_gap_limit = float(gap)
    prm.log_search_progress = bool(verbose)
    if time_limit is not None:
        prm.max_time_in_seconds = max(0.1, float(time_limit) - (time.perf_counter() - t0))
    for k, v in (options or {}).items():
        setattr(prm, k, v)

    class Callback(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            if progress is not None:
                progress(
                    {
                        "elapsed_s": time.perf_counter() - t0,
                        "objective": self.ObjectiveValue() / OBJ_SCALE,
                        "bound": self.BestObjectiveBound() / OBJ_SCALE,
                        "gap": None,
                        "nodes": None,
                    }
                )

    done = threading.Event()
    result: dict = {}

    def run():
        try:
            result["status"] = solver.Solve(tr.model, Callback())
        finally:
            done.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    while not done.wait(0.1):
        if stop is not None and stop():
            solver.StopSearch()
    worker.join()
    seconds = time.perf_counter() - t0
    status = result["status"]
    name = solver.StatusName(status)
    extra = {"relaxed_rows": tr.relaxed_rows, "unit": tr.unit}
    if status == cp_model.INFEASIBLE:
        # the relaxation has no solution, so neither has the original
        return MilpResult("infeasible", None, None, None, None, seconds, name, extra)
    bound = solver.BestObjectiveBound() / OBJ_SCALE
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        x = tr.values(solver)
        obj = float(np.dot(np.asarray(p.c, dtype=np.float64), x))
        bound = min(bound, obj)
        g = (obj - bound) / abs(obj) if obj else 0.0
        return MilpResult("optimal" if g <= gap + 1e-12 else "feasible", x, obj, bound, g, seconds, name, extra)
    return MilpResult("no_solution", None, None, bound, None, seconds, name, extra)
