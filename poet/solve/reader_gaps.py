"""The reader-gap cover: the eviction cover charged once per absence between two readers, not once per tensor.

The eviction cover (:mod:`poet.solve.bounds`) lets a tensor that is absent at one tight moment be absent
at all of them for the price of one restoration.  On tiled graphs a tile is read by several nodes far
apart (a key tile of attention by every query tile's chain, a row tile by the convolutions of its
neighbours), and a budget that cannot hold it between two of those readers forces one restoration per
gap.  The cover does not see that; this bound does.

**The argument** (any schedule in the MILP's stage form: node t is first computed in stage t).  Let
``r_1 < r_2 < ... < r_L`` be the readers of tensor i (its successors, by id), and *gap j* the moments
strictly between ``r_j`` and ``r_(j+1)`` (gap 0 starts after i).  If i is absent at some moment of gap j,
it is in RAM again when ``r_(j+1)`` is first computed, so it was restored (paged in or recomputed) in
between; those events lie in disjoint stretches of time for different gaps.  Columns, besides the
cover's (``X[i]`` absent somewhere, paid by a page-in after one page-out or a recomputation with its
chain of dead inputs, exactly as there):

* ``x[i, j]`` (binary): i absent at some moment of gap j; ``x[i, j] <= X[i]``;
* ``e[i]`` (integer): restorations of i past the first, ``e[i] >= sum_j x[i, j] - X[i]``, each priced at
  the cheaper of i's page-in and its recomputation (its chain and page-out are not priced again, so the
  bound only falls);
* ``w[i, j]`` (continuous): the share of i's bytes its kept chain takes back in gap j,
  ``w[i, j] >= sum_p share_p keep_p / m_i + x[i, j] - 1``.  A dead input kept for i's recomputation is in
  RAM at every moment i is absent before that recomputation; read off a schedule, ``keep`` is that of the
  last recomputation where every restoration of i is one, and 0 where one is a page-in (then ``X[i]`` is
  paid by that page-in).

Each tight moment's row (the cover's) credits i in gap j only: ``sum_i m_i (x[i, j(k)] - w[i, j(k)]) >=
need_k``.  Every schedule gives an assignment meeting every row whose cost is at most its extra energy
over plain backprop, so the ILP's proven dual bound (a time limit keeps it valid) is a lower bound; it is
at least the cover's (the cover is the case ``x[i, j] = X[i]``) once solved.  Tested never above an exact
optimum (tests/test_reader_gaps.py).  Measured on the ``m4`` at 256 KiB, the tiled one-block transformer
(2,496 nodes): the cover 45.00 J, this bound 52.30 J in 20 s (docs/tiling.md).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from dataclasses import dataclass

from ..graph.core import CostedGraph
from ..schedule.core import Budget
from .bounds import CoverILP, Moments, links_within
from .lp.highs import solve_highs
from .policy import DEFAULT_POLICY, SolvePolicy


@dataclass(frozen=True)
class ReaderGapBound:
    """The bound on the energy (``None``: not computed, for ``reason``) and the ILP's size."""

    bound: float | None
    nonzeros: int = 0
    reason: str = ""


class ReaderGapILP(CoverILP):
    """The cover's ILP with its moment rows crediting each tensor per gap between its readers."""

    def moment_rows(self) -> None:
        g, m, mo, nd = self.g, self.g.ram, self.moments, self.g.nodes
        live_at = mo.live_at()
        readers: dict[int, list[int]] = {}
        absent: dict[tuple[int, int], int] = {}  # (tensor, gap) -> its x column
        kept: dict[tuple[int, int], int] = {}  # (tensor, gap) -> its w column (tensors with a chain)
        for k, (t, need) in enumerate(zip(mo.tight, mo.needs)):
            inputs = set(g.preds[t])
            row: dict[int, float] = {}
            for i in live_at[k]:
                if i in inputs:
                    continue
                if i not in readers:
                    readers[i] = sorted({s for s in g.succs[i] if s > i})
                key = (i, bisect_left(readers[i], t))
                if key not in absent:
                    self.gap_columns(key, absent, kept)
                row[absent[key]] = row.get(absent[key], 0.0) + m[i] / need
                if key in kept:
                    row[kept[key]] = row.get(kept[key], 0.0) - m[i] / need
            self.row(row, 1.0, math.inf)
        gaps: dict[int, list[int]] = {}
        for (i, _j), col in absent.items():
            gaps.setdefault(i, []).append(col)
        for i, cols in gaps.items():
            if len(cols) < 2:
                continue
            costs = ([nd[i].pagein_energy_j] if self.paging else []) + ([nd[i].compute_energy_j] if self.remat else [])
            extra = self.builder.var(0.0, float(len(cols) - 1), min(costs) / self.unit)
            self.row({extra: 1.0, self.X[i]: 1.0, **dict.fromkeys(cols, -1.0)}, 0.0, math.inf)

    def gap_columns(self, key: tuple[int, int], absent: dict, kept: dict) -> None:
        """x[i, j] <= X[i], and w[i, j] where i has a chain whose kept links take RAM back."""
        i, m = key[0], self.g.ram
        x = absent[key] = self.builder.var(0.0, 1.0, 0.0)
        self.row({x: 1.0, self.X[i]: -1.0}, -math.inf, 0.0)
        if self.chain[i]:
            w = kept[key] = self.builder.var(0.0, 1.0, 0.0, integer=False)
            coef = {w: 1.0, x: -1.0}
            for keep, share in self.chain[i]:
                coef[keep] = coef.get(keep, 0.0) - share / m[i]
            self.row(coef, -1.0, math.inf)


def reader_gap_bound(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float | None = 10.0,
    stop=None,
    policy: SolvePolicy = DEFAULT_POLICY,
) -> ReaderGapBound:
    """A lower bound on the energy of any schedule in the MILP's stage form (see the module's docstring);
    not computed when no moment is tight, a technique set allows no restoration, or HiGHS could not set
    the ILP up within half of ``time_limit`` (at ``policy.milp_setup_s_per_nonzero``)."""
    if not (remat or paging):
        return ReaderGapBound(None, 0, "no technique restores a tensor")
    moments = Moments(g, budget)
    if not moments.tight:
        return ReaderGapBound(None, 0, "no moment exceeds the budget")
    # per credited (tensor, moment) pair its x (and its w where a chain takes RAM back), per tensor its
    # rows, per chain link its rows (the transformer at 256 KiB on the m4: 0.97 M estimated, 0.92 M built)
    links = links_within(moments.dead_inputs, moments.chain_depth(policy))
    estimate = sum((b - a) * (2 if links[i] else 1) + 8 + 7 * links[i] for i, (a, b) in moments.span.items())
    rate = policy.milp_setup_s_per_nonzero
    if time_limit is not None and rate * estimate > 0.8 * time_limit:
        return ReaderGapBound(None, estimate, f"about {estimate:,} nonzeros, too many to set up in {time_limit:.0f} s")
    built_at = time.perf_counter()
    ilp = ReaderGapILP(g, budget, moments, remat=remat, paging=paging, objective="energy", policy=policy)
    p = ilp.builder.problem()
    if time_limit is not None:
        time_limit = max(0.1, time_limit - (time.perf_counter() - built_at))
    if stop is not None and stop():
        return ReaderGapBound(None, p.num_nonzeros, "stopped")
    r = solve_highs(p, time_limit=time_limit, gap=1e-6, options={"mip_abs_gap": policy.cover_abs_gap}, stop=stop)
    if r.status == "infeasible":
        return ReaderGapBound(math.inf, p.num_nonzeros)
    extra = r.bound if r.bound is not None and math.isfinite(r.bound) else 0.0
    extra -= 1e-6 * (1.0 + abs(extra))  # the solver's dual bound is exact only to its tolerances
    return ReaderGapBound(g.plain_energy_j + max(0.0, extra) * ilp.unit, p.num_nonzeros)
