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

Each constraint family is one method of :class:`_Rows`, its inequality in the docstring
(docs/formulation.md lists them side by side).  Within a stage the emitted order is that of
:mod:`poet.solve.stage.emit`, whose free rule the ``F`` rows express: ``U`` charges every
tensor from the step it enters RAM to the step it is freed, so it equals the RAM of the
emitted schedule at each compute (tensors the stage neither reads nor keeps are charged
until the stage ends, but the solver never keeps such tensors since dropping them earlier
is free); the validator replays the emitted schedule and reports the true peak.

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

INF = math.inf


@dataclass
class Formulation:
    problem: MilpProblem
    R: np.ndarray  # T x T column index, -1 where the variable does not exist
    S: np.ndarray  # (T+1) x T
    D: np.ndarray
    I: dict  # (t, i) -> [(k, column)]: page i in before computing k in stage t
    O: np.ndarray
    U: list  # per stage: list of U columns
    energy_unit: float
    runtime_cols: list  # (col, seconds-coefficient) pairs of the runtime expression, for re-use
    F: dict = field(default_factory=dict)  # (t, k, i) -> column: free i right after computing k
    defs: list = field(default_factory=list)  # (col, [expr, ...], const): continuous col = max(exprs) + const

    @property
    def T(self) -> int:
        return self.R.shape[0]


class _Rows:
    """The columns of one formulation and the methods that add its constraint families, in order."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        *,
        remat: bool,
        paging: bool,
        objective: str,
        ram_cap_bytes: int | None,
        tighten: bool,
    ):
        self.g, self.budget, self.remat, self.paging = g, budget, remat, paging
        self.objective, self.tighten = objective, tighten
        self.T = T = len(g.nodes)
        self.B = float(ram_cap_bytes if ram_cap_bytes is not None else budget.ram_bytes)  # the memory unit
        self.mem = [nd.ram_bytes / self.B for nd in g.nodes]
        self.E0 = g.plain_energy_j or 1.0  # the energy unit
        self.b = MatrixBuilder()
        neg = lambda *shape: np.full(shape, -1, dtype=np.int64)  # noqa: E731
        self.R, self.S, self.D, self.O = neg(T, T), neg(T + 1, T), neg(T + 1, T), neg(T, T)
        self.I: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.F: dict = {}
        self.U: list = []
        self.defs: list = []
        self.runtime_cols: list = []

    # -- columns -----------------------------------------------------------------------------------
    def ecost(self, joules: float) -> float:
        return joules / self.E0 if self.objective == "energy" else 0.0

    def variables(self) -> None:
        """R, S, D, O and I, stage by stage, without those that can never be useful.

        ``tighten`` drops provably useless ones (an optimal schedule survives): a 0-byte tensor is
        never paged (keeping it costs no RAM, paging costs >= 0)."""
        g, b, nodes, md, T = self.g, self.b, self.g.nodes, self.g.last_useful_stage, self.T
        R, S, D, O = self.R, self.S, self.D, self.O
        pageable = [self.paging and not (self.tighten and nodes[i].ram_bytes == 0) for i in range(T)]
        for t in range(T):
            for i in range(t + 1):
                useful = md[i] >= t
                if i == t:
                    R[t, i] = b.var(1.0, 1.0, self.ecost(nodes[i].compute_energy_j))
                elif self.remat and useful:
                    R[t, i] = b.var(cost=self.ecost(nodes[i].compute_energy_j))
                if i < t and useful:
                    S[t, i] = b.var()
                    if pageable[i]:
                        D[t, i] = b.var()
                if pageable[i] and md[i] > t:  # paging out only helps if needed at a later stage
                    O[t, i] = b.var(cost=self.ecost(nodes[i].pageout_energy_j))
            if self.paging:
                for i in range(t):
                    if D[t, i] >= 0:
                        self.I[t, i] = [
                            (k, b.var(cost=self.ecost(nodes[i].pagein_energy_j)))
                            for k in g.succs[i]
                            if k <= t and R[t, k] >= 0
                        ]

    def terms(self, *pairs) -> tuple[list[int], list[float]]:
        cols, vals = [], []
        for col, v in pairs:
            if col >= 0:
                cols.append(int(col))
                vals.append(v)
        return cols, vals

    def paged_in(self, t: int, i: int, upto: int | None = None, sign: float = -1.0) -> list[tuple[int, float]]:
        return [(col, sign) for k, col in self.I.get((t, i), ()) if upto is None or k <= upto]

    # -- the stage's logic, one family per method ---------------------------------------------------
    def inputs_present(self, t: int, k: int) -> None:
        """Every input of a computation is there: ``R[t,k] <= R[t,i] + S[t,i] + sum_{k'<=k} I[t,i,k']``
        for each input i of k (computed in the stage, kept from the last, or paged in before k)."""
        R, S = self.R, self.S
        for i in self.g.preds[k]:
            cols, vals = self.terms((R[t, k], 1.0), (R[t, i], -1.0), (S[t, i], -1.0), *self.paged_in(t, i, k))
            self.b.row(cols, vals, -INF, 0.0)

    def kept_was_present(self, t: int, i: int) -> None:
        """What stage t+1 keeps was in RAM in stage t: ``S[t+1,i] <= S[t,i] + R[t,i] + sum_k I[t,i,k]``."""
        R, S = self.R, self.S
        if t + 1 < self.T and S[t + 1, i] >= 0:
            cols, vals = self.terms((S[t + 1, i], 1.0), (S[t, i], -1.0), (R[t, i], -1.0), *self.paged_in(t, i))
            self.b.row(cols, vals, -INF, 0.0)

    def stored_was_written(self, t: int, i: int) -> None:
        """A copy on storage was there before or paged out in stage t: ``D[t+1,i] <= D[t,i] + O[t,i]``."""
        D, O = self.D, self.O
        if t + 1 < self.T and D[t + 1, i] >= 0:
            cols, vals = self.terms((D[t + 1, i], 1.0), (D[t, i], -1.0), (O[t, i], -1.0))
            self.b.row(cols, vals, -INF, 0.0)

    def page_in_needs_copy(self, t: int, i: int) -> None:
        """A page-in reads a stored copy: ``sum_k I[t,i,k] <= D[t,i]``."""
        if self.I.get((t, i)):
            cols, vals = self.terms((self.D[t, i], -1.0), *self.paged_in(t, i, sign=1.0))
            self.b.row(cols, vals, -INF, 0.0)

    def page_out_needs_presence(self, t: int, i: int) -> None:
        """A page-out writes a tensor in RAM: ``O[t,i] <= S[t,i] + R[t,i]``; tightened, a stored tensor
        is never paged out again: ``O[t,i] + D[t,i] <= 1``."""
        R, S, D, O = self.R, self.S, self.D, self.O
        if O[t, i] >= 0:
            self.b.row(*self.terms((O[t, i], 1.0), (S[t, i], -1.0), (R[t, i], -1.0)), -INF, 0.0)
            if self.tighten and D[t, i] >= 0:
                self.b.row([int(O[t, i]), int(D[t, i])], [1.0, 1.0], -INF, 1.0)

    def one_way_in(self, t: int, i: int) -> None:
        """A tensor enters a stage's RAM at most one way: ``R[t,i] + S[t,i] + sum_k I[t,i,k] <= 1``."""
        excl = self.terms((self.R[t, i], 1.0), (self.S[t, i], 1.0), *self.paged_in(t, i, sign=1.0))
        if len(excl[0]) > 1:
            self.b.row(*excl, -INF, 1.0)

    def stage_logic(self) -> None:
        """The families above, stage by stage (the row order is part of what HiGHS is given)."""
        for t in range(self.T):
            for k in range(t + 1):
                if self.R[t, k] >= 0:
                    self.inputs_present(t, k)
            for i in range(t + 1):
                self.kept_was_present(t, i)
                self.stored_was_written(t, i)
                self.page_in_needs_copy(t, i)
                self.page_out_needs_presence(t, i)
                self.one_way_in(t, i)

    # -- memory -----------------------------------------------------------------------------------
    def free_after(self, t: int, k: int, i: int) -> int:
        """The free rule (:func:`poet.solve.stage.emit.freed_after`) as a column: i may be freed right
        after computing k only if k is computed, the next stage does not keep i and no later
        computation of the stage reads it: ``F <= R[t,k]``, ``F + S[t+1,i] <= 1``, ``F + R[t,j] <= 1``
        for every reader j of i with k < j <= t."""
        R, S, b = self.R, self.S, self.b
        fcol = b.var()
        b.row([fcol, int(R[t, k])], [1.0, -1.0], -INF, 0.0)
        if t + 1 < self.T and S[t + 1, i] >= 0:
            b.row([fcol, int(S[t + 1, i])], [1.0, 1.0], -INF, 1.0)
        for j in self.g.succs[i]:
            if k < j <= t and R[t, j] >= 0:
                b.row([fcol, int(R[t, j])], [1.0, 1.0], -INF, 1.0)
        self.F[t, k, i] = fcol
        return fcol

    def ram(self) -> None:
        """RAM after each computation of a stage, Checkmate's recurrence with frees, within the cap.

        First computation k0 of stage t: ``U[t,k0] = fixed + sum_i S[t,i] m_i + R[t,k0] m_k0 + page-ins
        landing before k0``.  Each next one k after k': ``U[t,k] = U[t,k'] + R[t,k] m_k + page-ins
        before k - sum_{i in inputs(k') + k'} F[t,k',i] m_i``.  ``U <= cap`` (or ``<= peak`` when the
        objective is the peak RAM)."""
        g, b, R, S, I, mem, T = self.g, self.b, self.R, self.S, self.I, self.mem, self.T
        peak_ram = self.objective == "peak_ram"
        cap_bytes = self.B if peak_ram else ram_cap(int(self.B))
        peak_col = b.var(0.0, INF, 1.0, integer=False) if peak_ram else -1
        u_hi = INF if peak_ram else cap_bytes / self.B
        for t in range(T):
            ks = [k for k in range(t + 1) if R[t, k] >= 0]
            arrivals: dict[int, list[tuple[int, float]]] = {}  # k -> page-in columns landing before k
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
                    f = g.fixed_ram_bytes / self.B
                    b.row(cols, vals, f, f)
                    self.defs.append((u, [list(zip(cols[1:], [-v for v in vals[1:]]))], f))
                else:
                    cols.append(prev_u)
                    vals.append(-1.0)
                    for i in (*g.preds[prev_k], prev_k):
                        if mem[i] <= 0:
                            continue
                        cols.append(self.free_after(t, prev_k, i))
                        vals.append(mem[i])
                    b.row(cols, vals, 0.0, 0.0)
                    self.defs.append((u, [list(zip(cols[1:], [-v for v in vals[1:]]))], 0.0))
                if peak_col >= 0:
                    b.row([u, peak_col], [1.0, -1.0], -INF, 0.0)
                prev_u, prev_k = u, k
            self.U.append(stage_u)

    # -- time -------------------------------------------------------------------------------------
    def runtime(self) -> None:
        """The deadline: ``sum R[t,k] c_k + (serial) sum I p_in + sum O p_out <= deadline``; with overlapped
        paging each stage takes ``z_t >= compute_t``, ``z_t >= paging_t``, and ``sum_t z_t <= deadline``;
        with hidden paging only compute counts.  The ``runtime`` objective minimises the same sum."""
        g, b, R, I, O, nodes, budget, T = self.g, self.b, self.R, self.I, self.O, self.g.nodes, self.budget, self.T
        stage_terms = []
        for t in range(T):
            comp = [(int(R[t, k]), nodes[k].compute_time_s) for k in range(t + 1) if R[t, k] >= 0]
            page = [(col, nodes[i].pagein_time_s) for i in range(t) for _, col in I.get((t, i), ())]
            page += [(int(O[t, i]), nodes[i].pageout_time_s) for i in range(t + 1) if O[t, i] >= 0]
            stage_terms.append((comp, page))
        if not (self.objective == "runtime" or budget.runtime_s is not None):
            return
        rt_terms = []  # (col, seconds)
        Rt = budget.runtime_s if (self.objective != "runtime" and budget.runtime_s) else (g.plain_runtime_s or 1.0)
        if budget.paging_time == PAGING_OVERLAP:
            zs = []
            for comp, page in stage_terms:
                z = b.var(0.0, INF, 0.0, integer=False)
                zs.append(z)
                for part in (comp, page):
                    if part:
                        b.row([z] + [c for c, _ in part], [1.0] + [-s / Rt for _, s in part], 0.0, INF)
                self.defs.append((z, [[(c, s / Rt) for c, s in part] for part in (comp, page) if part], 0.0))
            rt_terms = [(z, Rt) for z in zs]
        else:
            for comp, page in stage_terms:
                rt_terms += comp
                if budget.paging_time != PAGING_HIDDEN:
                    rt_terms += page
        if self.objective == "runtime":
            for col, s in rt_terms:
                b.c[col] += s / Rt
        else:
            b.row([c for c, _ in rt_terms], [s / Rt for _, s in rt_terms], -INF, 1.0)
        self.runtime_cols = rt_terms

    def formulation(self) -> Formulation:
        return Formulation(
            problem=self.b.problem(),
            R=self.R,
            S=self.S,
            D=self.D,
            I=self.I,
            O=self.O,
            U=self.U,
            energy_unit=self.E0,
            runtime_cols=self.runtime_cols,
            F=self.F,
            defs=self.defs,
        )


def build(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    objective: str = "energy",
    ram_cap_bytes: int | None = None,
    tighten: bool = False,
) -> Formulation:
    """The MILP in matrix form: the variables, the stage logic, the RAM rows, the deadline.

    objective: ``energy`` (POET), ``peak_ram`` (smallest RAM meeting the deadline)
    or ``runtime`` (shortest schedule meeting the RAM budget).  ``tighten`` adds only
    provably safe reductions (an optimal schedule survives each of them).
    """
    m = _Rows(g, budget, remat=remat, paging=paging, objective=objective, ram_cap_bytes=ram_cap_bytes, tighten=tighten)
    m.variables()
    m.stage_logic()
    m.ram()
    m.runtime()
    return m.formulation()
