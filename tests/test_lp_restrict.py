"""``poet.solve.lp.problem.restrict``: a MILP with some columns fixed and taken out has the same solutions
on the columns left as the MILP with those columns' bounds pinned, and ``lift`` puts them back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poet.solve.lp.highs import solve_highs
from poet.solve.lp.problem import MatrixBuilder, max_violation, restrict, row_activities


def random_milp(rng: np.random.Generator, cols: int = 14, rows: int = 10):
    """A covering-and-packing MILP with a known solution (all ones): integer and continuous columns,
    rows of both senses, some with fractional coefficients."""
    m = MatrixBuilder()
    for j in range(cols):
        m.var(0.0, 3.0, cost=float(rng.uniform(0.5, 2.0)), integer=j % 4 != 3)
    ones = np.ones(cols)
    for _ in range(rows):
        idx = sorted(rng.choice(cols, size=int(rng.integers(2, 6)), replace=False).tolist())
        vals = [float(rng.integers(1, 5)) / 4.0 for _ in idx]
        act = float(np.dot(vals, ones[idx]))
        if rng.random() < 0.5:
            m.row(idx, vals, act - float(rng.integers(0, 3)) / 4.0, np.inf)
        else:
            m.row(idx, vals, -np.inf, act + float(rng.integers(0, 3)) / 4.0)
    return m.problem(), ones


@pytest.mark.parametrize("seed", range(6))
def test_the_restricted_milp_has_the_pinned_milps_optimum_and_lifts_to_a_solution(seed):
    rng = np.random.default_rng(seed)
    p, x = random_milp(rng)
    fixed = np.asarray(p.integer) & (rng.random(p.num_cols) < 0.5)
    r = restrict(p, fixed, x)
    assert r.problem.num_cols == int(np.sum(~fixed))
    assert np.array_equal(r.lift(x[r.kept]), x)
    # the rows kept hold the same activity as the original's, less the fixed columns' part
    y = rng.uniform(0.0, 3.0, size=r.problem.num_cols)
    assert max_violation(r.problem, x[r.kept]) <= 1e-12
    fixed_part = row_activities(p, r.lift(np.zeros_like(y)))
    free_part = row_activities(p, r.lift(y)) - fixed_part
    assert np.allclose(row_activities(r.problem, y), free_part[r.rows], atol=1e-12)
    assert np.allclose(r.problem.row_lo, p.row_lo[r.rows] - fixed_part[r.rows])
    assert np.allclose(r.problem.row_hi, p.row_hi[r.rows] - fixed_part[r.rows])
    dropped = np.setdiff1d(np.arange(p.num_rows), r.rows)
    assert np.allclose(free_part[dropped], 0.0)  # no column left in a dropped row
    lo, hi = p.col_lo.copy(), p.col_hi.copy()
    lo[fixed], hi[fixed] = x[fixed], x[fixed]
    pinned = solve_highs(replace(p, col_lo=lo, col_hi=hi), gap=0.0)
    sub = solve_highs(r.problem, gap=0.0)
    assert pinned.status == sub.status == "optimal"
    lifted = r.lift(sub.x)
    assert max_violation(p, lifted) <= 1e-7
    assert np.allclose(lifted[fixed], x[fixed])
    assert float(p.c @ lifted) == pytest.approx(float(p.c @ pinned.x), rel=1e-9, abs=1e-9)


def test_a_row_left_without_a_free_column_is_dropped_and_one_with_some_kept_with_shifted_bounds():
    m = MatrixBuilder()
    a, b, c = m.var(cost=1.0), m.var(cost=1.0), m.var(cost=1.0)
    m.row([a, b], [1.0, 1.0], 1.0, np.inf)  # a + b >= 1: b is free, kept as b >= 1 - a
    m.row([a, c], [2.0, 1.0], -np.inf, 2.0)  # both fixed: dropped
    p = m.problem()
    r = restrict(p, np.array([True, False, True]), np.array([1.0, 0.0, 0.0]))
    assert r.kept.tolist() == [b]
    assert r.rows.tolist() == [0]
    assert r.problem.row_lo.tolist() == [0.0] and r.problem.row_hi.tolist() == [np.inf]
    assert r.lift(np.array([1.0])).tolist() == [1.0, 1.0, 0.0]
