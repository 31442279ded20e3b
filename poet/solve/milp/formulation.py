"""The POET MILP (Patil et al., ICML 2022) in matrix form, with paging time, scaling and pruning.

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

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, PAGING_OVERLAP, Budget
from ..lp.problem import MatrixBuilder, MilpProblem
from ..stage.plan import ram_cap


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

    b = MatrixBuilder()
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

