"""Plans from retention intervals on CP-SAT (optional: needs ``ortools``).

The MILP has a column per (stage, tensor) pair; here each tensor's time in RAM
is a handful of intervals over the MILP's stage positions (position ``(t, k)``:
stage t, the step that may compute node k), so the model grows with the graph,
not with its square.  Per tensor:

* its first *life* starts where stage i first computes it, at ``(i, i)``;
* up to ``lives`` more, each optional and later than the one before, each a
  recomputation (starting at some ``(t, i)``) or a page-in (after a page-out
  made while an earlier life held it);
* two lives are never in one stage (the stage form holds a tensor once per
  stage), so a stage boundary lies between the end of one and the next;
* every computation needs each input inside one of that input's lives;
* the bytes of all lives at any position fit the RAM cap (one cumulative);
* the added computation (and serial paging) time fits the deadline's slack.

With a bounded number of lives it is a *restriction* of the stage form: it
proves nothing, and its bound is not used.  What it finds is turned into a
:class:`~poet.solve.stage.plan.Plan` and, like every plan, replayed by the
validator before it is returned.  It searches from a plan it is given (a warm
start): on resnet18_cifar/m4 it finds cheaper plans than the greedy's guide
search, whose moves keep the greedy's eviction order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, Budget
from ..stage.emit import freed_after, freed_at_start, last_readers, replays
from ..stage.plan import Plan, drop_unread_pageouts, plan_costs, ram_cap

# extra lives per tensor besides the first (each a recomputation or a page-in)
LIVES = 2
# objective and deadline units: this many per plain energy, and per the deadline's slack over plain
OBJ_SCALE = 10_000_000
TIME_SCALE = 1_000_000_000


def available() -> bool:
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def _positions(n: int):
    """pos(t, k), and how many positions there are."""

    def pos(t: int, k: int) -> int:
        return t * (t + 1) // 2 + k

    return pos, n * (n + 1) // 2


def plan_lives(g: CostedGraph, plan: Plan) -> tuple[dict[int, list[list]], dict[int, int]]:
    """A plan's lives per tensor, ``[kind, start, end)`` in positions (kind ``comp`` or ``page``),
    and the position of each tensor's page-out (the emitter's order and free rule: ``poet.solve.stage.emit``)."""
    n = plan.n
    pos, _ = _positions(n)
    lives: dict[int, list[list]] = {i: [] for i in range(n)}
    out_at: dict[int, int] = {}
    resident: set[int] = set()

    def close(i, e):
        lives[i][-1][2] = e

    for t in range(n):
        comp = plan.comp[t]
        keep_next = plan.keep[t + 1] if t + 1 < n else set()
        last_reader = last_readers(g, comp)
        at_start = set(resident)
        for i in at_start:
            if i in plan.outs[t]:
                out_at.setdefault(i, pos(t, 0) - 1)
        for i in freed_at_start(at_start, last_reader, keep_next):
            close(i, pos(t, 0))
            resident.discard(i)
        ins = plan.ins[t]
        comp_set = set(comp)
        for k in sorted(comp_set | set(ins)):
            p = pos(t, k)
            for i in ins.get(k, ()):
                if i not in resident:  # a page-in of a tensor in RAM changes nothing
                    lives[i].append(["page", p, None])
                    resident.add(i)
            if k not in comp_set:
                continue
            if k not in resident:
                lives[k].append(["comp", p, None])
                resident.add(k)
            if k in plan.outs[t] and k not in at_start:
                out_at.setdefault(k, p)
            for i in freed_after(g, k, last_reader, keep_next):
                if i in resident:
                    close(i, p + 1)
                    resident.discard(i)
        for i in resident - keep_next:
            close(i, pos(t + 1, 0))
        resident &= keep_next
    return lives, out_at


class _Model:
    """The CP-SAT model and the handles needed to hint it and read a plan back."""

    def __init__(self, g: CostedGraph, budget: Budget, extra: dict[int, int], remat: bool, paging: bool):
        from ortools.sat.python import cp_model

        n = len(g.nodes)
        self.g, self.n = g, n
        nd, md = g.nodes, g.last_useful_stage
        pos, P = _positions(n)
        self.pos = pos
        m = self.m = cp_model.CpModel()
        E0 = g.plain_energy_j or 1.0
        serial = budget.paging_time != PAGING_HIDDEN
        stage_starts = cp_model.Domain.FromValues([pos(t, 0) for t in range(n)] + [P])
        obj, rt = [], []
        self.lives: dict[int, list[dict]] = {}
        self.pageout: dict[int, tuple] = {}
        for i in range(n):
            read = bool(g.succs[i]) and md[i] >= i
            p0 = pos(i, i)
            last = pos(md[i], md[i]) + 1 if read else p0 + 1
            e0 = m.NewIntVar(p0 + 1, last, "")
            L = [dict(x=True, s=p0, e=e0, size=m.NewIntVar(1, P, ""), r=None, pg=None)]
            L[0]["iv"] = m.NewIntervalVar(p0, L[0]["size"], e0, "")
            k_i = extra.get(i, 0) if read and md[i] > i else 0
            if k_i:
                rdom = cp_model.Domain.FromValues([pos(t, i) for t in range(i + 1, md[i] + 1)])
                for _ in range(k_i):
                    prev = L[-1]
                    x, r, pg = m.NewBoolVar(""), m.NewBoolVar(""), m.NewBoolVar("")
                    m.Add(r + pg == x)
                    if not remat:
                        m.Add(r == 0)
                    if not paging:
                        m.Add(pg == 0)
                    s = m.NewIntVar(p0 + 1, last - 1, "")
                    e = m.NewIntVar(p0 + 2, last, "")
                    size = m.NewIntVar(1, P, "")
                    b = m.NewIntVarFromDomain(stage_starts, "")
                    m.AddLinearExpressionInDomain(s, rdom).OnlyEnforceIf(r)
                    if prev["x"] is not True:
                        m.AddImplication(x, prev["x"])
                    m.Add(prev["e"] <= b).OnlyEnforceIf(x)  # a stage boundary between two lives
                    m.Add(b <= s).OnlyEnforceIf(x)
                    iv = m.NewOptionalIntervalVar(s, size, e, x, "")
                    L.append(dict(x=x, s=s, e=e, size=size, b=b, r=r, pg=pg, iv=iv))
                    obj += [(r, nd[i].compute_energy_j), (pg, nd[i].pagein_energy_j)]
                    rt += [(r, nd[i].compute_time_s), (pg, nd[i].pagein_time_s if serial else 0.0)]
                y, q = m.NewBoolVar(""), m.NewIntVar(p0, last - 1, "")
                obj.append((y, nd[i].pageout_energy_j))
                rt.append((y, nd[i].pageout_time_s if serial else 0.0))
                ds = []
                for life in L[1:]:
                    m.AddImplication(life["pg"], y)
                    m.Add(q < life["s"]).OnlyEnforceIf(life["pg"])
                for life in L:
                    d = m.NewBoolVar("")
                    if life["x"] is not True:
                        m.AddImplication(d, life["x"])
                    m.Add(life["s"] <= q).OnlyEnforceIf(d)
                    m.Add(life["e"] >= q + 1).OnlyEnforceIf(d)
                    ds.append(d)
                m.AddBoolOr(ds).OnlyEnforceIf(y)
                self.pageout[i] = (y, q, ds)
            self.lives[i] = L
        # every computation's inputs are inside one of their lives
        self.covers: list[tuple] = []  # (input u, the computing life, [bool per life of u])
        for k in range(n):
            for life in self.lives[k]:
                for u in sorted(set(g.preds[k])):
                    cs = []
                    for lu in self.lives[u]:
                        c = m.NewBoolVar("")
                        if lu["x"] is not True:
                            m.AddImplication(c, lu["x"])
                        m.Add(lu["s"] <= life["s"]).OnlyEnforceIf(c)
                        m.Add(lu["e"] >= life["s"] + 1).OnlyEnforceIf(c)
                        cs.append(c)
                    enf = life["r"]
                    if enf is None:
                        m.AddBoolOr(cs)
                    else:
                        m.AddBoolOr(cs).OnlyEnforceIf(enf)
                    self.covers.append((u, life, cs))
        ivs, dem = [], []
        for i in range(n):
            if nd[i].ram_bytes > 0:
                for life in self.lives[i]:
                    ivs.append(life["iv"])
                    dem.append(nd[i].ram_bytes)
        cap = ram_cap(budget.ram_bytes) - g.fixed_ram_bytes
        m.AddCumulative(ivs, dem, cap)
        if budget.runtime_s is not None:
            slack = budget.runtime_s - g.plain_runtime_s
            # rounded up: a restriction, so a plan found here keeps the deadline
            terms = [(x, math.ceil(s / slack * TIME_SCALE)) for x, s in rt if s > 0] if slack > 0 else []
            if slack <= 0:
                for x, s in rt:
                    if s > 0:
                        m.Add(x == 0)
            elif terms:
                m.Add(sum(c * x for x, c in terms) <= TIME_SCALE)
        m.Minimize(sum(round(c / E0 * OBJ_SCALE) * x for x, c in obj if c > 0))

    def hint(self, lives: dict[int, list[list]], out_at: dict[int, int]) -> None:
        m = self.m
        for i, L in self.lives.items():
            got = lives[i]
            m.AddHint(L[0]["e"], got[0][2])
            m.AddHint(L[0]["size"], got[0][2] - got[0][1])
            for j, life in enumerate(L[1:], 1):
                on = j < len(got)
                m.AddHint(life["x"], on)
                m.AddHint(life["r"], on and got[j][0] == "comp")
                m.AddHint(life["pg"], on and got[j][0] == "page")
                if on:
                    _, s, e = got[j]
                    m.AddHint(life["s"], s)
                    m.AddHint(life["e"], e)
                    m.AddHint(life["size"], e - s)
                    prev_end = got[j - 1][2]
                    m.AddHint(life["b"], next(self.pos(t, 0) for t in range(self.n + 1) if self.pos(t, 0) >= prev_end))
            if i in self.pageout:
                y, q, ds = self.pageout[i]
                on = i in out_at
                m.AddHint(y, on)
                if on:
                    m.AddHint(q, out_at[i])
                for j, d in enumerate(ds):
                    m.AddHint(d, on and j < len(got) and got[j][1] <= out_at[i] < got[j][2])
        where = {}
        for i, L in self.lives.items():
            for j, life in enumerate(L):
                where[id(life)] = (i, j)
        for u, life, cs in self.covers:
            k, j = where[id(life)]
            if j >= len(lives[k]):
                for c in cs:
                    m.AddHint(c, False)
                continue
            p = lives[k][j][1]
            hit = False
            for jj, c in enumerate(cs):
                ok = not hit and jj < len(lives[u]) and lives[u][jj][1] <= p < lives[u][jj][2]
                hit |= ok
                m.AddHint(c, ok)

    def plan(self, solver) -> Plan:
        """The solution as stage decisions: a page-in lands at the first read it serves, and a life
        is kept across a stage boundary only while a later read or its page-out needs it."""
        g, n, pos = self.g, self.n, self.pos
        stage_of = []
        for t in range(n):
            stage_of += [t] * (t + 1)
        v = solver.Value
        plan = Plan.empty(n)
        comps: dict[int, list[tuple[int, int]]] = {}  # tensor -> [(start, end)] of its computations
        spans: dict[int, list[list]] = {}  # tensor -> [[kind, start, end, reads]]
        for i, L in self.lives.items():
            spans[i] = []
            for life in L:
                if life["x"] is True or v(life["x"]):
                    kind = "comp" if life["pg"] is None or not v(life["pg"]) else "page"
                    s = life["s"] if isinstance(life["s"], int) else v(life["s"])
                    spans[i].append([kind, s, v(life["e"]), []])
            comps[i] = [(sp[1], sp[2]) for sp in spans[i] if sp[0] == "comp"]
        for k in range(n):
            for s, _ in comps[k]:
                plan.comp[stage_of[s]].append(k)
                for u in set(g.preds[k]):
                    sp = next(sp for sp in spans[u] if sp[1] <= s < sp[2])
                    sp[3].append(s)
        for t in range(n):
            plan.comp[t].sort()
        for i in range(n):
            out_q = None
            if i in self.pageout and v(self.pageout[i][0]):
                out_q = v(self.pageout[i][1])
            for kind, s, e, reads in spans[i]:
                if kind == "page":
                    if not reads:
                        continue
                    first = min(reads)
                    t = stage_of[first]
                    plan.ins[t].setdefault(first - pos(t, 0), []).append(i)
                    s = first
                needed = list(reads)
                if out_q is not None and s <= out_q < e:
                    plan.outs[stage_of[out_q]].add(i)
                    needed.append(out_q)
                for t in range(stage_of[s] + 1, stage_of[max(needed, default=s)] + 1):
                    plan.keep[t].add(i)
        return drop_unread_pageouts(plan)


@dataclass(frozen=True)
class IntervalResult:
    """What the interval search found: the cheapest plan (None when CP-SAT found none, or none that
    replays within the budgets), and the model's size and CP-SAT's status and time."""

    plan: Plan | None
    cp_variables: int
    cp_constraints: int
    cp_status: str
    cp_seconds: float

    def facts(self) -> dict:
        return {
            "cp_variables": self.cp_variables,
            "cp_constraints": self.cp_constraints,
            "cp_status": self.cp_status,
            "cp_seconds": self.cp_seconds,
        }


def interval_plan(
    g: CostedGraph,
    budget: Budget,
    *,
    start: Plan | None = None,
    time_limit: float = 10.0,
    threads: int = 2,
    lives: int = LIVES,
    remat: bool = True,
    paging: bool = True,
    target_energy: float = 0.0,
    seed: int = 0,
    stop=None,
    progress=None,
) -> IntervalResult:
    """The cheapest plan CP-SAT finds within ``time_limit`` (None if none), searching from ``start``;
    it stops early at a plan of ``target_energy`` or less, or once ``stop()`` (polled ten times a
    second) is true.  ``progress(energy_j)`` hears of each better solution, priced as the model
    prices it (rounded per term, before the plan is read back and validated).

    The returned plan has been replayed by the validator within ``budget`` (RAM and deadline); the result
    also gives the model's size and the search's statistics."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    extra = {i: lives for i in range(len(g.nodes))}
    got = out_at = None
    if start is not None:
        got, out_at = plan_lives(g, start)
        for i, L in got.items():
            extra[i] = max(extra[i], len(L) - 1)
    model = _Model(g, budget, extra, remat, paging)
    if got is not None:
        model.hint(got, out_at)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, time_limit - (time.perf_counter() - t0))
    solver.parameters.num_workers = max(1, threads)
    solver.parameters.random_seed = seed
    # the objective counts the energy above plain, in OBJ_SCALE units of it (rounded per term: the
    # plan's true energy decides, after the search)
    E0 = g.plain_energy_j or 1.0
    goal = (target_energy - g.plain_energy_j) / E0 * OBJ_SCALE

    class _Stop(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            if progress is not None:
                try:
                    progress(g.plain_energy_j + self.ObjectiveValue() / OBJ_SCALE * E0)
                except Exception:  # a failing progress printer must not end the search
                    pass
            if self.ObjectiveValue() <= goal:
                self.StopSearch()

    # searched in a thread (CP-SAT releases the GIL), so that this one can poll stop() and take a
    # Ctrl-C at once.  CP-SAT must not catch SIGINT itself: its handler, when it goes, leaves SIGINT
    # at the system default (measured: after one solve a Ctrl-C killed the process outright, with no
    # KeyboardInterrupt, no "stopping early" and no cleanup)
    import threading

    solver.parameters.catch_sigint_signal = False
    out: list = []

    def solve():
        try:
            out.append(solver.Solve(model.m, _Stop()))
        except BaseException as e:  # raised again below, in the caller's thread
            out.append(e)

    search = threading.Thread(target=solve, daemon=True)
    search.start()
    try:
        while search.is_alive():
            search.join(0.1)
            if stop is not None and stop():
                solver.StopSearch()
    except BaseException:  # Ctrl-C: let CP-SAT's thread end too
        solver.StopSearch()
        raise
    if isinstance(out[0], BaseException):
        raise out[0]
    status, seconds = out[0], time.perf_counter() - t0
    proto = model.m.Proto()
    found = model.plan(solver) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    if found is not None and not fits(g, found, budget):
        found = None
    if found is not None and start is not None:
        # the model rounds each term, so a plan it prices no higher than the start can cost a few parts in
        # 1e8 more once priced exactly: the search never hands back a plan dearer than the one it began from
        if plan_costs(g, found, budget.paging_time)[0] > plan_costs(g, start, budget.paging_time)[0]:
            found = start
    return IntervalResult(found, len(proto.variables), len(proto.constraints), solver.StatusName(status), seconds)


def fits(g: CostedGraph, plan: Plan, budget: Budget) -> bool:
    """The plan meets the deadline and replays within the budgets (as every returned plan must)."""
    _, rt = plan_costs(g, plan, budget.paging_time)
    if budget.runtime_s is not None and rt > budget.runtime_s * (1 + 1e-9):
        return False
    return replays(g, plan, budget)
