"""Mixed-integer linear programs in matrix form: the problem, its result, and a row builder.

The POET MILP (:mod:`poet.solve.milp`) and the eviction cover (:mod:`poet.solve.bounds`) are
both written as a :class:`MilpProblem` and solved by the same backend (:mod:`poet.solve.lp.highs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MilpProblem:
    """min c.x  s.t.  row_lo <= A x <= row_hi,  col_lo <= x <= col_hi,  x[integer] integral.

    ``A`` is row-wise CSR: (starts, index, value).
    """

    c: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray  # bool per column
    starts: np.ndarray
    index: np.ndarray
    value: np.ndarray
    row_lo: np.ndarray
    row_hi: np.ndarray

    @property
    def num_cols(self) -> int:
        return len(self.c)

    @property
    def num_rows(self) -> int:
        return len(self.row_lo)

    @property
    def num_nonzeros(self) -> int:
        return len(self.value)


@dataclass
class MilpResult:
    status: str  # optimal | feasible | infeasible | no_solution
    x: np.ndarray | None
    objective: float | None  # in the problem's (scaled) units
    bound: float | None  # proven lower bound, same units
    gap: float | None  # relative, as the solver reports it
    seconds: float
    detail: str = ""
    extra: dict = field(default_factory=dict)


class MatrixBuilder:
    """Columns and row-wise CSR rows, appended in order."""

    def __init__(self):
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.c: list[float] = []
        self.integer: list[bool] = []
        self.starts = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.rlo: list[float] = []
        self.rhi: list[float] = []

    def var(self, lo=0.0, hi=1.0, cost=0.0, integer=True) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        self.c.append(cost)
        self.integer.append(integer)
        return len(self.lo) - 1

    def row(self, cols, vals, lo, hi):
        self.index.extend(cols)
        self.value.extend(vals)
        self.starts.append(len(self.index))
        self.rlo.append(lo)
        self.rhi.append(hi)

    def problem(self) -> MilpProblem:
        return MilpProblem(
            c=np.array(self.c),
            col_lo=np.array(self.lo),
            col_hi=np.array(self.hi),
            integer=np.array(self.integer, dtype=bool),
            starts=np.array(self.starts),
            index=np.array(self.index),
            value=np.array(self.value),
            row_lo=np.array(self.rlo),
            row_hi=np.array(self.rhi),
        )


def row_activities(p: MilpProblem, x: np.ndarray) -> np.ndarray:
    """``A @ x`` for the row-wise CSR matrix of ``p`` (numpy only)."""
    starts = np.asarray(p.starts, dtype=np.int64)
    rows = np.repeat(np.arange(p.num_rows), np.diff(starts))
    terms = np.asarray(p.value, dtype=np.float64) * np.asarray(x, dtype=np.float64)[np.asarray(p.index, dtype=np.int64)]
    return np.bincount(rows, weights=terms, minlength=p.num_rows)


def max_violation(p: MilpProblem, x: np.ndarray) -> float:
    """How far ``x`` is outside the rows' and columns' bounds (0 when it satisfies them all)."""
    ax = row_activities(p, x)
    v = max(float(np.max(p.row_lo - ax, initial=0.0)), float(np.max(ax - p.row_hi, initial=0.0)))
    v = max(v, float(np.max(p.col_lo - x, initial=0.0)), float(np.max(x - p.col_hi, initial=0.0)))
    return v


@dataclass(frozen=True)
class Restriction:
    """A problem with some columns fixed and taken out: ``problem`` over the columns ``kept`` of the
    original, whose rows are the original's that name a kept column, their bounds less the fixed
    columns' part; :meth:`lift` puts a solution of it back among the fixed values."""

    problem: MilpProblem
    kept: np.ndarray  # the original's column of each of ``problem``'s
    rows: np.ndarray  # the original's row of each of ``problem``'s
    fixed_values: np.ndarray  # a full column vector: the fixed columns' values, zero elsewhere

    def lift(self, y: np.ndarray) -> np.ndarray:
        x = self.fixed_values.copy()
        x[self.kept] = y
        return x


def restrict(p: MilpProblem, fixed: np.ndarray, values: np.ndarray) -> Restriction:
    """``p`` with the columns where ``fixed`` is true set to ``values`` and removed.

    Why: a neighbourhood search re-solves a few hundred of a MILP's ten thousand columns; handing the
    solver the whole matrix with most columns' bounds pinned costs more to translate and presolve than
    the search itself (docs/tiling.md, "Restricted sub-MILPs").  A row left without a kept column is
    dropped (the caller checks the lifted solution against ``p``'s every row)."""
    fixed = np.asarray(fixed, dtype=bool)
    fixed_values = np.where(fixed, np.asarray(values, dtype=np.float64), 0.0)
    kept = np.flatnonzero(~fixed)
    offset = row_activities(p, fixed_values)  # each row's part from the fixed columns
    index = np.asarray(p.index, dtype=np.int64)
    row_of = np.repeat(np.arange(p.num_rows), np.diff(np.asarray(p.starts, dtype=np.int64)))
    free_term = ~fixed[index]  # a row is kept exactly when it holds one of these
    counts = np.bincount(row_of[free_term], minlength=p.num_rows)
    rows = np.flatnonzero(counts)
    new_col = np.full(p.num_cols, -1, dtype=np.int64)
    new_col[kept] = np.arange(len(kept))
    sub = MilpProblem(
        c=np.asarray(p.c, dtype=np.float64)[kept],
        col_lo=np.asarray(p.col_lo, dtype=np.float64)[kept],
        col_hi=np.asarray(p.col_hi, dtype=np.float64)[kept],
        integer=np.asarray(p.integer, dtype=bool)[kept],
        starts=np.concatenate(([0], np.cumsum(counts[rows]))).astype(np.int64),
        index=new_col[index[free_term]],
        value=np.asarray(p.value, dtype=np.float64)[free_term],
        row_lo=np.asarray(p.row_lo, dtype=np.float64)[rows] - offset[rows],
        row_hi=np.asarray(p.row_hi, dtype=np.float64)[rows] - offset[rows],
    )
    return Restriction(sub, kept, rows, fixed_values)
