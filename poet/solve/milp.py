"""The POET MILP (Patil et al., ICML 2022), with paging time, scaling and pruning.

Stages t = 0..T-1; stage t computes node t for the first time (Checkmate's
frontier-advancing order), so every decision matrix is lower-triangular.
Binary decisions per (stage t, node i):

* ``R``    compute (or recompute) i during stage t;
* ``S``    i is in RAM at the start of stage t;
* ``D``    i is on storage at the start of stage t;
* ``I``    page i in during stage t, right before the computation of k
           (disaggregated by k so RAM is charged only from that point on);
* ``O``    page i out during stage t (i in RAM at stage start, or just computed);
* ``F``    free i right after computing k in stage t (Checkmate's free-edge variable);
* ``U``    RAM in use right after computing k in stage t (continuous).

Within a stage the emitted order is: page-outs of resident tensors, frees of
tensors the stage does not need, then for each position k (ascending):
page-ins scheduled before k, compute k, page-out k, frees after k.  ``U``
charges every tensor from the step it enters RAM to the step it is freed, so
it equals the RAM of the emitted schedule at each compute (tensors the stage
neither reads nor keeps are charged until the stage ends, but the solver
never keeps such tensors since dropping them earlier is free); the validator
replays the emitted schedule and reports the true peak.

Numerics: memory rows are in units of the RAM budget, runtime rows in units
of the deadline, the objective in units of one plain forward+backward's
energy, so all coefficients are O(1) whatever the device.

Variables that can never be useful are not created: node i at stage t needs
a descendant with index >= t (stage t only computes what serves node t or a
later stage), and a node nobody reads is never kept, paged or recomputed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..graph.core import CostedGraph
from ..schedule.core import (FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL, PAGING_HIDDEN, PAGING_OVERLAP,
                             Budget, Schedule, Step)
from ..units import fmt_bytes, fmt_seconds
from .api import SolveError, register
from .backends import MilpProblem, get_backend
from .heuristics import Plan, eviction_cover, plan_costs, ram_cap



class _Builder:
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
            c=np.array(self.c), col_lo=np.array(self.lo), col_hi=np.array(self.hi),
            integer=np.array(self.integer, dtype=bool), starts=np.array(self.starts),
            index=np.array(self.index), value=np.array(self.value),
            row_lo=np.array(self.rlo), row_hi=np.array(self.rhi))


@dataclass
class Formulation:
    problem: MilpProblem
    R: np.ndarray    # T x T column index, -1 where the variable does not exist
    S: np.ndarray    # (T+1) x T
    D: np.ndarray
    I: dict          # (t, i) -> [(k, column)]: page i in before computing k in stage t
    O: np.ndarray
    U: list          # per stage: list of U columns
    energy_unit: float
    runtime_cols: list  # (col, seconds-coefficient) pairs of the runtime expression, for re-use
    F: dict = field(default_factory=dict)      # (t, k, i) -> column: free i right after computing k
    defs: list = field(default_factory=list)   # (col, [expr, ...], const): continuous col = max(exprs) + const

    @property
    def T(self) -> int:
        return self.R.shape[0]



def build(g: CostedGraph, budget: Budget, *, remat: bool = True, paging: bool = True,
          objective: str = "energy", ram_cap_bytes: int | None = None, tighten: bool = False) -> Formulation:
    """The MILP in matrix form.

    objective: ``energy`` (POET), ``peak_ram`` (smallest RAM meeting the deadline)
    or ``runtime`` (shortest schedule meeting the RAM budget).
    """
    n = len(g.nodes)
    nodes = g.nodes
    T = n
    md = g.last_useful_stage
    B = float(ram_cap_bytes if ram_cap_bytes is not None else budget.ram_bytes)
    cap_bytes = ram_cap(int(B)) if objective != "peak_ram" else B
    mem = [nd.ram_bytes / B for nd in nodes]
    E0 = g.plain_energy_j or 1.0
    use_energy = objective == "energy"

    b = _Builder()
    neg = lambda *shape: np.full(shape, -1, dtype=np.int64)  # noqa: E731
    R, S, D, O = neg(T, T), neg(T + 1, T), neg(T + 1, T), neg(T, T)
    I: dict[tuple[int, int], list[tuple[int, int]]] = {}   # (t, i) -> [(k, column)]

    def ecost(x):
        return x / E0 if use_energy else 0.0

    # tighten: provably safe reductions (an optimal schedule survives each of them)
    #  * a 0-byte tensor is never paged: keeping it resident costs no RAM, paging costs >= 0;
    #  * a tensor already on storage is never paged out again (O + D <= 1).
    pageable = [paging and not (tighten and nodes[i].ram_bytes == 0) for i in range(n)]
    for t in range(T):
        for i in range(t + 1):
            useful = md[i] >= t
            if i == t:
                R[t, i] = b.var(1.0, 1.0, ecost(nodes[i].compute_energy_j))
            elif remat and useful:
                R[t, i] = b.var(cost=ecost(nodes[i].compute_energy_j))
            if i < t and useful:
                S[t, i] = b.var()
                if pageable[i]:
                    D[t, i] = b.var()
            if pageable[i] and md[i] > t:  # paging out only helps if needed at a later stage
                O[t, i] = b.var(cost=ecost(nodes[i].pageout_energy_j))
        if paging:
            for i in range(t):
                if D[t, i] >= 0:
                    I[t, i] = [(k, b.var(cost=ecost(nodes[i].pagein_energy_j)))
                               for k in g.succs[i] if k <= t and R[t, k] >= 0]

    def terms(*pairs):
        cols, vals = [], []
        for col, v in pairs:
            if col >= 0:
                cols.append(int(col))
                vals.append(v)
        return cols, vals

    def paged_in(t, i, upto=None):
        return [(col, -1.0) for k, col in I.get((t, i), ()) if upto is None or k <= upto]

    inf = math.inf
    for t in range(T):
        # inputs available: R[t,k] <= R[t,i] + S[t,i] + sum_{k' <= k} I[t,i,k']
        for k in range(t + 1):
            if R[t, k] < 0:
                continue
            for i in g.preds[k]:
                cols, vals = terms((R[t, k], 1.0), (R[t, i], -1.0), (S[t, i], -1.0), *paged_in(t, i, k))
                b.row(cols, vals, -inf, 0.0)
        for i in range(t + 1):
            if t + 1 < T and S[t + 1, i] >= 0:
                cols, vals = terms((S[t + 1, i], 1.0), (S[t, i], -1.0), (R[t, i], -1.0), *paged_in(t, i))
                b.row(cols, vals, -inf, 0.0)
            if t + 1 < T and D[t + 1, i] >= 0:
                cols, vals = terms((D[t + 1, i], 1.0), (D[t, i], -1.0), (O[t, i], -1.0))
                b.row(cols, vals, -inf, 0.0)
            if I.get((t, i)):
                cols, vals = terms((D[t, i], -1.0), *[(c, 1.0) for _, c in I[t, i]])
                b.row(cols, vals, -inf, 0.0)
            if O[t, i] >= 0:
                b.row(*terms((O[t, i], 1.0), (S[t, i], -1.0), (R[t, i], -1.0)), -inf, 0.0)
                if tighten and D[t, i] >= 0:
                    b.row([int(O[t, i]), int(D[t, i])], [1.0, 1.0], -inf, 1.0)
            excl = terms((R[t, i], 1.0), (S[t, i], 1.0), *[(c, 1.0) for _, c in I.get((t, i), ())])
            if len(excl[0]) > 1:
                b.row(*excl, -inf, 1.0)

    # memory: U after each computation of a stage, Checkmate-style recurrence with frees
    U_cols = []
    F: dict = {}
    defs: list = []
    peak_col = b.var(0.0, inf, 1.0, integer=False) if objective == "peak_ram" else -1
    u_hi = cap_bytes / B if objective != "peak_ram" else inf
    for t in range(T):
        ks = [k for k in range(t + 1) if R[t, k] >= 0]
        arrivals: dict[int, list[tuple[int, float]]] = {}   # k -> page-in columns landing before k
        for i in range(t):
            for k, col in I.get((t, i), ()):
                if mem[i] > 0:
                    arrivals.setdefault(k, []).append((col, -mem[i]))
        stage_u = []
        prev_u, prev_k = -1, -1
        for k in ks:
            u = b.var(0.0, u_hi, 0.0, integer=False)
            stage_u.append(u)
            cols, vals = [u, int(R[t, k])], [1.0, -mem[k]]
            for col, v in arrivals.get(k, ()):
                cols.append(col)
                vals.append(v)
            if prev_u < 0:
                for i in range(t):
                    if S[t, i] >= 0 and mem[i] > 0:
                        cols.append(int(S[t, i]))
                        vals.append(-mem[i])
                f = g.fixed_ram_bytes / B
                b.row(cols, vals, f, f)
                defs.append((u, [list(zip(cols[1:], [-v for v in vals[1:]]))], f))
            else:
                cols.append(prev_u)
                vals.append(-1.0)
                for i in (*g.preds[prev_k], prev_k):
                    if mem[i] <= 0:
                        continue
                    fcol = b.var()  # free i after computing prev_k
                    b.row([fcol, int(R[t, prev_k])], [1.0, -1.0], -inf, 0.0)
                    if t + 1 < T and S[t + 1, i] >= 0:
                        b.row([fcol, int(S[t + 1, i])], [1.0, 1.0], -inf, 1.0)
                    for j in g.succs[i]:
                        if prev_k < j <= t and R[t, j] >= 0:
                            b.row([fcol, int(R[t, j])], [1.0, 1.0], -inf, 1.0)
                    cols.append(fcol)
                    vals.append(mem[i])
                    F[t, prev_k, i] = fcol
                b.row(cols, vals, 0.0, 0.0)
                defs.append((u, [list(zip(cols[1:], [-v for v in vals[1:]]))], 0.0))
            if peak_col >= 0:
                b.row([u, peak_col], [1.0, -1.0], -inf, 0.0)
            prev_u, prev_k = u, k
        U_cols.append(stage_u)

    # runtime
    rt_terms = []   # (col, seconds)
    stage_terms = []
    for t in range(T):
        comp = [(int(R[t, k]), nodes[k].compute_time_s) for k in range(t + 1) if R[t, k] >= 0]
        page = [(col, nodes[i].pagein_time_s) for i in range(t) for _, col in I.get((t, i), ())]
        page += [(int(O[t, i]), nodes[i].pageout_time_s) for i in range(t + 1) if O[t, i] >= 0]
        stage_terms.append((comp, page))
    if objective == "runtime" or budget.runtime_s is not None:
        Rt = budget.runtime_s if (objective != "runtime" and budget.runtime_s) else (g.plain_runtime_s or 1.0)
        if budget.paging_time == PAGING_OVERLAP:
            zs = []
            for comp, page in stage_terms:
                z = b.var(0.0, inf, 0.0, integer=False)
                zs.append(z)
                for part in (comp, page):
                    if part:
                        b.row([z] + [c for c, _ in part], [1.0] + [-s / Rt for _, s in part], 0.0, inf)
                defs.append((z, [[(c, s / Rt) for c, s in part] for part in (comp, page) if part], 0.0))
            rt_terms = [(z, Rt) for z in zs]
        else:
            for comp, page in stage_terms:
                rt_terms += comp
                if budget.paging_time != PAGING_HIDDEN:
                    rt_terms += page
        if objective == "runtime":
            for col, s in rt_terms:
                b.c[col] += s / Rt
        else:
            b.row([c for c, _ in rt_terms], [s / Rt for _, s in rt_terms], -inf, 1.0)

    return Formulation(problem=b.problem(), R=R, S=S, D=D, I=I, O=O, U=U_cols, energy_unit=E0,
                       runtime_cols=rt_terms, F=F, defs=defs)


def _last_readers(g: CostedGraph, comp: list[int]) -> dict[int, int]:
    """Per tensor, the last node of ``comp`` (ascending) that reads it: it is freed right after."""
    last: dict[int, int] = {}
    for k in comp:
        for i in g.preds[k]:
            last[i] = k
    return last


def emit(g: CostedGraph, plan: Plan) -> list[Step]:
    """Instruction list from stage decisions (see the module docstring for the order)."""
    n = len(g.nodes)
    resident: set[int] = set()
    steps: list[Step] = []
    for t in range(n):
        comp = plan.comp[t]
        keep_next = plan.keep[t + 1] if t + 1 < n else set()
        outs = plan.outs[t]
        last_reader = _last_readers(g, comp)
        at_start = set(resident)
        for i in sorted(at_start):
            if i in outs:
                steps.append(Step("page_out", i, t))
        for i in sorted(at_start):
            if i not in last_reader and i not in keep_next:
                steps.append(Step("free", i, t))
                resident.discard(i)
        stage_ins = plan.ins[t]
        positions = sorted(set(comp) | set(stage_ins))
        comp_set = set(comp)
        for k in positions:
            for i in stage_ins.get(k, ()):
                steps.append(Step("page_in", i, t))
                resident.add(i)
            if k not in comp_set:
                continue
            steps.append(Step("compute", k, t))
            resident.add(k)
            if k in outs and k not in at_start:
                steps.append(Step("page_out", k, t))
            for i in (*g.preds[k], k):
                if i in resident and i not in keep_next and last_reader.get(i, -1) <= k:
                    steps.append(Step("free", i, t))
                    resident.discard(i)
        unplaced = outs - at_start - comp_set
        if unplaced:
            raise SolveError(f"stage plan pages out {sorted(unplaced)} in stage {t}, but they are neither "
                             f"in RAM at its start nor computed in it")
        for i in sorted(resident - keep_next):
            steps.append(Step("free", i, t))
        resident &= keep_next
        if keep_next - resident:
            raise SolveError(f"stage plan keeps {sorted(keep_next - resident)} in RAM at stage {t + 1} "
                             f"without computing or paging them in")
    return steps


def decode(f: Formulation, x: np.ndarray) -> Plan:
    T = f.T
    plan = Plan.empty(T)
    on = lambda col: col >= 0 and x[col] > 0.5  # noqa: E731
    for t in range(T):
        plan.comp[t] = [k for k in range(t + 1) if on(f.R[t, k])]
        plan.keep[t] = {i for i in range(T) if on(f.S[t, i])}
        plan.outs[t] = {i for i in range(t + 1) if on(f.O[t, i])}
    for (t, i), lst in f.I.items():
        for k, col in lst:
            if x[col] > 0.5:
                plan.ins[t].setdefault(k, []).append(i)
    return plan


def plan_to_start(f: Formulation, g: CostedGraph, plan: Plan) -> tuple[np.ndarray | None, str]:
    """Every column of ``f`` (free-edge and RAM columns included) from a plan: a complete warm start.

    Returns (x, "") or (None, why) when the plan does not map onto this formulation.
    """
    p = f.problem
    x = np.zeros(p.num_cols)
    T = f.T
    stored: set[int] = set()

    def put(col, what):
        if col < 0:
            raise KeyError(what)
        x[col] = 1.0

    try:
        for t in range(T):
            for i in plan.keep[t]:
                put(f.S[t, i], f"S[{t},{i}]")
            for i in stored:
                if f.D[t, i] >= 0:
                    x[f.D[t, i]] = 1.0
            for k in plan.comp[t]:
                put(f.R[t, k], f"R[{t},{k}]")
            for k, lst in plan.ins[t].items():
                for i in lst:
                    col = dict(f.I.get((t, i), ())).get(k, -1)
                    put(col, f"I[{t},{i},{k}]")
            for i in plan.outs[t]:
                put(f.O[t, i], f"O[{t},{i}]")
                stored.add(i)
            # free-edge columns: i freed right after computing k (same rule as emit)
            keep_next = plan.keep[t + 1] if t + 1 < T else set()
            comp = plan.comp[t]
            later_reader = _last_readers(g, comp)
            for k in comp:
                for i in (*g.preds[k], k):
                    col = f.F.get((t, k, i), -1)
                    if col >= 0 and i not in keep_next and later_reader.get(i, -1) <= k:
                        x[col] = 1.0
    except KeyError as e:
        return None, f"plan uses a variable the formulation pruned: {e.args[0]}"
    # continuous columns (U, overlap z) from their defining rows
    for col, exprs, const in f.defs:
        x[col] = max(0.0, max(sum(v * x[c] for c, v in e) for e in exprs) + const)
    viol = max_violation(p, x)
    if viol > 1e-7:
        return None, f"plan violates the formulation by {viol:.2e}"
    return x, ""


def max_violation(p: MilpProblem, x: np.ndarray) -> float:
    # A @ x for the row-wise (CSR) matrix, in numpy: scipy is not a dependency
    starts = np.asarray(p.starts)
    rows = np.repeat(np.arange(p.num_rows), np.diff(starts))
    ax = np.bincount(rows, weights=np.asarray(p.value)[: starts[-1]] * x[np.asarray(p.index)[: starts[-1]]],
                     minlength=p.num_rows)
    v = max(float(np.max(p.row_lo - ax, initial=0.0)), float(np.max(ax - p.row_hi, initial=0.0)))
    v = max(v, float(np.max(p.col_lo - x, initial=0.0)), float(np.max(x - p.col_hi, initial=0.0)))
    return v


def _status_message(res, strategy):
    if res.status == OPTIMAL:
        return f"optimal (proven relative gap {res.gap:.2e})"
    if res.status == FEASIBLE:
        return f"feasible; optimality not proven (relative gap {res.gap:.2%}): {res.detail}"
    if res.status == INFEASIBLE:
        return f"no {strategy} schedule meets both budgets (proven infeasible)"
    return f"no schedule found before the solver stopped ({res.detail})"


METHODS = {
    "faithful": "the POET MILP as formulated, solved cold (the reference)",
    "warm": "the POET MILP warm-started from the best greedy schedule",
    "fast": "greedy schedule; proven optimal by the structural lower bound when it meets it, "
            "else the tightened MILP warm-started from it",
    "heuristic": "greedy schedule only, gap against the structural lower bound",
    "auto": "fast up to 200 nodes, heuristic beyond",
}
# Above this size the O(n^2) MILP (about 530k columns at 352 nodes) does not reach a root
# bound within a minute on 2 cores, and HiGHS's presolve overruns time limits on a loaded
# machine; the greedy with the structural bound is the better default there.
AUTO_MAX_NODES = 200
# HiGHS 1.16 does not check its time limit through presolve, its MIP setup and (on large
# models) the root LP: on the resnet18_cifar/m4 MILP (447,043 nonzeros, 2 threads) a 2-s limit
# stopped after 4.7 s and a 3-s one after 5.0-5.4 s (1.2e-5 s per nonzero); on an op-level
# LSTM's (1,402,473 nonzeros) a 15-s limit stopped after 32.1 s (2.2e-5).  With a schedule
# already held, the MILP is not started when less than this many seconds per nonzero are left.
MILP_SETUP_S_PER_NONZERO = 2.5e-5
# The tightened MILP has 19-24 nonzeros per node squared on the zoo and aten graphs (18.8 on a
# 66-node aten ResNet, 23.5 on resnet18_cifar): an estimate to build it early only when needed.
MILP_NONZEROS_PER_NODE_SQUARED = 25


def _setup_seconds(nonzeros: float) -> float:
    """About how long HiGHS takes to start on a MILP of ``nonzeros``, deaf to its time limit."""
    return MILP_SETUP_S_PER_NONZERO * nonzeros


def _estimated_nonzeros(g: CostedGraph) -> int:
    """The tightened MILP's size by the estimate, without building it."""
    return MILP_NONZEROS_PER_NODE_SQUARED * len(g.nodes) ** 2


def _result_schedule(g, budget, strategy, steps, status, solver):
    return Schedule(graph=g, budget=budget, steps=tuple(steps), status=status, strategy=strategy, solver=solver)


# Seeds per search start on graphs of at least RESTART_MIN_NODES nodes, a new one each round of the
# guide search.  Below that the MILP that follows proves small graphs faster than more searching
# would (the 20- and 30-node zoo nets in seconds); from about 70 nodes on, a warm-started MILP ran
# for minutes without improving its start (docs/solver.md).
SEARCH_ROUNDS = 4
RESTART_MIN_NODES = 100


def _gap(energy: float, bound: float) -> float:
    """How far above ``bound`` a schedule of ``energy`` is, relative to its energy."""
    return max(0.0, (energy - bound) / max(energy, 1e-300))


def _progress(opts, phase: str, **d) -> None:
    """Tell the caller's progress callback which step the solve is in (and the best energy and bound so
    far, in joules): on 5,000 nodes a step takes minutes.  A failing callback never stops the solve."""
    if opts.progress is None:
        return
    try:
        opts.progress({"phase": phase, "energy_unit_j": 1.0, **d})
    except Exception:
        pass


def _cover_seconds(opts) -> float:
    """The eviction cover's time: 10 s, or a quarter of a longer time limit.  On 1,600-node
    graphs HiGHS's presolve of the cover alone takes about 10 s, and a cover stopped before its
    root LP bounds nothing and guides badly; it stops as soon as it is solved."""
    if opts.time_limit_s is None:
        return 60.0
    return min(opts.time_limit_s, max(10.0, 0.25 * opts.time_limit_s))


def structural_bound(g: CostedGraph, budget: Budget, opts, *, remat: bool,
                     paging: bool, info: dict | None = None) -> tuple[float, dict[int, str]]:
    """The eviction cover's energy bound and guide; ``inf`` when no eviction set meets the deadline."""
    return eviction_cover(g, budget, remat=remat, paging=paging, time_limit=_cover_seconds(opts), info=info)


def _runtime_cover(g: CostedGraph, budget: Budget, opts, *, remat: bool,
                   paging: bool) -> tuple[float, dict[int, str]]:
    """A proven lower bound on the runtime of any schedule within the RAM budget, and the
    eviction set that attains it (eviction cover)."""
    return eviction_cover(g, budget, remat=remat, paging=paging, objective="time",
                          time_limit=_cover_seconds(opts))


# Where the tightened cover's deadline sits between the fastest possible runtime and the real deadline
# (0: the fastest, 1: the deadline).  On the op-level ResNets on the a72 at 1.2x, the cover at the real
# deadline spends all of the time on paging, and its guide's plans page the same tensors in two or three
# times and overrun; at 0.15 of the way its guide, checkpointed, met the deadline at 2.1% (40 blocks)
# and 2.2% (100 blocks) over plain, where the fastest guide's plans, searched for 120 s, ended at 11%
# and 19% (docs/solver.md).
TIGHTENED_DEADLINE_SHARE = 0.15


# The share of the deadline's slack over plain that the energy cover's evictions take, above which the
# deadline's guides run before the rules.  At the benchmarks' budgets: 0.98-1.00 on the op-level ResNets on
# the a72 at 1.2x, where every rule overran (for minutes on 4,818 nodes), 1.00 on resnet50/a72 at 20-30%
# RAM and 1.2x (where rules met it), at most 0.90 elsewhere.  A hint, not a proof: among equally cheap
# eviction sets the share varies (0.68-0.98 on 2-8-block ResNets whose rules all overran).  Either order
# makes the same runs when time allows.
DEADLINE_BOUND_SHARE = 0.95


def _tightened_guides(g: CostedGraph, budget: Budget, t_min: float, opts, *, remat: bool,
                      paging: bool, time_left: float | None = None) -> list[dict[int, str]]:
    """The energy cover's guide for a deadline stricter than the real one, as it is and checkpointed:
    room for the restorations the cover does not see (a chain rebuilt more than once).  The cover
    gets at most half of ``time_left``; none when that is under a second."""
    from .heuristics import checkpointed
    if budget.runtime_s is None or not math.isfinite(t_min) or t_min >= budget.runtime_s:
        return []
    seconds = _cover_seconds(opts) if time_left is None else min(_cover_seconds(opts), 0.5 * time_left)
    if seconds < 1.0:
        return []
    strict = Budget(budget.ram_bytes, t_min + TIGHTENED_DEADLINE_SHARE * (budget.runtime_s - t_min),
                    budget.paging_time)
    lb, guide = eviction_cover(g, strict, remat=remat, paging=paging, time_limit=seconds)
    if not math.isfinite(lb) or not guide:
        return []
    # checkpointed first: their runs take seconds on 4,818 nodes, the guide's as it is 45 s each
    return [ck for every in (3, 4, 6) if (ck := checkpointed(g, guide, every))] + [guide]


def _runtime_bound(g: CostedGraph, budget: Budget, opts, *, remat: bool, paging: bool) -> float:
    return _runtime_cover(g, budget, opts, remat=remat, paging=paging)[0]


def _rules_seconds(opts, elapsed: float) -> float | None:
    """Time for the greedy rules: half of what the time limit leaves (they take a few seconds below
    2,000 nodes, but minutes in all on 5,000), none without a limit."""
    if opts.time_limit_s is None:
        return None
    return max(0.0, 0.5 * (opts.time_limit_s - elapsed))


def _search_seconds(opts, elapsed: float, milp_follows: bool, share: float | None = None) -> float:
    """Time for a guide search: ``share`` of what the time limit leaves, by default half when the
    MILP may follow and 90% when nothing does (the rest covers emitting and validating); 30 s
    without a limit."""
    if opts.time_limit_s is None:
        return 30.0
    if share is None:
        share = 0.5 if milp_follows else 0.9
    return max(0.0, share * (opts.time_limit_s - elapsed))


# The interval search (poet.solve.intervals, CP-SAT) runs after the guide search, while the gap is
# open, on graphs of this many nodes.  Below, the MILP proves the small zoo nets in seconds; above,
# a warm-started MILP never improved its start nor proved a zoo case, and the interval search
# takes the rest of the time limit (the MILP starts only if time is left).  On resnet50 (352 nodes)
# it took the gaps from 1.72% to 1.62% and 3.55% to 3.35% at 60 s; on a 658-node op-level ResNet
# only from 4.31% to 4.25% at 120 s (the gap is in the bound there), so larger graphs go without.
INTERVAL_MIN_NODES = 100
INTERVAL_MAX_NODES = 400
# ... and when at least this much of the time limit is left for the guide search and it.  It
# gains little in its first 10 s (3 s of them CP-SAT's presolve on resnet18_cifar), and a short
# solve's time is the guide search's: it proves resnet18_cifar/m4 at 30% RAM in 5 s.
INTERVAL_MIN_REST_S = 20.0
# its time without a time limit
INTERVAL_SECONDS = 60.0
# The guide search's share of the time left when the interval search follows.  On resnet18_cifar/m4
# at 20% RAM the search stalls within 10 s, and the interval search needs tens of seconds; the cases
# the search proves take it under 10 s (docs/solver.md).
SEARCH_SHARE_BEFORE_INTERVALS = 0.25


def _interval_seconds(opts, elapsed: float) -> float:
    """Time for the interval search: 90% of what the time limit leaves (it spends about 3 s in
    CP-SAT's presolve on resnet18_cifar before it improves anything)."""
    if opts.time_limit_s is None:
        return INTERVAL_SECONDS
    return _search_seconds(opts, elapsed, False)


def solve_milp(g: CostedGraph, budget: Budget, opts, *, remat: bool, paging: bool, strategy: str,
               incumbent_energy: float | None = None) -> Schedule:
    """The MILP strategies' solve.  ``incumbent_energy``: the energy of a schedule the
    caller already holds; when it meets the proven bound, the MILP is skipped."""
    import time
    method = getattr(opts, "method", "auto") or "auto"
    if method not in METHODS:
        raise SolveError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "auto":
        method = "fast" if len(g.nodes) <= AUTO_MAX_NODES else "heuristic"
    t0 = time.perf_counter()
    stopped = opts.stop or (lambda: False)     # asked to end early: the best plan held is the answer
    plan = plan_e = f = None
    origin = "greedy"       # what found the plan held: the greedy (and its guide search) or "intervals"
    solver: dict = {"requested_method": opts.method, "requested_gap": opts.gap,
                    "time_limit_s": opts.time_limit_s, "threads": opts.threads}
    cover_info: dict = {}
    _progress(opts, "lower bound")
    lb, guide = structural_bound(g, budget, opts, remat=remat, paging=paging, info=cover_info)
    if not math.isfinite(lb):
        # no set of evictions that makes RAM fit leaves enough time: the deadline is out of reach
        t_min = _runtime_bound(g, budget, opts, remat=remat, paging=paging)
        solver.update({"method": "bound", "min_runtime_s_lower_bound": t_min,
                       "solve_seconds": time.perf_counter() - t0,
                       "message": (f"the deadline {fmt_seconds(budget.runtime_s)} is too short for "
                                   f"{fmt_bytes(budget.ram_bytes)} of RAM (proven by the eviction cover)")})
        if opts.find_min_budgets and len(g.nodes) <= AUTO_MAX_NODES:
            solver.update(min_budgets(g, budget, opts, remat=remat, paging=paging, t0=t0))
        return Schedule(graph=g, budget=budget, steps=(), status=INFEASIBLE, strategy=strategy, solver=solver)
    solver["structural_bound_energy_j"] = lb
    outside_proven = incumbent_energy is not None and incumbent_energy - lb <= opts.gap * incumbent_energy

    def build_milp():
        tb = time.perf_counter()
        _progress(opts, "building the MILP", objective=plan_e, bound=lb)
        built = build(g, budget, remat=remat, paging=paging, tighten=(method == "fast"))
        solver["build_seconds"] = time.perf_counter() - tb
        return built

    def greedy_result(skipped: tuple[float, float, int] | None = None, estimated: bool = False) -> Schedule:
        """The best plan held as the answer, with its gap to the structural bound; ``skipped``:
        (seconds left, seconds HiGHS needs to start, nonzeros) when the MILP was not started;
        ``estimated``: those nonzeros are the estimate's, the MILP was not built."""
        gap = None if plan_e is None else _gap(plan_e, lb)
        proven = gap is not None and gap <= opts.gap
        solver.update({
            "method": origin + "+bound" if proven else origin, "variables": 0, "constraints": 0,
            "gap": gap, "objective_energy_j": plan_e, "bound_energy_j": lb,
            "solve_seconds": time.perf_counter() - t0,
            "message": ("no schedule found by the greedy" if plan is None else
                        (f"optimal: the {origin} schedule is within {gap:.2e} of the structural lower bound"
                         if proven else f"feasible {origin} schedule, {gap:.2%} above the structural lower bound"))})
        if skipped is not None:
            rest, need, nonzeros = skipped
            solver.update({"milp_skipped": True,
                           "status_detail": f"{rest:.1f} s left, too few to start the MILP (about {need:.0f} s)"})
            solver["message"] += (f"; the MILP was not started: {rest:.1f} s of the time limit were left, and HiGHS "
                                  f"needs about {need:.0f} s to set up a MILP of {'about ' * estimated}{nonzeros:,} "
                                  f"nonzeros (a longer --time-limit lets it run)")
        if plan is None:
            if budget.runtime_s is not None:
                t_min = solver.get("min_runtime_s_lower_bound")
                if t_min is None:
                    t_min = _runtime_bound(g, budget, opts, remat=remat, paging=paging)
                near = solver.get("nearest_runtime_s")
                solver.update({"min_runtime_s_lower_bound": t_min,
                               "message": (f"no schedule found within the deadline {fmt_seconds(budget.runtime_s)}"
                                           + (f" (the nearest found takes {fmt_seconds(near)})" if near else "")
                                           + "; a longer deadline or more RAM will help")})
            return Schedule(graph=g, budget=budget, steps=(), status=NO_SOLUTION, strategy=strategy, solver=solver)
        return _result_schedule(g, budget, strategy, emit(g, plan), OPTIMAL if proven else FEASIBLE, solver)

    if method != "faithful":
        from .heuristics import GuideSearch, best_greedy, rule_names, search_guides
        from .parallel import SearchPool, worker_count
        rule_plans: list = []
        closest: list = []

        def cheaper(a, b):
            return b if a is None or (b is not None and plan_costs(g, b, budget.paging_time)[0]
                                      < plan_costs(g, a, budget.paging_time)[0]) else a

        def nearest(nearer):
            if nearer and (not closest or plan_costs(g, nearer[0], budget.paging_time)[1]
                           < plan_costs(g, closest[0], budget.paging_time)[1]):
                closest[:] = nearer

        def deadline_guided(per_rule):
            # guide two rules by the energy cover's eviction set for a stricter deadline, then each rule
            # by the fastest eviction set (the runtime cover's), its tensors evicted first only until
            # their first restoration
            _progress(opts, "greedy rules for the deadline", bound=lb)
            t_min, fast_guide = _runtime_cover(g, budget, opts, remat=remat, paging=paging)
            solver["min_runtime_s_lower_bound"] = t_min
            left = None if opts.time_limit_s is None else opts.time_limit_s - (time.perf_counter() - t0)
            strict = _tightened_guides(g, budget, t_min, opts, remat=remat, paging=paging, time_left=left)
            plan = None
            for rules in ([(r, gd, False) for gd in strict for r in ("energy", "remat")],
                          [(r, fast_guide, True) for r in rule_names(remat, paging)]):
                nearer: list = []
                plan = cheaper(plan, best_greedy(g, budget, remat=remat, paging=paging, per_rule=per_rule,
                                                 closest=nearer, rules=rules, stop=opts.stop,
                                                 time_limit=_rules_seconds(opts, time.perf_counter() - t0)))
                nearest(nearer)
            return plan

        # The cover's evictions take (nearly) all of the deadline's slack: the rules' plans, which
        # restore some tensors more than once, tend to overrun it (all of them on the op-level ResNets
        # on the a72 at 1.2x, minutes of runs on 4,818 nodes), so the deadline's guides go first.
        solver["deadline_bound"] = cover_info.get("slack_used", 0.0) >= DEADLINE_BOUND_SHARE
        if solver["deadline_bound"]:
            guided, nearer = [], []
            plan = deadline_guided(guided)
            _progress(opts, "greedy rules", bound=lb, objective=None if plan is None
                      else plan_costs(g, plan, budget.paging_time)[0])
            plan = cheaper(plan, best_greedy(g, budget, remat=remat, paging=paging, guide=guide,
                                             per_rule=rule_plans, closest=nearer if plan is None else None,
                                             stop=opts.stop,
                                             time_limit=_rules_seconds(opts, time.perf_counter() - t0)))
            nearest(nearer)
            rule_plans += guided
        else:
            _progress(opts, "greedy rules", bound=lb)
            plan = best_greedy(g, budget, remat=remat, paging=paging, guide=guide, per_rule=rule_plans,
                               closest=closest, stop=opts.stop,
                               time_limit=_rules_seconds(opts, time.perf_counter() - t0))
            if plan is None and closest:     # every rule overran the deadline
                plan = deadline_guided(rule_plans)
        if plan is None and closest:
            # every rule overran the deadline: search the guide of the nearest miss until one meets it
            _progress(opts, "searching for a schedule within the deadline", bound=lb)
            ts = time.perf_counter()
            cand = search_guides(g, budget, closest[0], remat=remat, paging=paging, target_energy=math.inf,
                                 stop=opts.stop,
                                 time_limit=_search_seconds(opts, ts - t0, method != "heuristic"))
            miss = plan_costs(g, cand, budget.paging_time)[1]
            if miss <= budget.runtime_s * (1 + 1e-9):
                plan = cand
            else:
                solver["nearest_runtime_s"] = miss
            solver["deadline_search_seconds"] = time.perf_counter() - ts
        solver["heuristic_seconds"] = time.perf_counter() - t0
        if plan is not None:
            plan_e, _ = plan_costs(g, plan, budget.paging_time)
            solver["heuristic_energy_j"] = plan_e
        gap_lb = None if plan_e is None else _gap(plan_e, lb)
        if gap_lb is not None and gap_lb > opts.gap and not outside_proven:
            milp_follows = method != "heuristic"
            from . import intervals
            rest = None if opts.time_limit_s is None else opts.time_limit_s - (time.perf_counter() - t0)
            cp_follows = (INTERVAL_MIN_NODES <= len(g.nodes) <= INTERVAL_MAX_NODES and intervals.available()
                          and (rest is None or rest >= INTERVAL_MIN_REST_S))
            if milp_follows and rest is not None and 0.5 * rest < _setup_seconds(_estimated_nonzeros(g)):
                # it may not fit: built now to know its size.  When HiGHS could not even set it up in
                # the half of the time left that the search would leave it, the search gets that time
                f = build_milp()
                rest = opts.time_limit_s - (time.perf_counter() - t0)
                milp_follows = _setup_seconds(f.problem.num_nonzeros) <= 0.5 * rest
            # local search over the guides of two starts, sharing the search time: the cheapest plan and
            # a cover-guided one, or else the cheapest of another rule (each rule's search explores a
            # different neighbourhood; a third start only thins the time of the other two)
            ts = time.perf_counter()
            span = _search_seconds(opts, ts - t0, milp_follows,
                                   SEARCH_SHARE_BEFORE_INTERVALS if cp_follows else None)
            target = lb / (1 - opts.gap) if opts.gap < 1 else math.inf
            guided = [p for p in rule_plans if p is not plan and p.rule and p.rule[1]][:1]
            others = sorted((p for p in rule_plans if p is not plan and p.rule and not p.rule[1]
                             and p.rule[0] != plan.rule[0]), key=lambda p: plan_costs(g, p, budget.paging_time)[0])
            starts = [plan] + (guided or others[:1])
            # Where a search stalls depends on its seed: on resnet18_cifar/m4 at 30% RAM every search
            # gains within its first 250 moves or not at all, and two seeds in four reach the bound
            # within 100 moves, while on resnet18/m4 at 20% the one that does goes 350 moves without
            # gain first.  So the searches are resumable and run in rounds: each round adds a search of
            # every start with the next seed (up to SEARCH_ROUNDS seeds, on graphs of RESTART_MIN_NODES
            # or more), then resumes every search, best first, until it goes twice as many moves
            # without gain as in the round before (first twice its kick distance, at most its own
            # patience).  It ends when every search has stalled at its own patience.  The searches
            # of a round run side by side, one per core (poet.solve.parallel).
            max_seeds = SEARCH_ROUNDS if len(g.nodes) >= RESTART_MIN_NODES else 1
            searches: list = []
            rounds = 0

            def left() -> float:
                """Search time left, 0 once the plan is good enough or the last 1% of the span is reached."""
                rest = span - (time.perf_counter() - ts)
                return 0.0 if plan_e <= target or rest <= 0.01 * span or stopped() else rest

            _progress(opts, "guide search", objective=plan_e, bound=lb, gap=gap_lb)
            with SearchPool(g, worker_count(opts.threads)) as pool:
                while left():
                    if rounds < max_seeds:
                        searches += [GuideSearch(g, budget, st, remat=remat, paging=paging, target_energy=target,
                                                 seed=rounds) for st in starts]
                    elif all(sr.done or sr.idle >= sr.patience for sr in searches):
                        break
                    searches.sort(key=lambda sr: sr.best_key[1])
                    for j in range(0, len(searches), pool.workers):
                        rest = left()
                        if not rest:
                            break
                        batch = searches[j:j + pool.workers]
                        share = rest * len(batch) / (len(searches) - j)
                        batch = pool.run([(sr, share, sr.patience if max_seeds == 1
                                           else min(sr.patience, 2 * sr.kick << rounds)) for sr in batch],
                                         stop=opts.stop)
                        searches[j:j + len(batch)] = batch
                        for sr in batch:
                            cand_e, _ = plan_costs(g, sr.best, budget.paging_time)
                            if cand_e < plan_e:
                                plan, plan_e = sr.best, cand_e
                        _progress(opts, "guide search", objective=plan_e, bound=lb, gap=_gap(plan_e, lb))
                    rounds += 1
            solver["guide_search_rounds"] = rounds
            gap_lb = _gap(plan_e, lb)
            solver["guide_search_seconds"] = time.perf_counter() - ts
            if cp_follows and gap_lb > opts.gap and not stopped():
                # retention intervals on CP-SAT, from the search's plan: a different neighbourhood
                # (any tensor's lives may move), slower per gain, but it goes on gaining where the guide
                # search stalls (resnet18_cifar/m4 at 20% RAM, docs/solver.md)
                tc = time.perf_counter()
                _progress(opts, "interval search", objective=plan_e, bound=lb, gap=gap_lb)
                info: dict = {"start_energy_j": plan_e}

                def cp_progress(e):
                    e = min(e, plan_e)      # the model's price of a solution, before it is validated
                    _progress(opts, "interval search", objective=e, bound=lb, gap=_gap(e, lb))
                cand = intervals.interval_plan(g, budget, start=plan, time_limit=_interval_seconds(
                    opts, tc - t0), threads=worker_count(opts.threads), remat=remat,
                    paging=paging, target_energy=target, info=info, stop=opts.stop,
                    progress=None if opts.progress is None else cp_progress)
                cand_e = math.inf if cand is None else plan_costs(g, cand, budget.paging_time)[0]
                if cand_e < plan_e:
                    plan, plan_e, origin = cand, cand_e, "intervals"
                    gap_lb = _gap(plan_e, lb)
                solver["interval_search"] = {**info, "energy_j": plan_e}
                solver["interval_search_seconds"] = time.perf_counter() - tc
            solver["heuristic_energy_j"] = plan_e
        if method == "heuristic" or (method == "fast" and (outside_proven or (gap_lb is not None
                                                                             and gap_lb <= opts.gap))):
            return greedy_result()

    if stopped():
        return greedy_result()
    if f is None and plan is not None and opts.time_limit_s is not None:
        # not built yet (after the interval search, which leaves a tenth of the time): when what is
        # left is under half of what HiGHS would need by the estimate (which the zoo and aten graphs'
        # MILPs reach to within 25%), it could not start either, and is not even built (up to 1 s)
        rest = opts.time_limit_s - (time.perf_counter() - t0)
        nonzeros = _estimated_nonzeros(g)
        if rest < 0.5 * _setup_seconds(nonzeros):
            return greedy_result(skipped=(max(rest, 0.0), _setup_seconds(nonzeros), nonzeros), estimated=True)
    if f is None:
        f = build_milp()
    if plan is not None and opts.time_limit_s is not None:
        rest = opts.time_limit_s - (time.perf_counter() - t0)
        need = _setup_seconds(f.problem.num_nonzeros)
        if rest < need:
            # it would stop at its time limit no sooner than `need` from now, with nothing new
            return greedy_result(skipped=(max(rest, 0.0), need, f.problem.num_nonzeros))
    start = None
    if plan is not None:
        start, why = plan_to_start(f, g, plan)
        solver["warm_start"] = origin if start is not None else f"none ({why})"
    backend = get_backend(opts.backend)
    limit = opts.time_limit_s
    if limit is not None:
        limit = max(0.1, limit - (time.perf_counter() - t0))
    kw = {"start": start} if start is not None else {}
    if opts.stop is not None:
        kw["stop"] = opts.stop

    def milp_progress(d):
        # In joules, against the better of the solver's bound and the structural one.  With a warm
        # start the best is the schedule held: HiGHS 1.16 reports objectives in its presolved space,
        # where it priced the resnet18_cifar/m4 start 0.3% of plain below its value.
        obj = plan_e if plan_e is not None else (None if d.get("objective") is None
                                                 else d["objective"] * f.energy_unit)
        bnd = max(lb, (d.get("bound") or 0.0) * f.energy_unit)
        _progress(opts, "MILP", objective=obj, bound=bnd, nodes=d.get("nodes"),
                  gap=None if obj is None else _gap(obj, bnd))
    res = backend(f.problem, time_limit=limit, threads=opts.threads, gap=opts.gap,
                  progress=None if opts.progress is None else milp_progress, verbose=opts.verbose, **kw)
    p = f.problem
    bound = None if res.bound is None or not math.isfinite(res.bound) else res.bound * f.energy_unit
    solver.update({
        "method": "milp-" + method, "backend": opts.backend, "status_detail": res.detail,
        "variables": p.num_cols, "integer_variables": int(p.integer.sum()), "constraints": p.num_rows,
        "nonzeros": p.num_nonzeros, "mip_seconds": res.seconds,
        "gap": res.gap, "objective_energy_j": None if res.objective is None else res.objective * f.energy_unit,
        "bound_energy_j": bound, "message": _status_message(res, strategy),
    })
    solver["solve_seconds"] = time.perf_counter() - t0
    if res.x is None and plan is not None and res.status != INFEASIBLE:
        # the solver stopped without an incumbent of its own: the greedy schedule is the best found
        best_lb = max(lb, bound or 0.0)
        gap = _gap(plan_e, best_lb)
        solver.update({"gap": gap, "objective_energy_j": plan_e, "bound_energy_j": best_lb,
                       "message": f"feasible greedy schedule; gap {gap:.2%} to the best proven bound ({res.detail})"})
        status = OPTIMAL if gap <= opts.gap else FEASIBLE
        return _result_schedule(g, budget, strategy, emit(g, plan), status, solver)
    if res.x is None:
        sched = Schedule(graph=g, budget=budget, steps=(), status=res.status if res.status != "optimal" else NO_SOLUTION,
                         strategy=strategy, solver=solver)
        if res.status == INFEASIBLE and opts.find_min_budgets:
            solver.update(min_budgets(g, budget, opts, remat=remat, paging=paging, t0=t0))
        return sched
    status = res.status
    obj = solver["objective_energy_j"]
    if obj is not None and (bound is None or lb > bound):
        # the structural bound is stronger than the solver's: the gap is measured against it
        gap = _gap(obj, lb)
        if res.gap is None or gap < res.gap:
            solver.update({"gap": gap, "bound_energy_j": lb})
            if status == FEASIBLE and gap <= opts.gap:
                status = OPTIMAL
                solver["message"] = (f"optimal (relative gap {gap:.2e} to the structural lower bound; "
                                     f"the solver stopped with {res.detail})")
            elif status == FEASIBLE:
                solver["message"] = (f"feasible; not proven optimal: gap {gap:.2%} to the structural lower "
                                     f"bound ({res.detail})")
    steps = emit(g, decode(f, res.x))
    return _result_schedule(g, budget, strategy, steps, status, solver)


def min_budgets(g: CostedGraph, budget: Budget, opts, *, remat: bool, paging: bool,
                t0: float | None = None) -> dict:
    """Smallest feasible RAM (at the deadline) and runtime (at the RAM budget), computed by MILP:
    each gets 120 s, or, with a time limit, what is left of it since ``t0`` (perf_counter)."""
    import time
    from .baselines import keep_all_peak
    out: dict = {}
    backend = get_backend(opts.backend)
    start = time.perf_counter() if t0 is None else t0

    def seconds(f: Formulation, share: float, what: str) -> tuple[float, str | None]:
        """The MILP's time limit, and why it is not started (None: it is): like the solve's MILP,
        not when HiGHS could not even set it up in the time left (_setup_seconds).  The
        first gets ``share`` of what is left, or all of it when a share is too little."""
        if opts.time_limit_s is None:
            return 120.0, None
        rest = opts.time_limit_s - (time.perf_counter() - start)
        need = _setup_seconds(f.problem.num_nonzeros)
        if rest < need:
            return 0.0, (f"the smallest feasible {what} was not computed: {max(rest, 0.0):.1f} s of the time "
                         f"limit were left, and HiGHS needs about {need:.0f} s to set up its MILP (a longer "
                         f"--time-limit computes it)")
        return (share * rest if share * rest >= need else rest), None
    kw = {"stop": opts.stop} if opts.stop is not None else {}
    stopped = opts.stop or (lambda: False)

    def searched(limit: float) -> str:
        return "before the stop" if stopped() else f"in {limit:.0f} s"
    lower = g.min_ram_bytes()
    if paging and (budget.runtime_s is None or budget.paging_time == PAGING_HIDDEN):
        out["min_ram_bytes"] = lower
        out["min_ram_note"] = "with paging and no binding deadline the node-plus-inputs bound is achievable"
    else:
        hi = max(keep_all_peak(g), lower)
        f = build(g, budget, remat=remat, paging=paging, objective="peak_ram", ram_cap_bytes=hi)
        limit, why = seconds(f, 0.5 if budget.runtime_s is not None else 1.0, "RAM budget")
        res = None if why else backend(f.problem, time_limit=limit, threads=opts.threads, gap=1e-6, **kw)
        scale = hi  # the formulation's memory unit
        if why:
            out["min_ram_note"] = why
        elif res.status == INFEASIBLE:
            out["min_ram_note"] = (f"no RAM budget makes the deadline {fmt_seconds(budget.runtime_s)} reachable; "
                                   f"the deadline itself is too short")
        elif res.x is not None:
            best = int(math.ceil(res.objective * scale - 1e-6))
            lb = int(math.ceil(res.bound * scale - 1e-6)) if res.bound is not None else lower
            out["min_ram_bytes"] = best
            out["min_ram_bytes_lower_bound"] = max(lb, lower)
            out["min_ram_note"] = ("proven" if res.status == OPTIMAL else
                                   f"best found {searched(limit)}; proven lower bound {fmt_bytes(max(lb, lower))}")
    if budget.runtime_s is not None and not stopped():
        nob = Budget(budget.ram_bytes, None, budget.paging_time)
        f = build(g, nob, remat=remat, paging=paging, objective="runtime")
        limit, why = seconds(f, 1.0, "deadline")
        res = None if why else backend(f.problem, time_limit=limit, threads=opts.threads, gap=1e-6, **kw)
        if why:
            out["min_runtime_note"] = why
        elif res.status == INFEASIBLE:
            out["min_runtime_note"] = f"the RAM budget {fmt_bytes(budget.ram_bytes)} is infeasible at any deadline"
        elif res.x is not None:
            out["min_runtime_s"] = res.objective * (g.plain_runtime_s or 1.0)
            out["min_runtime_note"] = "proven" if res.status == OPTIMAL else f"best found {searched(limit)}"
    return out


@register("poet", "POET MILP: rematerialization and paging chosen jointly for minimum energy")
def solve_poet(g, budget, opts):
    if (getattr(opts, "method", "auto") or "auto") == "faithful":
        return solve_milp(g, budget, opts, remat=True, paging=True, strategy="poet")
    import dataclasses
    import time
    t0 = time.perf_counter()
    _progress(opts, "Capuchin-style schedule")
    h = _capuchin_incumbent(g, budget, opts)
    if opts.time_limit_s is not None:   # the time limit covers the heuristic too
        opts = dataclasses.replace(opts, time_limit_s=max(0.1, opts.time_limit_s - (time.perf_counter() - t0)))
    s = solve_milp(g, budget, opts, remat=True, paging=True, strategy="poet",
                   incumbent_energy=None if h is None else h.totals.energy_j)
    return _best_of(s, h, opts)


def _capuchin_incumbent(g, budget, opts) -> Schedule | None:
    """The Capuchin-style heuristic's schedule, validated; an extra incumbent for POET.

    It orders instructions freely (not in the MILP's stage form) and at loose budgets
    on expensive storage sometimes beats an unfinished MILP.  It takes a fraction of a
    second on the zoo but grows about as the cube of the graph's size (41 s on 1,618
    nodes), so it gets a tenth of the time limit (60 s without one) and is dropped when
    it does not finish.
    """
    import dataclasses

    from ..schedule.validate import ScheduleError, validate
    from .capuchin import solve_capuchin
    share = 60.0 if opts.time_limit_s is None else 0.1 * opts.time_limit_s
    h = solve_capuchin(g, budget, dataclasses.replace(opts, time_limit_s=share))
    if not h.steps:
        return None
    try:
        h.totals = validate(g, h.steps, budget)
    except ScheduleError:
        return None
    return h


def _best_of(s: Schedule, h: Schedule | None, opts) -> Schedule:
    """POET's result, or the heuristic's schedule where that is cheaper, with an honest gap."""
    from .api import checked
    if h is None:
        return s
    g = s.graph
    mine = checked(s).totals.energy_j if s.steps else math.inf
    if h.totals.energy_j >= mine:
        return s
    sv = dict(s.solver)
    e = h.totals.energy_j
    if s.status == INFEASIBLE and not s.steps:
        # proven impossible in the stage model, yet a freely ordered schedule fits
        sv.update(gap=None, bound_energy_j=None, message=(
            "the MILP's stage model has no schedule here, but the Capuchin-style heuristic's "
            "freely ordered one fits; optimality unknown"))
        status = FEASIBLE
    else:
        lb = max(x for x in (sv.get("bound_energy_j"), sv.get("structural_bound_energy_j"), g.plain_energy_j)
                 if x is not None)
        gap = _gap(e, lb)
        status = OPTIMAL if gap <= opts.gap else FEASIBLE
        sv.update(gap=gap, bound_energy_j=lb, message=(
            f"the Capuchin-style heuristic's schedule beat the solver's best ({mine:.6g} J); "
            f"gap {gap:.2%} to the proven bound"))
    # the schedule is the heuristic's; say so, and how it was proven when it was
    sv.update(objective_energy_j=e, incumbent="capuchin", superseded_method=sv.get("method"),
              method="capuchin+bound" if status == OPTIMAL else "capuchin")
    return Schedule(graph=g, budget=s.budget, steps=h.steps, status=status, strategy=s.strategy, solver=sv)


@register("remat", "Checkmate-style MILP: rematerialization only (paging disabled)")
def solve_remat(g, budget, opts):
    return solve_milp(g, budget, opts, remat=True, paging=False, strategy="remat")


@register("paging", "MILP with paging only (rematerialization disabled)")
def solve_paging(g, budget, opts):
    return solve_milp(g, budget, opts, remat=False, paging=True, strategy="paging")
