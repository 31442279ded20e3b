"""Windowed improvement: re-solve a window of stages exactly, the rest of the schedule fixed.

A schedule in stage form (stage t ends with node t's first computation, as the one-pass rule and every
stage plan emit it) is cut right after the computation of node ``a - 1`` and right after that of node
``b - 1``.  What is in RAM and on storage at both cuts is the window's boundary: it starts from the
first and must end exactly in the second, so the steps after the window replay as before.  Inside, a
small MILP chooses per stage t and tensor x (the tensors resident or stored at the first cut and read
in the window or still held at its end, and the window's own nodes):

* ``e`` free x before node t runs (after a page-out ``o`` if wanted; ``o`` may also store a copy of a
  tensor that stays), ``y`` page it in, ``z`` recompute it (its inputs present);
* present while node t runs: ``h = k - e + y + z`` where ``k`` is what was present after node t - 1;
  node t's inputs are present, and the bytes present plus node t's output fit the RAM cap;
* on storage: ``s[t+1] = s[t] + o``;
* the added energy (page-outs, page-ins, recomputations) is minimised; their time fits what the
  window's old steps took plus the deadline's slack (serial paging; hidden paging: none counts).

Anything the model gets wrong can only cost an improvement, never validity: a window is kept only
when its new steps, replayed from the first cut's state, respect every precondition and the RAM cap,
end in the second cut's state, and cost less.  The whole schedule goes through the validator after.
Windows are tried where the old steps spend the most (page traffic), until the time runs out.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, PAGING_SERIAL, Budget, Op, Step
from ..lp.highs import solve_highs
from ..lp.problem import MatrixBuilder, max_violation
from ..stage.plan import ram_cap


@dataclass(frozen=True)
class WindowResult:
    """The improved steps (the input's when nothing improved), their energy change, and what was tried."""

    steps: tuple[Step, ...]
    saved_j: float  # energy saved (>= 0)
    windows_tried: int
    windows_kept: int
    seconds: float
    why_stopped: str  # "all windows tried", "time limit", "asked to stop", "N windows in a row improved nothing", ...
    warm_starts: int = 0  # windows whose old steps were HiGHS's warm start


def _cuts(g: CostedGraph, steps) -> list[int] | None:
    """Per node t, the index just after its first computation; None if the steps are not in stage form."""
    after = [-1] * len(g.nodes)
    seen = 0
    for i, s in enumerate(steps):
        if s.op == Op.COMPUTE and after[s.node] < 0:
            if s.node != seen:
                return None
            after[s.node] = i + 1
            seen += 1
    return after if seen == len(g.nodes) else None


def _extra(g: CostedGraph, steps, first: set[int], paging_time: str) -> tuple[float, float]:
    """Energy and (counted) time of ``steps`` beyond the first computations of ``first``."""
    e = t = 0.0
    first = set(first)
    for s in steps:
        nd = g.nodes[s.node]
        if s.op == Op.COMPUTE and s.node in first:
            first.discard(s.node)  # its first computation: in every schedule, not counted
        elif s.op == Op.COMPUTE:
            e, t = e + nd.compute_energy_j, t + nd.compute_time_s
        elif s.op == Op.PAGE_IN:
            e, t = e + nd.pagein_energy_j, t + (0.0 if paging_time == PAGING_HIDDEN else nd.pagein_time_s)
        elif s.op == Op.PAGE_OUT:
            e, t = e + nd.pageout_energy_j, t + (0.0 if paging_time == PAGING_HIDDEN else nd.pageout_time_s)
    return e, t


def replay_window(g: CostedGraph, steps, res: set[int], sto: set[int], cap: int) -> tuple[set[int], set[int]] | None:
    """The state after ``steps`` from (``res``, ``sto``), or None if a step is invalid or RAM exceeds ``cap``."""
    res, sto = set(res), set(sto)
    used = g.fixed_ram_bytes + sum(g.ram[x] for x in res)
    for s in steps:
        v = s.node
        if s.op == Op.COMPUTE:
            if v in res or any(p not in res for p in g.preds[v]):
                return None
            res.add(v)
            used += g.ram[v]
        elif s.op == Op.PAGE_IN:
            if v in res or v not in sto:
                return None
            res.add(v)
            used += g.ram[v]
        elif s.op == Op.PAGE_OUT:
            if v not in res:
                return None
            sto.add(v)
        elif s.op == Op.FREE:
            if v not in res:
                return None
            res.discard(v)
            used -= g.ram[v]
        if used > cap:
            return None
    return res, sto


class WindowModel:
    """The MILP of one window (module docstring) and how to read its steps back."""

    def __init__(self, g, a, b, res0, sto0, res1, sto1, cap, time_room, paging_time):
        self.g, self.a, self.b = g, a, b
        nodes, preds = g.nodes, g.preds
        window = range(a, b)
        readers_in = {p for t in window for p in preds[t]}
        xs = set(range(a, b)) | (set(res0) & (readers_in | set(res1))) | (set(sto0) & readers_in) | set(res1)
        xs |= set(res0)  # a resident tensor may simply be freed: it must be seen to be freed
        self.xs = xs = sorted(xs)
        bd = MatrixBuilder()
        page_t = 0.0 if paging_time == PAGING_HIDDEN else 1.0
        self.e, self.o, self.y, self.z, self.h = {}, {}, {}, {}, {}
        self.stored: dict[tuple[int, int], int] = {}  # (x, t): the column "x on storage at stage t's start"
        s_prev = {x: (1.0 if x in sto0 else 0.0) for x in xs}  # constant or column
        k_prev = {x: (1.0 if x in res0 else 0.0) for x in xs}
        time_terms = []
        for t in window:
            ram_cols, ram_vals = [], []
            for x in xs:
                if x >= t:  # not computed yet (t itself: its first computation)
                    continue
                nd = nodes[x]
                k = k_prev[x]
                cols, vals = [], []
                h = bd.var()
                self.h[x, t] = h
                cols.append(h)
                vals.append(1.0)
                k_col = k if isinstance(k, int) else None
                if k_col is not None or k == 1.0:  # may be present at the stage start
                    e = bd.var()
                    self.e[x, t] = e
                    cols.append(e)
                    vals.append(1.0)  # h + e - k ... = 0
                    # e <= k
                    if k_col is not None:
                        bd.row([e, k_col], [1.0, -1.0], -math.inf, 0.0)
                    s = s_prev[x]
                    if not (isinstance(s, float) and s == 1.0):  # a page-out only when no copy is stored
                        o = bd.var(cost=nd.pageout_energy_j)
                        self.o[x, t] = o
                        time_terms.append((o, nd.pageout_time_s * page_t))
                        if k_col is not None:
                            bd.row([o, k_col], [1.0, -1.0], -math.inf, 0.0)
                        if isinstance(s, int):
                            bd.row([o, s], [1.0, 1.0], -math.inf, 1.0)
                loads = []
                s = s_prev[x]
                if not (isinstance(s, float) and s == 0.0):
                    y = bd.var(cost=nd.pagein_energy_j)
                    self.y[x, t] = y
                    loads.append(y)
                    time_terms.append((y, nd.pagein_time_s * page_t))
                    if isinstance(s, int):
                        bd.row([y, s], [1.0, -1.0], -math.inf, 0.0)
                if all(p in k_prev and p < t for p in preds[x]):  # its inputs can be present
                    z = bd.var(cost=nd.compute_energy_j)
                    self.z[x, t] = z
                    loads.append(z)
                    time_terms.append((z, nd.compute_time_s))
                for col in loads:
                    cols.append(col)
                    vals.append(-1.0)
                # h + e - y - z = k
                if k_col is not None:
                    cols.append(k_col)
                    vals.append(-1.0)
                    bd.row(cols, vals, 0.0, 0.0)
                    if loads:  # nothing loaded over a present copy: y + z <= 1 - k
                        bd.row([*loads, k_col], [1.0] * len(loads) + [1.0], -math.inf, 1.0)
                else:
                    bd.row(cols, vals, k, k)
                    if loads and k == 1.0:
                        bd.row(loads, [1.0] * len(loads), 0.0, 0.0)
                if nd.ram_bytes > 0:
                    ram_cols.append(h)
                    ram_vals.append(float(nd.ram_bytes))
            # node t's inputs present; recomputations' inputs present
            for p in preds[t]:
                if (p, t) not in self.h:
                    raise ValueError("input outside the window's tensors")
                bd.row([self.h[p, t]], [1.0], 1.0, 1.0)
            for (x, tt), z in self.z.items():
                if tt == t:
                    for p in preds[x]:
                        bd.row([z, self.h[p, t]], [1.0, -1.0], -math.inf, 0.0)
            fixed = g.fixed_ram_bytes + nodes[t].ram_bytes
            bd.row(ram_cols, ram_vals, -math.inf, float(cap - fixed))
            # the next stage
            for x in xs:
                if x < t:
                    k_prev[x] = self.h[x, t]
                    if (x, t) in self.o:
                        o = self.o[x, t]
                        s = s_prev[x]
                        if isinstance(s, int):
                            ns = bd.var()
                            self.stored[x, t + 1] = ns
                            bd.row([ns, s, o], [1.0, -1.0, -1.0], 0.0, 0.0)
                            s_prev[x] = ns
                        else:
                            s_prev[x] = o
                elif x == t:
                    k_prev[x] = 1.0
        # the end state: exactly the old one
        for x in xs:
            k, s = k_prev[x], s_prev[x]
            want_k, want_s = float(x in res1), float(x in sto1)
            for v, want in ((k, want_k), (s, want_s)):
                if isinstance(v, int):
                    bd.row([v], [1.0], want, want)
                elif v != want:
                    raise ValueError("the window cannot reach its end state")
        if time_room is not None:
            bd.row([c for c, _ in time_terms], [w for _, w in time_terms], -math.inf, time_room)
        self.problem = bd.problem()

    def start(self, old, res0: set[int], sto0: set[int]) -> np.ndarray | None:
        """The window's old steps as a solution of the model (HiGHS's warm start), or None when they are
        not one (a tensor freed and loaded again within a stage, ...)."""
        x_val = np.zeros(self.problem.num_cols)
        res, sto = set(res0), set(sto0)
        i, stage = 0, {}
        for t in range(self.a, self.b):
            start_res = set(res)
            freed, loaded, out = set(), set(), set()
            while True:
                s = old[i]
                i += 1
                if s.op == Op.COMPUTE and s.node == t:
                    break
                if s.op == Op.FREE:
                    res.discard(s.node)
                    freed.add(s.node)
                elif s.op == Op.PAGE_OUT:
                    sto.add(s.node)
                    out.add(s.node)
                else:
                    res.add(s.node)
                    loaded.add((s.node, s.op))
            stage[t] = (start_res, freed, loaded, out, set(res), set(sto))
            res.add(t)
        for (x, t), col in self.h.items():
            x_val[col] = float(x in stage[t][4])
        for (x, t), col in self.e.items():
            x_val[col] = float(x in stage[t][0] and x in stage[t][1])
        for (x, t), col in self.o.items():
            x_val[col] = float(x in stage[t][3])
        for (x, t), col in self.y.items():
            x_val[col] = float((x, Op.PAGE_IN) in stage[t][2])
        for (x, t), col in self.z.items():
            x_val[col] = float((x, Op.COMPUTE) in stage[t][2])
        for (x, t), col in self.stored.items():
            x_val[col] = float(x in stage[t - 1][5])
        return x_val if max_violation(self.problem, x_val) <= 1e-9 else None

    def steps(self, x_val) -> list[Step]:
        """The window's steps from a solution: per stage, frees (after any page-out), page-outs of tensors
        kept, page-ins, recomputations in node order, node t."""
        on = lambda d, key: key in d and x_val[d[key]] > 0.5  # noqa: E731
        out: list[Step] = []
        for t in range(self.a, self.b):
            xs = [x for x in self.xs if x < t]
            for x in xs:
                if on(self.o, (x, t)):
                    out.append(Step(Op.PAGE_OUT, x, t))
                if on(self.e, (x, t)):
                    out.append(Step(Op.FREE, x, t))
            out += [Step(Op.PAGE_IN, x, t) for x in xs if on(self.y, (x, t))]
            out += [Step(Op.COMPUTE, x, t) for x in xs if on(self.z, (x, t))]
            out.append(Step(Op.COMPUTE, t, t))
        return out


class _Cursor:
    """The steps, where each node is first computed, what is resident at each window start, and when each
    tensor is first paged out (a stored copy stays): the state at a window's ends without replaying all."""

    def __init__(self, g: CostedGraph, steps: list[Step], cuts: list[int], starts: list[int]):
        self.g, self.steps, self.cuts = g, steps, cuts
        self.first_out = [math.inf] * len(g.nodes)
        for i, s in enumerate(steps):
            if s.op == Op.PAGE_OUT and self.first_out[s.node] == math.inf:
                self.first_out[s.node] = i
        self.res_at: dict[int, set[int]] = {}
        res: set[int] = set()
        pos = 0
        for a in starts:
            res, pos = self.advance(res, pos, cuts[a - 1]), cuts[a - 1]
            self.res_at[a] = set(res)

    def advance(self, res: set[int], start: int, upto: int) -> set[int]:
        res = set(res)
        for s in self.steps[start:upto]:
            if s.op == Op.COMPUTE or s.op == Op.PAGE_IN:
                res.add(s.node)
            elif s.op == Op.FREE:
                res.discard(s.node)
        return res

    def stored(self, xs, pos: int) -> set[int]:
        return {x for x in xs if self.first_out[x] < pos}

    def replace(self, a: int, b: int, new: list[Step]) -> None:
        """Put ``new`` in place of the window [a, b)'s steps and bring the indexes up to date."""
        lo, hi = self.cuts[a - 1], self.cuts[b - 1]
        shift = len(new) - (hi - lo)
        self.steps[lo:hi] = new
        first = self.first_out
        for x in range(len(first)):
            if lo <= first[x] < hi:
                first[x] = math.inf  # paged out first in the old window: found again below, or later
            elif hi <= first[x] < math.inf:
                first[x] += shift
        for i, s in enumerate(new):
            if s.op == Op.PAGE_OUT and first[s.node] >= lo:
                first[s.node] = min(first[s.node], lo + i)
        for i, s in enumerate(new):
            if s.op == Op.COMPUTE and s.node == s.stage and a <= s.node < b:
                self.cuts[s.node] = lo + i + 1
        for t in range(b, len(self.cuts)):
            self.cuts[t] += shift
        res, pos = None, lo
        for start in sorted(k for k in self.res_at if a < k < b):
            res = self.advance(self.res_at[a] if res is None else res, pos, self.cuts[start - 1])
            pos = self.cuts[start - 1]
            self.res_at[start] = set(res)


def improve_windows(
    g: CostedGraph,
    steps,
    budget: Budget,
    *,
    window: int = 48,
    time_limit: float | None = None,
    window_time_limit: float = 10.0,
    patience: int | None = None,
    stop=None,
    clock=time.perf_counter,
) -> WindowResult:
    """Re-solve windows of ``window`` stages, most expensive first, keeping each one that replays and costs
    less (module docstring); after ``patience`` windows in a row that keep nothing, stop.  ``steps`` must
    be in stage form; the result's steps are too."""
    t0 = clock()
    steps = list(steps)
    n = len(g.nodes)
    if budget.paging_time not in (PAGING_SERIAL, PAGING_HIDDEN):
        return WindowResult(tuple(steps), 0.0, 0, 0, 0.0, "paging model not supported")
    cuts = _cuts(g, steps)
    if cuts is None or n < 2:
        return WindowResult(tuple(steps), 0.0, 0, 0, 0.0, "not in stage form")
    cap = min(ram_cap(budget.ram_bytes), budget.ram_bytes)
    _, total_t = _extra(g, steps, set(range(n)), budget.paging_time)
    slack = None if budget.runtime_s is None else budget.runtime_s - g.plain_runtime_s - total_t
    starts = list(range(1, n, max(1, window // 2)))
    cur = _Cursor(g, steps, cuts, starts)
    spans = []
    for a in starts:
        b = min(n, a + window)
        e, _ = _extra(g, steps[cuts[a - 1] : cuts[b - 1]], set(range(a, b)), budget.paging_time)
        if e > 0:
            spans.append((-e, a, b))
    spans.sort()
    saved, tried, kept, warm, why = 0.0, 0, 0, 0, "all windows tried"
    idle = 0
    for _, a, b in spans:
        if stop is not None and stop():
            why = "asked to stop"
            break
        if patience is not None and idle >= patience:
            why = f"{patience} windows in a row improved nothing"
            break
        left = None if time_limit is None else time_limit - (clock() - t0)
        if left is not None and left < 0.2:
            why = "time limit"
            break
        lo, hi = cur.cuts[a - 1], cur.cuts[b - 1]
        old = cur.steps[lo:hi]
        res0 = cur.res_at[a]
        res1 = cur.advance(res0, lo, hi)
        touched = res0 | res1 | set(range(a, b)) | {p for t in range(a, b) for p in g.preds[t]}
        touched |= {s.node for s in old}
        sto0, sto1 = cur.stored(touched, lo), cur.stored(touched, hi)
        old_e, old_t = _extra(g, old, set(range(a, b)), budget.paging_time)
        room = None if slack is None else old_t + max(0.0, slack)
        tried += 1
        idle += 1
        try:
            model = WindowModel(g, a, b, res0, sto0, res1, sto1, cap, room, budget.paging_time)
        except ValueError:
            continue
        limit = window_time_limit if left is None else max(0.1, min(window_time_limit, left))
        start = model.start(old, res0, sto0)
        warm += start is not None
        r = solve_highs(model.problem, time_limit=limit, threads=1, gap=1e-6, stop=stop, start=start)
        if r.x is None or r.objective is None or r.objective >= old_e * (1 - 1e-9):
            continue
        new = model.steps(r.x)
        end = replay_window(g, new, res0, sto0, cap)
        if end is None or end != (res1, sto1):
            continue
        new_e, new_t = _extra(g, new, set(range(a, b)), budget.paging_time)
        if new_e >= old_e or (slack is not None and new_t - old_t > slack):
            continue
        cur.replace(a, b, new)
        if slack is not None:
            slack -= new_t - old_t
        saved += old_e - new_e
        kept += 1
        idle = 0
    return WindowResult(tuple(cur.steps), saved, tried, kept, clock() - t0, why, warm)
