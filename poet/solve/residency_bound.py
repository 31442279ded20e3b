"""The residency bound: a lower bound that sees forced paging, by following each tensor's residency
from one node's computation to the next and pricing the RAM every restoration needs where it happens.

The eviction cover (:mod:`poet.solve.bounds`) charges each tensor at most one restoration and checks
RAM only where a node is first computed.  On tiled graphs that is loose: a tile read in the forward
and the backward pass may come back twice, and bringing one back (a page-in, or a recomputation with
all its inputs) needs RAM where the backward pass already holds its gradients, so the recomputation
chains the cover takes as cheap may not fit, and paging (on the ``m4`` dearer per tensor than the
whole plain pass) is forced.

**The argument** (any schedule in the MILP's stage form: node t is first computed in stage t, so first
computations follow the node ids).  Time is cut at the computations of the nodes: *moment* t is node
t's first computation, *gap* t the time between moments t and t + 1 (where stage t + 1's page-ins and
recomputations happen).  ``cap`` is the RAM a plan may use less the fixed RAM.  Columns:

* ``y[q, t]``: tensor q absent at moment t (q computed before t, read after t, not an input of t);
* ``a[p, t]``, ``r[p, t]``: p paged in / recomputed at least once in gap t (each a distinct event, priced
  once: a page-in, plus ``o[p]``, p's page-out, once; a recomputation);
* ``w[q, t]``: q absent at some time in gap t (q computed by t and read after it);
* ``k[p, t]``: a tensor p past its last reader, in RAM at moment t (kept for a recomputation in gap t).

Rows, each true of every stage-form schedule with the columns read off it:

* *absence ends in a restoration*: ``y[q, t] <= a[q, t] + r[q, t] + y[q, t + 1]`` (``y[q, t + 1]`` is 0
  where t + 1 reads q), and ``w[q, t] <= a[q, t] + r[q, t] + y[q, t + 1]``;
* *RAM at each moment*: the bytes of t, its inputs and every tensor alive across t, less the absent
  ones, plus the kept ``k[p, t]``, fit ``cap``;
* *RAM at each restoration* (what the cover does not see): when v is recomputed in gap t, v and all
  its inputs are in RAM, and so is every tensor alive across the gap unless ``w`` says it is absent:
  ``sum m_q w[q, t] >= r[v, t] * (m_v + m(inputs) + m(alive across) - cap)``; a page-in the same without
  the inputs;
* *inputs of a recomputation*: an input p of v recomputed in gap t is in RAM then, so it was restored
  in the gap, or was in RAM at moment t: ``y[p, t] <= a[p, t] + r[p, t] + 1 - r[v, t]`` for p alive at t,
  and ``a[p, t] + r[p, t] + k[p, t] >= r[v, t]`` for p past its last reader (recursively up to
  ``max_depth`` links: cutting there drops rows, so the bound only falls);
* *a kept tensor was kept before*: p past its last reader and in RAM at moment t was in RAM at moment
  t - 1 or came back in gap t - 1: ``k[p, t] <= k[p, t - 1] + a[p, t - 1] + r[p, t - 1]`` (at its last
  reader it is an input, in RAM anyway), and it takes RAM at each of those moments -- a chain held
  for a late recomputation costs RAM all along, as the cover's chains do;
* a deadline caps the restorations' time (serial paging: page-ins and page-outs too).

The least cost of an assignment meeting every row is a lower bound on the extra energy over plain
backprop; the ILP's proven dual bound is used, so a time limit keeps it valid.  Neither it nor the cover
implies the other (the cover's LP is solved to optimality more often), so the portfolio uses the larger
of the two.  Its size grows with nodes times tensors alive at once: it is built only on graphs of at
most ``max_nodes`` nodes and ``max_nonzeros`` nonzeros.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ..graph.core import CostedGraph
from ..schedule.core import PAGING_SERIAL, Budget
from .lp.bound_process import dual_bound
from .lp.highs import solve_highs
from .lp.problem import MatrixBuilder
from .stage.plan import ram_cap


@dataclass(frozen=True)
class ResidencyBound:
    """The bound on the energy (``inf``: nothing fits within the deadline; ``None``: not computed, for
    ``reason``) and the ILP's size."""

    bound: float | None
    nonzeros: int = 0
    reason: str = ""


def residency_bound(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float | None = 10.0,
    max_nodes: int = 400,
    max_nonzeros: int = 300_000,
    max_depth: int = 8,
    stop=None,
    child_past: int | None = None,
) -> ResidencyBound:
    """A valid lower bound on the energy of any stage-form schedule under ``budget`` (see the module).

    ``child_past``: an ILP of more nonzeros is solved in a child process
    (:mod:`~poet.solve.lp.bound_process`), so that its time limit and ``stop`` hold while HiGHS presolves it."""
    if len(g.nodes) > max_nodes:
        return ResidencyBound(None, 0, f"{len(g.nodes)} nodes, more than {max_nodes}")
    model = ResidencyILP(g, budget, remat=remat, paging=paging, max_depth=max_depth)
    if not model.build(max_nonzeros, stop):
        if model.nonzeros <= max_nonzeros:
            return ResidencyBound(None, model.nonzeros, "stopped while building its ILP")
        return ResidencyBound(None, model.nonzeros, f"over {max_nonzeros:,} nonzeros")
    p = model.b.problem()
    if p.num_rows == 0:
        return ResidencyBound(g.plain_energy_j, 0)
    if child_past is not None and model.nonzeros > child_past and time_limit is not None:
        run = dual_bound(p, time_limit=time_limit, stop=stop)
        infeasible, bound = run.infeasible, run.bound
    else:
        r = solve_highs(p, time_limit=time_limit, gap=1e-6, stop=stop)
        infeasible, bound = r.status == "infeasible", r.bound
    if infeasible:
        return ResidencyBound(math.inf, p.num_nonzeros)
    return ResidencyBound(g.plain_energy_j + proven_extra(bound) * model.unit, p.num_nonzeros)


def proven_extra(bound: float | None) -> float:
    """A dual bound of the ILP (in its units; None or not finite: none) as a safe lower bound on the extra
    energy: the solver's dual bound is exact only to its tolerances, and the extra is never negative."""
    extra = bound if bound is not None and math.isfinite(bound) else 0.0
    return max(0.0, extra - 1e-6 * (1.0 + abs(extra)))


class ResidencyILP:
    """The ILP of the module's argument on :class:`~poet.solve.lp.problem.MatrixBuilder`."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        *,
        remat: bool,
        paging: bool,
        max_depth: int,
        span: tuple[int, int] | None = None,
        charged: frozenset[int] | None = None,
    ):
        """``span`` = (first, last) moment: the ILP of that stretch alone (:mod:`poet.solve.residency_stretches`;
        None: the whole graph); ``charged``: the tensors whose page-out it prices (None: all)."""
        self.g, self.budget, self.remat, self.paging, self.max_depth = g, budget, remat, paging, max_depth
        self.m, self.nd = g.ram, g.nodes
        n = len(g.nodes)
        self.t0, self.t1 = (0, n - 1) if span is None else span
        if not 0 <= self.t0 <= self.t1 < max(n, 1):
            raise ValueError(f"a stretch is moments first..last within 0..{n - 1}, got {span}")
        self.charged = charged
        # each tensor's last reader up to the stretch's last moment (-1 if none): past it, a tensor may be
        # absent for free here, its later readers being another stretch's
        self.last = g.last_reader if span is None else last_readers_by(g, self.t1)
        self.cap = ram_cap(budget.ram_bytes) - g.fixed_ram_bytes
        self.unit_bytes = float(max(self.cap, 1))  # the absent bytes' unit (keeps the rows' coefficients near 1)
        self.unit = g.plain_energy_j or 1.0
        self.serial = budget.paging_time == PAGING_SERIAL
        self.inputs = [sorted(set(g.preds[t])) for t in range(len(g.nodes))]
        self.b = MatrixBuilder()
        self.nonzeros = 0
        self.y: dict[tuple[int, int], int] = {}
        self.w: dict[tuple[int, int], int] = {}
        self.events: dict[tuple[int, int], tuple[int, int]] = {}  # (p, t) -> (a, r) columns
        self.keep: dict[tuple[int, int], int] = {}
        self.pageout: dict[int, int] = {}
        self.timed: list[tuple[int, float]] = []
        self.kept_at: dict[int, dict[int, float]] = {}  # moment -> {keep column: bytes}
        self.done: set[tuple[int, int]] = set()  # events whose rows are built
        self.absent: dict[int, int] = {}  # gap -> W[t] column
        self.across: dict[int, list[int]] = {}  # gap -> the tensors alive across it

    def alive(self) -> dict[int, list[int]]:
        """Per moment t of the stretch: the tensors computed before t and read after t (some may be inputs of
        t)."""
        m, last, t0, t1 = self.m, self.last, self.t0, self.t1
        starts: dict[int, list[int]] = {}  # moment -> the tensors alive from it on
        for q in range(t1):
            if m[q] > 0 and last[q] > max(q, t0):
                starts.setdefault(max(q + 1, t0), []).append(q)
        out, cur = {}, set()
        ends: dict[int, list[int]] = {}
        for t in range(t0, t1 + 1):
            for q in starts.get(t, ()):
                cur.add(q)
                ends.setdefault(last[q], []).append(q)
            for q in ends.pop(t, ()):
                cur.discard(q)
            out[t] = sorted(cur)
        return out

    def var(self, cost: float, allowed: bool = True, seconds: float = 0.0) -> int:
        col = self.b.var(0.0, 1.0 if allowed else 0.0, cost / self.unit)
        if seconds > 0:
            self.timed.append((col, seconds))
        return col

    def row(self, coef: dict[int, float], lo: float, hi: float) -> None:
        self.b.row(list(coef), list(coef.values()), lo, hi)
        self.nonzeros += len(coef)

    def event(self, p: int, t: int) -> tuple[int, int]:
        """p's page-in and recomputation columns in gap t."""
        if (p, t) not in self.events:
            nd = self.nd[p]
            priced = self.charged is None or p in self.charged  # else another stretch prices its page-out
            if priced and p not in self.pageout:
                self.pageout[p] = self.var(nd.pageout_energy_j, self.paging, nd.pageout_time_s * self.serial)
            a = self.var(nd.pagein_energy_j, self.paging, nd.pagein_time_s * self.serial)
            r = self.var(nd.compute_energy_j, self.remat, nd.compute_time_s)
            if priced:
                self.row({a: 1.0, self.pageout[p]: -1.0}, -math.inf, 0.0)
            self.events[(p, t)] = (a, r)
        return self.events[(p, t)]

    def build(self, max_nonzeros: int, stop=None) -> bool:
        """Every row; False once past ``max_nonzeros`` or once ``stop()`` (the ILP is then not solved)."""

        def over() -> bool:
            return self.nonzeros > max_nonzeros or (stop is not None and stop())

        m, moments, gaps = self.m, range(self.t0, self.t1 + 1), range(self.t0, self.t1)
        alive = self.alive()
        for t in moments:
            ins = set(self.inputs[t])
            for q in alive[t]:
                if q not in ins:
                    self.y[(q, t)] = self.var(0.0)
        # alive across gap t: computed by t, read after it
        self.across = across = {t: alive[t] + ([t] if m[t] > 0 and self.last[t] > t else []) for t in gaps}
        for t in gaps:
            for q in across[t]:
                a, r = self.event(q, t)
                after = self.y.get((q, t + 1))
                w = self.w[(q, t)] = self.var(0.0)
                restored = {a: -1.0, r: -1.0, **({after: -1.0} if after is not None else {})}
                for col in ((self.y[(q, t)],) if (q, t) in self.y else ()) + (w,):
                    self.row({col: 1.0, **restored}, -math.inf, 0.0)
            if over():
                return False
        for t in gaps:
            for q in across[t]:
                self.restore_rows(q, t, 0)
            if over():
                return False
        for t in moments:
            ins = set(self.inputs[t])
            need = m[t] + sum(m[q] for q in ins) + sum(m[q] for q in alive[t] if q not in ins) - self.cap
            coef = {self.y[(q, t)]: float(m[q]) for q in alive[t] if q not in ins and m[q] > 0}
            for col, size in self.kept_at.get(t, {}).items():
                coef[col] = -size
            if need > 0 or self.kept_at.get(t):
                self.row(coef, float(need), math.inf)
        self.deadline_row()
        return self.nonzeros <= max_nonzeros

    def restore_rows(self, v: int, t: int, depth: int) -> None:
        """The RAM rows of v's page-in and recomputation in gap t, and its recomputation's inputs (once
        per event)."""
        if (v, t) in self.done:
            return
        self.done.add((v, t))
        m, cap, unit = self.m, self.cap, self.unit_bytes
        a, r = self.event(v, t)
        ins = set(self.inputs[v])
        across = self.across[t]
        held = sum(m[q] for q in across if q != v)
        between = [q for q in ins if q != v and (q, t) in self.w]  # inputs alive across the gap
        for col, kept_in, need in (
            (a, [], m[v] + held - cap),
            (r, between, m[v] + held + sum(m[q] for q in ins if (q, t) not in self.w) - cap),
        ):
            if need > 0:
                # sum of m_q w[q, t] over the tensors that may be absent >= need * col, written on the gap's
                # total W[t] less what may not be absent (v, and a recomputation's inputs): a few nonzeros
                # a row instead of one per tensor alive across the gap, the same constraint
                coef = {self.absent_bytes(t): 1.0, col: -need / unit}
                for q in ([v] if (v, t) in self.w else []) + kept_in:
                    coef[self.w[(q, t)]] = coef.get(self.w[(q, t)], 0.0) - m[q] / unit
                self.row(coef, 0.0, math.inf)
        if not self.remat or depth >= self.max_depth:
            return
        for p in ins:
            if m[p] <= 0:
                continue
            pa, pr = self.event(p, t)
            if (p, t) in self.y:  # alive at moment t: absent then means restored in the gap
                self.row({self.y[(p, t)]: 1.0, pa: -1.0, pr: -1.0, r: 1.0}, -math.inf, 1.0)
            elif self.last[p] <= t:  # past its last reader: restored in the gap, or in RAM at moment t
                self.row({pa: 1.0, pr: 1.0, self.kept(p, t, depth): 1.0, r: -1.0}, 0.0, math.inf)
                self.restore_rows(p, t, depth + 1)

    def absent_bytes(self, t: int) -> int:
        """``W[t]`` = the bytes absent at some time in gap t, in units of ``cap`` (at least a byte): the sum of
        m_q w[q, t] / cap."""
        if t not in self.absent:
            col = self.absent[t] = self.b.var(0.0, math.inf, 0.0, integer=False)
            coef = {self.w[(q, t)]: -self.m[q] / self.unit_bytes for q in self.across[t] if self.m[q] > 0}
            coef[col] = 1.0
            self.row(coef, 0.0, 0.0)
        return self.absent[t]

    def kept(self, p: int, t: int, depth: int) -> int:
        """``k[p, t]``: p, past its last reader, in RAM at moment t.  It takes RAM there (unless t is its
        last reader), and it was in RAM at moment t - 1 too unless restored in gap t - 1."""
        if (p, t) in self.keep:
            return self.keep[(p, t)]
        col = self.keep[(p, t)] = self.var(0.0)
        if self.last[p] < t:
            self.kept_at.setdefault(t, {})[col] = float(self.m[p])
            if t == self.t0:
                return col  # held at the stretch's first moment: how it got there is outside the stretch
            pa, pr = self.event(p, t - 1)
            self.row({col: 1.0, pa: -1.0, pr: -1.0, self.kept(p, t - 1, depth): -1.0}, -math.inf, 0.0)
            self.restore_rows(p, t - 1, depth + 1)
        return col

    def deadline_row(self) -> None:
        rt = self.budget.runtime_s
        timed = [(c, s) for c, s in self.timed if s > 0]
        if rt is None or not timed:
            return
        slack = rt * (1 + 1e-6) - self.g.plain_runtime_s
        scale = max(s for _, s in timed)
        self.row({c: s / scale for c, s in timed}, -math.inf, max(slack, 0.0) / scale)


def last_readers_by(g: CostedGraph, t: int) -> list[int]:
    """Each node's last reader at or before moment ``t`` (-1 if none)."""
    out = []
    for readers in g.succs:  # sorted
        i = bisect.bisect_right(readers, t)
        out.append(readers[i - 1] if i else -1)
    return out
