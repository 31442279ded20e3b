"""The eviction cover: an exact lower bound on the energy (or runtime) of any schedule, and its guide.

It is not a heuristic: a small covering ILP, solved by HiGHS, whose proven dual bound is a valid
lower bound on every schedule in the MILP's stage form (tested never to exceed the MILP's
optimum).  The evictions that attain it are the guide that the greedy rules follow first.  The
portfolio (:mod:`poet.solve.phases.lower_bound`) runs it before the searches: a schedule within the
gap of this bound is returned as proven without the MILP.

In steps: :class:`Moments` finds the tight moments and what is alive across them (and so the ILP's
size, before it is built); :class:`CoverILP` writes the ILP on :class:`~poet.solve.lp.problem.MatrixBuilder`;
:func:`eviction_cover` decides whether it can be solved in its time, solves it, and returns a
:class:`CoverResult`.  Where it cannot, :func:`interval_bound` and :func:`moment_bound` relax it.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..graph.core import CostedGraph
from ..schedule.core import PAGING_SERIAL, Budget
from .lp.highs import solve_highs
from .lp.problem import MatrixBuilder, MilpProblem
from .policy import DEFAULT_POLICY, SolvePolicy
from .stage.plan import GuideKind, ram_cap


def lower_bound_energy(
    g: CostedGraph, budget: Budget | None = None, *, remat: bool = True, paging: bool = True, time_limit: float = 10.0
) -> float:
    """A valid lower bound on the energy of any schedule in the MILP's stage form (see `eviction_cover`)."""
    return eviction_cover(g, budget, remat=remat, paging=paging, time_limit=time_limit).bound


@dataclass(frozen=True)
class CoverResult:
    """What the eviction cover found: a proven bound (``inf``: no eviction set fits every moment within
    the deadline) and the evictions that attain it (the guide; empty when it was not solved)."""

    bound: float  # on the energy, or with objective="time" on the runtime
    guide: Mapping[int, GuideKind]
    # the share of the deadline's slack over plain that the guide's restorations take (energy
    # objective, with a deadline and a solution; None otherwise)
    slack_used: float | None = None
    # the ILP's nonzeros when it was too large to solve in its time (the bound is then a relaxation's)
    skipped_nonzeros: int | None = None

    def facts(self) -> dict:
        """The facts a phase record gives: those that apply."""
        out = {}
        if self.skipped_nonzeros is not None:
            out["skipped_nonzeros"] = self.skipped_nonzeros
        if self.slack_used is not None:
            out["slack_used"] = self.slack_used
        return out


def eviction_cover(
    g: CostedGraph,
    budget: Budget | None = None,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float | None = 10.0,
    objective: str = "energy",
    stop=None,
    policy: SolvePolicy = DEFAULT_POLICY,
) -> CoverResult:
    """A valid lower bound on the energy of any schedule in the MILP's stage form, and the
    evictions that attain it (tensor -> ``GuideKind.PAGE`` or ``REMAT``), a guide for the greedy.

    Every node is computed at least once (the plain energy).  Take the moment node
    t is first computed: its inputs and output are in RAM, and every older tensor
    that a node after t reads is in RAM too or absent, to be restored in a later
    stage -- paged in (after one page-out) or recomputed.  The least restoration
    cost over eviction sets that make every such moment fit is a bound.

    Recomputation cascades are priced.  Restoring tensor i by recomputation needs
    its inputs.  An input p whose last reader is i (a BatchNorm output feeding a
    ReLU) is past its use by then: it comes back too (paged in or recomputed, and
    then its own such inputs, recursively; where the chains are very many, up to
    ``policy.cover_chain_depth`` links deep), or it stayed in RAM since before i was
    first computed -- and then it, or a later link of the chain, sits in RAM at
    every moment i is absent, cancelling (up to) i's bytes there.  Each restoring
    event is charged once: the chain's events for i happen after i's first
    computation and before i's last restoration, so chains of different tensors
    never share one.  A runtime budget caps the extra compute (and, with serial
    paging time, the paging) time.

    It is a small covering ILP (binaries per tensor and per chain link, one row per
    moment); its proven dual bound is used, so a time limit keeps it valid.  It stops once
    within ``policy.cover_abs_gap`` of the plain energy (or runtime) of optimal.  When HiGHS could not
    even set it up within half of ``time_limit`` (at ``policy.milp_setup_s_per_nonzero``) it is not
    solved: the bound is then a relaxation's (:func:`interval_bound`, :func:`moment_bound`), and the
    result says how large the ILP was (``skipped_nonzeros``).

    ``objective="time"`` bounds the runtime instead (the deadline is then not a
    constraint): above the budget's deadline, no schedule meets it.  ``stop``: polled during the
    solve; once true, the dual bound reached by then is used (still valid); true before the solve of a
    cover HiGHS needs over a second to set up, the relaxation's bound is.  (HiGHS hears it only after
    its presolve: 36 s on a 1,000-node layered DAG's cover on a loaded machine.)
    """
    plain = g.plain_runtime_s if objective == "time" else g.plain_energy_j
    if budget is None or not (remat or paging):
        return CoverResult(g.plain_energy_j, {})
    moments = Moments(g, budget)
    if not moments.tight:
        return CoverResult(plain, {})
    setup_rate = policy.milp_setup_s_per_nonzero

    def relaxed(nonzeros: int) -> CoverResult:
        """The cover too large to solve in its time: a relaxation's bound, and the ILP's size."""
        return CoverResult(plain + moments.relaxed_bound(remat, paging, objective, time_limit), {}, None, nonzeros)

    # The ILP's size, known before it is built (linear in the graph): a cover HiGHS could not even set
    # up in half of its time is not built (on a 20,000-node chain: 34 million nonzeros, 74 s to build
    # in Python)
    nonzeros = moments.estimated_nonzeros(policy)
    if (time_limit is not None and setup_rate * nonzeros > 0.5 * time_limit) or (
        setup_rate * nonzeros > 1.0 and stop is not None and stop()
    ):
        return relaxed(nonzeros)
    built_at = time.perf_counter()
    ilp = CoverILP(g, budget, moments, remat=remat, paging=paging, objective=objective, policy=policy)
    p = ilp.builder.problem()
    # On a loaded machine HiGHS's setup is slower by about as much as building the ILP here was
    built = time.perf_counter() - built_at
    slowdown = max(1.0, built / (policy.cover_build_s_per_nonzero * p.num_nonzeros)) if built > 0.2 else 1.0
    setup = setup_rate * p.num_nonzeros * slowdown
    # asked to stop: a small cover still runs (it may prove the budgets infeasible at once), a large one not
    if (time_limit is not None and setup > 0.5 * max(0.0, time_limit - built)) or (
        setup > 1.0 and stop is not None and stop()
    ):
        return relaxed(p.num_nonzeros)
    if time_limit is not None:
        time_limit = max(0.1, time_limit - built)
    r = solve_highs(p, time_limit=time_limit, gap=1e-6, options={"mip_abs_gap": policy.cover_abs_gap}, stop=stop)
    if r.status == "infeasible":
        return CoverResult(math.inf, {})  # no eviction set fits every moment (within the runtime budget)
    extra = r.bound if r.bound is not None and math.isfinite(r.bound) else 0.0
    extra -= 1e-6 * (1.0 + abs(extra))  # the solver's dual bound is exact only to its tolerances
    bound = plain + max(0.0, extra) * ilp.unit
    if r.x is None:
        return CoverResult(bound, {})
    return CoverResult(bound, ilp.guide(r.x), ilp.slack_used(r.x))


class Moments:
    """The cover's rows before it is built: the tight moments (node t's inputs, output and the tensors
    alive across it exceed the budget by ``needs[k]``), the run of tight moments each tensor is alive
    across (``span``), and the chains of inputs past their last use that its recomputation brings back."""

    def __init__(self, g: CostedGraph, budget: Budget):
        self.g, self.budget = g, budget
        n, m, last_read = len(g.nodes), g.ram, g.last_reader
        # inputs past their last use when their last reader is recomputed
        self.dead_inputs = [[p for p in sorted(set(g.preds[i])) if last_read[p] == i and m[p] > 0] for i in range(n)]
        self.tight, self.needs = self.tight_moments(ram_cap(budget.ram_bytes) - g.fixed_ram_bytes)
        # tensor i is alive across the tight moments tight[a_i:b_i]; it is credited (may be absent)
        # at those where it is not an input
        is_tight = set(self.tight)
        self.span: dict[int, tuple[int, int]] = {}
        for i in range(n) if self.tight else ():
            if m[i] <= 0 or last_read[i] <= i + 1:
                continue
            a, b = bisect_right(self.tight, i), bisect_left(self.tight, last_read[i])
            read_inside = sum(1 for s_ in set(g.succs[i]) if s_ in is_tight and s_ < last_read[i])
            if b - a > read_inside:
                self.span[i] = (a, b)

    def tight_moments(self, cap: int) -> tuple[list[int], list[float]]:
        """The nodes whose moment exceeds ``cap``, and by how much.  The alive set is kept incrementally
        (a tensor enters after its stage and leaves at its last reader): linear in the graph."""
        g, m, last_read = self.g, self.g.ram, self.g.last_reader
        ends: dict[int, list[int]] = {}
        alive: set[int] = set()
        alive_bytes = 0
        tight: list[int] = []
        needs: list[float] = []
        for t in range(len(g.nodes)):
            if t > 0 and m[t - 1] > 0 and last_read[t - 1] > t:
                alive.add(t - 1)
                alive_bytes += m[t - 1]
                ends.setdefault(last_read[t - 1], []).append(t - 1)
            for i in ends.pop(t, ()):
                alive.discard(i)
                alive_bytes -= m[i]
            inputs = set(g.preds[t])
            need = m[t] + sum(m[i] for i in inputs) + alive_bytes - sum(m[i] for i in inputs & alive) - cap
            if need > 0:
                tight.append(t)
                needs.append(need)
        return tight, needs

    def live_at(self) -> list[list[int]]:
        """Per tight moment, the credited tensors alive across it (each tensor over its span)."""
        live: list[list[int]] = [[] for _ in self.tight]
        for i, (a, b) in self.span.items():
            for k in range(a, b):
                live[k].append(i)
        return live

    def chain_depth(self, policy: SolvePolicy) -> float:
        """How deep the chains are followed: all the way, unless that is over ``policy.cover_max_links``
        links in all (each tensor has one last reader: the chains form a forest)."""
        below = [0] * len(self.g.nodes)  # links a chain from v has below v
        for v in range(len(below)):
            below[v] = sum(1 + below[q] for q in self.dead_inputs[v])
        return policy.cover_chain_depth if sum(below[i] for i in self.span) > policy.cover_max_links else math.inf

    def estimated_nonzeros(self, policy: SolvePolicy) -> int:
        """The ILP's nonzeros: one entry per tight moment a credited tensor spans, and per chain link of
        it, plus each link's few rows (within 1% of the built ILP)."""
        links = links_within(self.dead_inputs, self.chain_depth(policy))
        return sum((b - a) * (1 + links[i]) + 3 + 6 * links[i] for i, (a, b) in self.span.items())

    def relaxed_bound(self, remat: bool, paging: bool, objective: str, time_limit: float | None) -> float:
        """Where the cover is too large to solve: the flow bound, or the moment bound if that does not solve."""
        kw = dict(remat=remat, paging=paging, objective=objective, budget=self.budget)
        moment = moment_bound(self.g, self.tight, self.needs, self.span, **kw)
        if not self.span:
            return moment
        flow_limit = None if time_limit is None else 0.5 * time_limit
        flow = interval_bound(self.g, self.tight, self.needs, self.span, time_limit=flow_limit, **kw)
        return moment if flow is None else max(moment, flow)


class CoverILP:
    """The covering ILP on :class:`~poet.solve.lp.problem.MatrixBuilder`.  Per tensor i: ``x`` absent at
    some moment, ``a`` paged back in, ``r`` recomputed back, ``o`` paged out (columns ``X[i]``, ``A[i]``,
    ``R[i]``, ``O[i]``); per chain link: paged in, recomputed, or kept.  Rows: x_i <= a_i + r_i, a
    page-in needs a page-out, each link back for its consumer, one row per tight moment, the deadline."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        moments: Moments,
        *,
        remat: bool,
        paging: bool,
        objective: str,
        policy: SolvePolicy,
    ):
        self.g, self.moments = g, moments
        self.remat, self.paging, self.objective = remat, paging, objective
        self.unit = (g.plain_runtime_s if objective == "time" else g.plain_energy_j) or 1.0
        # with paging time hidden or overlapped only recomputation surely adds time
        self.counted = (GuideKind.REMAT, GuideKind.PAGE) if budget.paging_time == PAGING_SERIAL else (GuideKind.REMAT,)
        deadline_row = objective == "energy" and budget.runtime_s is not None
        slack = budget.runtime_s * (1 + 1e-6) - g.plain_runtime_s if deadline_row else 0.0
        self.timed_off = deadline_row and not slack > 0  # no slack at all: no timed restoration fits
        self.timed: list[tuple[int, float]] = []  # (column, seconds) of the restorations that take time
        self.builder = MatrixBuilder()
        nd, n = g.nodes, len(g.nodes)
        self.X = [self.column(0.0, None, 0.0) for _ in range(n)]
        self.A = [self.column(nd[i].pagein_energy_j, GuideKind.PAGE, nd[i].pagein_time_s) for i in range(n)]
        self.R = [self.column(nd[i].compute_energy_j, GuideKind.REMAT, nd[i].compute_time_s) for i in range(n)]
        self.O = [self.column(nd[i].pageout_energy_j, GuideKind.PAGE, nd[i].pageout_time_s) for i in range(n)]
        self.chain: dict[int, list[tuple[int, float]]] = {}  # root i -> [(kept column, RAM it cancels)]
        self.depth = moments.chain_depth(policy)
        self.tensor_rows()
        self.moment_rows()
        self.slack = None  # the deadline's slack over plain, where the deadline is a row
        if deadline_row and self.timed and slack > 0:
            self.slack = slack
            scale = max(v for _, v in self.timed)
            self.row({k: v / scale for k, v in self.timed}, -math.inf, slack / scale)

    def column(self, energy: float, kind: GuideKind | None, seconds: float) -> int:
        """A binary column; closed (upper bound 0) where its technique is not allowed or it takes time
        the deadline does not have.  Its cost is its energy, or under objective="time" its counted time."""
        timed = seconds > 0 and kind in self.counted
        allowed = not (kind == GuideKind.PAGE and not self.paging) and not (kind == GuideKind.REMAT and not self.remat)
        cost = (seconds if timed else 0.0) if self.objective == "time" else energy
        col = self.builder.var(0.0, 1.0 if allowed and not (timed and self.timed_off) else 0.0, cost / self.unit)
        if timed:
            self.timed.append((col, seconds))
        return col

    def row(self, coef: dict[int, float], lo: float, hi: float) -> None:
        self.builder.row(list(coef), list(coef.values()), lo, hi)

    def tensor_rows(self) -> None:
        """Per credited tensor: absent means restored, a page-in needs a page-out, and its chain links."""
        m, dead = self.g.ram, self.moments.dead_inputs
        for i in sorted(self.moments.span):
            self.row({self.X[i]: 1.0, self.A[i]: -1.0, self.R[i]: -1.0}, -math.inf, 0.0)  # x_i <= a_i + r_i
            self.row({self.A[i]: 1.0, self.O[i]: -1.0}, -math.inf, 0.0)  # a page-in needs a page-out
            self.chain[i] = []
            self.links(i, [(self.R[i], p, m[i] / len(dead[i]), 1) for p in dead[i]])

    def links(self, root: int, todo: list[tuple[int, int, float, int]]) -> None:
        """The chain below ``root``, depth first (``todo``: the consumer's recomputation column, the input,
        the RAM it may cancel, its depth): each input must be in RAM when its last reader is recomputed
        -- paged in, recomputed (and then its own such inputs too), or kept."""
        nd, m, dead = self.g.nodes, self.g.ram, self.moments.dead_inputs
        todo = todo[::-1]
        while todo:
            consumer, v, budget_bytes, depth = todo.pop()
            pi = self.column(nd[v].pagein_energy_j, GuideKind.PAGE, nd[v].pagein_time_s)
            rho = self.column(nd[v].compute_energy_j, GuideKind.REMAT, nd[v].compute_time_s)
            keep = self.column(0.0, GuideKind.KEEP, 0.0)
            self.row({consumer: 1.0, pi: -1.0, rho: -1.0, keep: -1.0}, -math.inf, 0.0)
            self.row({pi: 1.0, self.O[v]: -1.0}, -math.inf, 0.0)
            share = min(m[v], budget_bytes)
            self.chain[root].append((keep, share))
            kids = dead[v] if depth < self.depth else []
            todo += [(rho, q, share / len(kids), depth + 1) for q in kids][::-1]

    def moment_rows(self) -> None:
        """One row per tight moment: the bytes its alive tensors free (absent, less what their kept chains
        hold) cover its need."""
        g, m, mo = self.g, self.g.ram, self.moments
        live_at = mo.live_at()
        for k, (t, need) in enumerate(zip(mo.tight, mo.needs)):
            inputs = set(g.preds[t])
            live = [i for i in live_at[k] if i not in inputs]
            row = {self.X[i]: m[i] / need for i in live}
            for i in live:
                for keep, share in self.chain[i]:
                    row[keep] = -share / need
            self.row(row, 1.0, math.inf)

    def guide(self, x) -> dict[int, GuideKind]:
        """The evictions of a solution: each absent tensor, paged or recomputed."""
        X, A = self.X, self.A
        return {
            i: GuideKind.PAGE if x[A[i]] > 0.5 else GuideKind.REMAT for i in set(self.moments.span) if x[X[i]] > 0.5
        }

    def slack_used(self, x) -> float | None:
        """The share of the deadline's slack the solution's restorations take (None without the row)."""
        if self.slack is None:
            return None
        return math.fsum(v * x[k] for k, v in self.timed) / self.slack


def links_within(dead_inputs: list[list[int]], max_depth: float) -> list[int]:
    """Per tensor, the chain links the cover follows below it (``link``), at most ``max_depth`` deep."""
    n = len(dead_inputs)
    if max_depth == math.inf:
        below = [0] * n
        for v in range(n):
            below[v] = sum(1 + below[q] for q in dead_inputs[v])
        return below
    depth = int(max_depth)
    # within[d][v]: links below v when v itself sits d links deep (none from depth max_depth on)
    within = [[0] * n for _ in range(depth + 1)]
    for d in range(depth - 1, 0, -1):
        row, deeper = within[d], within[d + 1]
        for v in range(n):
            if dead_inputs[v]:
                row[v] = sum(1 + deeper[q] for q in dead_inputs[v])
    top = within[1]  # a root's inputs are links at depth 1
    return [sum(1 + top[q] for q in dead_inputs[v]) for v in range(n)]


def moment_bound(
    g: CostedGraph,
    tight: list[int],
    needs: list[float],
    span: dict[int, tuple[int, int]],
    *,
    remat: bool,
    paging: bool,
    objective: str,
    budget: Budget,
) -> float:
    """A lower bound on the extra energy (runtime) of any schedule, from one tight moment at a time,
    in O((n + edges) log n): the cover's ILP with every row but one dropped and its columns relaxed.

    At tight moment k some alive tensors (not inputs of the node computed) are absent, freeing at
    least ``need_k`` bytes; an absent tensor i costs at least ``c_i``, the cheaper of its page-out plus
    page-in and its recomputation.  So every schedule pays at least ``need_k * min c_i / bytes_i``
    over the tensors alive there, and the largest of these over the moments is a bound.  It is what
    the portfolio uses where the full cover is too large to solve in time.
    """
    nd, m = g.nodes, g.ram
    serial = budget.paging_time == PAGING_SERIAL
    ratio: dict[int, float] = {}
    for i in span:
        costs = []
        if paging:
            costs.append(
                (nd[i].pagein_time_s + nd[i].pageout_time_s if serial else 0.0)
                if objective == "time"
                else nd[i].pagein_energy_j + nd[i].pageout_energy_j
            )
        if remat:
            costs.append(nd[i].compute_time_s if objective == "time" else nd[i].compute_energy_j)
        if costs:
            ratio[i] = min(costs) / m[i]
    starting: dict[int, list[int]] = {}
    for i, (a, _b) in span.items():
        if i in ratio:
            starting.setdefault(a, []).append(i)
    heap: list[tuple[float, int]] = []
    best = 0.0
    for k, (t, need) in enumerate(zip(tight, needs)):
        for i in starting.get(k, ()):
            heapq.heappush(heap, (ratio[i], i))
        while heap and span[heap[0][1]][1] <= k:  # past its span
            heapq.heappop(heap)
        inputs = set(g.preds[t])
        held = []
        while heap and (heap[0][1] in inputs or span[heap[0][1]][1] <= k):
            top = heapq.heappop(heap)
            if span[top[1]][1] > k:
                held.append(top)  # an input of t here, alive at later moments
        if heap:
            best = max(best, need * heap[0][0])
        for top in held:
            heapq.heappush(heap, top)
    return best


def interval_bound(
    g: CostedGraph,
    tight: list[int],
    needs: list[float],
    span: dict[int, tuple[int, int]],
    *,
    remat: bool,
    paging: bool,
    objective: str,
    budget: Budget,
    time_limit: float | None = None,
) -> float | None:
    """The cover's LP relaxation without its chain links and deadline row, as a min-cost flow: a lower
    bound on the extra energy (runtime) at least as strong as :func:`moment_bound`, with O(n) nonzeros
    (None when HiGHS does not solve it in ``time_limit``).

    With y_i = bytes_i * x_i in [0, bytes_i] at cost c_i / bytes_i (c_i as in :func:`moment_bound`), the
    rows say: at every tight moment k, the y of the tensors alive across it (a contiguous run of moments
    per tensor, here taken whole: counting a tensor also where it is read only loosens a row) less a
    surplus s_k >= 0 equal need_k.  Subtracting each row from the next turns every column into one +1
    and one -1 (y_i at its first moment and after its last, s_k at k and k + 1): a network matrix, so
    the LP is a min-cost flow over the moments with one arc per tensor, solved here by HiGHS's simplex.
    """
    nd, m = g.nodes, g.ram
    serial = budget.paging_time == PAGING_SERIAL
    K = len(tight)
    cols_c, cols_hi, entries = [], [], []  # entries: (row, col, value)
    for i, (a, b) in span.items():
        costs = []
        if paging:
            costs.append(
                (nd[i].pagein_time_s + nd[i].pageout_time_s if serial else 0.0)
                if objective == "time"
                else nd[i].pagein_energy_j + nd[i].pageout_energy_j
            )
        if remat:
            costs.append(nd[i].compute_time_s if objective == "time" else nd[i].compute_energy_j)
        j = len(cols_c)
        cols_c.append(min(costs) / m[i])
        cols_hi.append(float(m[i]))
        entries += [(a, j, 1.0), (b, j, -1.0)]
    for k in range(K):  # the surplus at moment k
        j = len(cols_c)
        cols_c.append(0.0)
        cols_hi.append(math.inf)
        entries += [(k, j, -1.0), (k + 1, j, 1.0)]
    rhs = [needs[0]] + [needs[k] - needs[k - 1] for k in range(1, K)] + [-needs[K - 1]]
    entries.sort()
    starts = np.searchsorted(np.array([r for r, _, _ in entries], dtype=np.int64), np.arange(K + 2))
    scale = max(cols_c) or 1.0
    p = MilpProblem(
        c=np.array(cols_c) / scale,
        col_lo=np.zeros(len(cols_c)),
        col_hi=np.array(cols_hi),
        integer=np.zeros(len(cols_c), bool),
        starts=starts,
        index=np.array([c for _, c, _ in entries], dtype=np.int64),
        value=np.array([v for _, _, v in entries]),
        row_lo=np.array(rhs, dtype=float),
        row_hi=np.array(rhs, dtype=float),
    )
    r = solve_highs(p, time_limit=time_limit, gap=1e-9)
    if r.detail != "Optimal" or r.objective is None:
        return None
    value = r.objective * scale
    return max(0.0, value - 1e-7 * abs(value))  # the simplex's optimum is exact only to its tolerances
