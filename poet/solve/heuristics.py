"""Fast feasible schedules in the MILP's stage form, and cheap valid lower bounds.

A :class:`Plan` is the MILP's decision set written sparsely (per stage: nodes
computed, tensors kept from the previous stage, page-ins by position, page-outs),
so the same emitter turns either a MILP solution or a heuristic plan into steps,
and a plan can be written back into MILP columns as a warm start.

The greedy walks the stages in order.  Stage ``t`` computes node ``t``; every
missing input is paged in (if stored) or recomputed (recursively).  When the
stage's RAM peak, charged exactly as the MILP charges it, exceeds the budget, a
tensor charged at the peak is evicted -- the one whose next use is furthest
away (Belady) -- and either paged out or dropped for later recomputation,
whichever costs less energy while the deadline still has room.  It makes no
optimality claim; its schedules warm-start the MILP and, for graphs too large
for the MILP, are returned with their gap to a valid lower bound.
"""
from __future__ import annotations

import math
import random
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field

from ..graph.core import CostedGraph
from ..schedule.core import PAGING_HIDDEN, PAGING_SERIAL, Budget

# RAM slack kept below the budget so solver tolerances (1e-9 of the budget) can
# never round a schedule over it: 0 bytes below 500 MB, 2 bytes per GB above.
# The MILP and the greedy both charge RAM against this cap.
RAM_MARGIN = 2e-9


def ram_cap(budget_bytes: int) -> int:
    return int(budget_bytes - math.floor(RAM_MARGIN * budget_bytes))

@dataclass
class Plan:
    """Stage decisions.  ``keep[t]``: in RAM at the start of stage t (``keep[0]`` empty);
    ``comp[t]``: computed in stage t (ascending, ends with t); ``ins[t][k]``: paged in right
    before computing k; ``outs[t]``: paged out during stage t."""

    n: int
    comp: list = field(default_factory=list)
    keep: list = field(default_factory=list)
    ins: list = field(default_factory=list)
    outs: list = field(default_factory=list)
    rule: tuple | None = None     # (prefer, guide, budget, guide_once) of the greedy run that made it

    @classmethod
    def empty(cls, n: int) -> "Plan":
        return cls(n, [[] for _ in range(n)], [set() for _ in range(n + 1)], [{} for _ in range(n)],
                   [set() for _ in range(n)])


def plan_costs(g: CostedGraph, plan: Plan, paging_time: str) -> tuple[float, float]:
    """(energy, runtime) of a plan, runtime as the validator counts it except overlap (counted serial)."""
    nd = g.nodes
    e = math.fsum(nd[k].compute_energy_j for c in plan.comp for k in c)
    rt_c = math.fsum(nd[k].compute_time_s for c in plan.comp for k in c)
    e_p, t_p = [], []
    for t in range(plan.n):
        for lst in plan.ins[t].values():
            for i in lst:
                e_p.append(nd[i].pagein_energy_j)
                t_p.append(nd[i].pagein_time_s)
        for i in plan.outs[t]:
            e_p.append(nd[i].pageout_energy_j)
            t_p.append(nd[i].pageout_time_s)
    return e + math.fsum(e_p), rt_c + (0.0 if paging_time == PAGING_HIDDEN else math.fsum(t_p))


def lower_bound_energy(g: CostedGraph, budget: Budget | None = None, *, remat: bool = True,
                       paging: bool = True, time_limit: float = 10.0) -> float:
    """A valid lower bound on the energy of any schedule in the MILP's stage form (see `eviction_cover`)."""
    return eviction_cover(g, budget, remat=remat, paging=paging, time_limit=time_limit)[0]


# Chain links the cover follows from a recomputed tensor when following them all would exceed
# COVER_MAX_LINKS in all (the greedy's recomputations go 8 deep).  A backward pass's gradient
# chains run hundreds deep (560 links on 40 blocks): on 4,818 nodes they made 944k of the ILP's
# columns, 45k at depth 8.  Stopping a chain drops constraints, so the bound stays valid; it was
# the same at depth 8 on every zoo and aten case measured, but the optimal eviction set it
# returns, the guide, can differ, and the rules' plans with it (aten 40 blocks on m4: 1.1385 of
# plain against 1.1157), so chains are cut only where they are that many.
COVER_CHAIN_DEPTH = 8
COVER_MAX_LINKS = 100_000
# The cover stops within this much of the plain energy (or runtime) of optimal: its dual bound
# is still what is used, and proving the last 1e-5 took most of its time (HiGHS had the bound of
# the 4,818-node a72 case at its root, then branched for minutes).
COVER_ABS_GAP = 1e-5


def eviction_cover(g: CostedGraph, budget: Budget | None = None, *, remat: bool = True,
                   paging: bool = True, time_limit: float = 10.0, objective: str = "energy",
                   abs_gap: float = COVER_ABS_GAP, info: dict | None = None) -> tuple[float, dict[int, str]]:
    """A valid lower bound on the energy of any schedule in the MILP's stage form, and the
    evictions that attain it (tensor -> ``"page"`` or ``"remat"``), a guide for the greedy.

    Every node is computed at least once (the plain energy).  Take the moment node
    t is first computed: its inputs and output are in RAM, and every older tensor
    that a node after t reads is in RAM too or absent, to be restored in a later
    stage -- paged in (after one page-out) or recomputed.  The least restoration
    cost over eviction sets that make every such moment fit is a bound.

    Recomputation cascades are priced.  Restoring tensor i by recomputation needs
    its inputs.  An input p whose last reader is i (a BatchNorm output feeding a
    ReLU) is past its use by then: it comes back too (paged in or recomputed, and
    then its own such inputs, recursively; where the chains are very many, up to
    ``COVER_CHAIN_DEPTH`` links deep), or it stayed in RAM since before i was
    first computed -- and then it, or a later link of the chain, sits in RAM at
    every moment i is absent, cancelling (up to) i's bytes there.  Each restoring
    event is charged once: the chain's events for i happen after i's first
    computation and before i's last restoration, so chains of different tensors
    never share one.  A runtime budget caps the extra compute (and, with serial
    paging time, the paging) time.

    It is a small covering ILP (binaries per tensor and per chain link, one row per
    moment); its proven dual bound is used, so a time limit keeps it valid.  It stops once
    within ``abs_gap`` of the plain energy (or runtime) of optimal.

    ``objective="time"`` bounds the runtime instead (the deadline is then not a
    constraint): above the budget's deadline, no schedule meets it.  ``info``, if
    given, receives ``slack_used``: the share of the deadline's slack over plain
    that the returned evictions' restorations take (energy objective, with a
    deadline and a solution).
    """
    plain = g.plain_energy_j
    if budget is None or not (remat or paging):
        return plain, {}
    import numpy as np

    from .backends import MilpProblem, solve_highs

    n, m, nd = len(g.nodes), g.ram, g.nodes
    cap = ram_cap(budget.ram_bytes) - g.fixed_ram_bytes
    last_read = g.last_reader
    # inputs past their last use when their last reader is recomputed
    dead_inputs = [[p for p in sorted(set(g.preds[i])) if last_read[p] == i and m[p] > 0] for i in range(n)]

    # per tensor: x absent at some moment, a paged back in, r recomputed back, o paged out
    X, A, R, O = 0, n, 2 * n, 3 * n
    cost = [0.0] * n + [nd[i].pagein_energy_j for i in range(n)] + \
        [nd[i].compute_energy_j for i in range(n)] + [nd[i].pageout_energy_j for i in range(n)]
    time_of = {A + i: nd[i].pagein_time_s for i in range(n)}
    time_of.update({R + i: nd[i].compute_time_s for i in range(n)})
    time_of.update({O + i: nd[i].pageout_time_s for i in range(n)})
    kind = ["x"] * n + ["page"] * n + ["remat"] * n + ["page"] * n
    rows: list[tuple[dict[int, float], float, float]] = []   # (coefficients, lo, hi)

    def column(c: float, k: str, tm: float) -> int:
        cost.append(c)
        kind.append(k)
        time_of[len(cost) - 1] = tm
        return len(cost) - 1

    chain: dict[int, list[tuple[int, float]]] = {}     # root i -> [(kept column, RAM it cancels)]

    def link(root: int, consumer_rc: int, v: int, budget_bytes: float, depth: int = 1):
        # v must be in RAM when its last reader is recomputed: paged in, recomputed, or kept
        pi = column(nd[v].pagein_energy_j, "page", nd[v].pagein_time_s)
        rho = column(nd[v].compute_energy_j, "remat", nd[v].compute_time_s)
        keep = column(0.0, "keep", 0.0)
        rows.append(({consumer_rc: 1.0, pi: -1.0, rho: -1.0, keep: -1.0}, -math.inf, 0.0))
        rows.append(({pi: 1.0, O + v: -1.0}, -math.inf, 0.0))
        share = min(m[v], budget_bytes)
        chain[root].append((keep, share))
        kids = dead_inputs[v] if depth < max_depth else []
        for q in kids:
            link(root, rho, q, share / len(kids), depth + 1)

    # tight moments: node t's inputs, output and the tensors alive across it (m > 0, read after t)
    # exceed the budget by need; alive is kept incrementally (a tensor enters after its stage and
    # leaves at its last reader), so this is linear in the graph's size
    ends: dict[int, list[int]] = {}
    alive: set[int] = set()
    alive_bytes = 0
    tight: list[int] = []
    needs: list[float] = []
    for t in range(n):
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
    if not needs:
        return (g.plain_runtime_s if objective == "time" else plain), {}
    # tensor i is alive across the tight moments tight[a_i:b_i]; it is credited (may be absent)
    # at those where it is not an input
    is_tight = set(tight)
    span: dict[int, tuple[int, int]] = {}
    for i in range(n):
        if m[i] <= 0 or last_read[i] <= i + 1:
            continue
        a, b = bisect_right(tight, i), bisect_left(tight, last_read[i])
        read_inside = sum(1 for s_ in set(g.succs[i]) if s_ in is_tight and s_ < last_read[i])
        if b - a > read_inside:
            span[i] = (a, b)
    credited = set(span)
    below = [0] * n     # links a chain from v has below v (each tensor has one last reader: a forest)
    for v in range(n):
        below[v] = sum(1 + below[q] for q in dead_inputs[v])
    max_depth = COVER_CHAIN_DEPTH if sum(below[i] for i in credited) > COVER_MAX_LINKS else math.inf
    for i in sorted(credited):
        rows.append(({X + i: 1.0, A + i: -1.0, R + i: -1.0}, -math.inf, 0.0))   # x_i <= a_i + r_i
        rows.append(({A + i: 1.0, O + i: -1.0}, -math.inf, 0.0))                # a page-in needs a page-out
        chain[i] = []
        kids = dead_inputs[i]
        for p in kids:
            link(i, R + i, p, m[i] / len(kids))
    # one row per tight moment: the bytes its alive tensors free (absent, less what their kept
    # chains hold) cover its need
    live_at: list[list[int]] = [[] for _ in tight]
    for i, (a, b) in span.items():
        for k in range(a, b):
            live_at[k].append(i)
    for k, (t, need) in enumerate(zip(tight, needs)):
        inputs = set(g.preds[t])
        live = [i for i in live_at[k] if i not in inputs]
        row = {X + i: m[i] / need for i in live}
        for i in live:
            for keep, share in chain[i]:
                row[keep] = -share / need
        rows.append((row, 1.0, math.inf))
    ncol = len(cost)
    hi = np.ones(ncol)
    kind_a = np.array(kind)
    if not paging:
        hi[kind_a == "page"] = 0
    if not remat:
        hi[kind_a == "remat"] = 0
    # with paging time hidden or overlapped only recomputation surely adds time
    counted = ("remat", "page") if budget.paging_time == PAGING_SERIAL else ("remat",)
    tr = {k: v for k, v in time_of.items() if v > 0 and kind[k] in counted}
    plain_obj = plain
    slack_row = None
    if objective == "time":
        plain_obj = g.plain_runtime_s
        cost = [0.0] * ncol
        for k, v in tr.items():
            cost[k] = v
    elif budget.runtime_s is not None:
        slack = budget.runtime_s * (1 + 1e-6) - g.plain_runtime_s
        if tr and slack > 0:
            scale = max(tr.values())
            rows.append(({k: v / scale for k, v in tr.items()}, -math.inf, slack / scale))
            slack_row = slack
        elif tr:
            for k in tr:
                hi[k] = 0
    starts, index, value = [0], [], []
    for coef, _, _ in rows:
        index += list(coef)
        value += list(coef.values())
        starts.append(len(index))
    unit = plain_obj or 1.0
    p = MilpProblem(c=np.array(cost) / unit, col_lo=np.zeros(ncol), col_hi=hi, integer=np.ones(ncol, bool),
                    starts=np.array(starts), index=np.array(index, dtype=np.int64), value=np.array(value),
                    row_lo=np.array([r[1] for r in rows]), row_hi=np.array([r[2] for r in rows]))
    r = solve_highs(p, time_limit=time_limit, gap=1e-6, options={"mip_abs_gap": abs_gap})
    if r.status == "infeasible":
        return math.inf, {}      # no eviction set fits every moment (within the runtime budget)
    extra = r.bound if r.bound is not None and math.isfinite(r.bound) else 0.0
    extra -= 1e-6 * (1.0 + abs(extra))   # the solver's dual bound is exact only to its tolerances
    guide: dict[int, str] = {}
    if r.x is not None:
        if info is not None and slack_row is not None:
            info["slack_used"] = math.fsum(v * r.x[k] for k, v in tr.items()) / slack_row
        for i in credited:
            if r.x[X + i] > 0.5:
                guide[i] = "page" if r.x[A + i] > 0.5 else "remat"
    return plain_obj + max(0.0, extra) * unit, guide


class _Fail(Exception):
    pass


# How many inputs deep the greedy prices a recomputation (deeper: not worth pricing, never chosen).
RECOMPUTE_DEPTH = 8


def recompute_cost(g: CostedGraph, x: int, at: int, present, stored, count_paging: bool = True,
                   stats: dict | None = None) -> tuple[float, float]:
    """Energy and time the greedy charges for recomputing ``x`` at stage ``at``: x, and every input then
    gone (absent from ``present`` or of no use past ``at``), paged in if in ``stored``, else recomputed in
    turn, up to ``RECOMPUTE_DEPTH`` inputs deep (``inf`` beyond).

    An input is charged once per path that reaches it, as a recursion would; the values are memoised
    per (node, depth), so the work is at most ``RECOMPUTE_DEPTH + 1`` visits per node and edge, not
    exponential in the in-degree (a dense 1,000-node DAG made the plain recursion run for hours).
    ``stats``, if given, receives ``visits``: the nodes evaluated.
    """
    nd, preds, md = g.nodes, g.preds, g.last_useful_stage
    memo: dict[tuple[int, int], tuple[float, float]] = {}
    visits = 0
    # iterative post-order over (node, depth): a chain 8 deep is no concern, but no recursion at all is simpler
    stack = [(x, 0, False)]
    while stack:
        v, depth, expanded = stack.pop()
        if (v, depth) in memo:
            continue
        gone = [p for p in preds[v] if not (p in present and md[p] >= at) and p not in stored]
        if not expanded:
            if gone and depth >= RECOMPUTE_DEPTH:
                memo[(v, depth)] = (math.inf, math.inf)
                continue
            stack.append((v, depth, True))
            stack.extend((p, depth + 1, False) for p in gone if (p, depth + 1) not in memo)
            continue
        visits += 1
        e, tt = nd[v].compute_energy_j, nd[v].compute_time_s
        for p in preds[v]:
            if p in present and md[p] >= at:
                continue
            if p in stored:
                e += nd[p].pagein_energy_j
                tt += nd[p].pagein_time_s if count_paging else 0.0
            else:
                pe_, pt_ = memo[(p, depth + 1)]
                e, tt = e + pe_, tt + pt_
        memo[(v, depth)] = (e, tt)
    if stats is not None:
        stats["visits"] = stats.get("visits", 0) + visits
    return memo[(x, 0)]


class _Overrun(_Fail):
    """The run's plan is bound to take longer than it may (``give_up_above``)."""


def greedy_plan(g: CostedGraph, budget: Budget, *, remat: bool = True, paging: bool = True,
                prefer: str = "energy", cap_bytes: int | None = None,
                guide: dict[int, str] | None = None, guide_once: bool = False,
                time_limit: float | None = None, give_up_above: float | None = None, stop=None) -> Plan | None:
    """A feasible plan, or None when this rule cannot find one within the budgets (or within
    ``time_limit`` seconds, or once ``stop()`` is true, or once the plan is bound to take more than
    ``give_up_above`` seconds to run).

    prefer: ``energy`` (page or drop, whichever is cheaper while time allows),
    ``page`` (page whenever time allows), ``remat`` (drop whenever time allows),
    ``closure`` (evict the cheapest restoration per byte and squared distance to the
    next use) or ``cascade`` (``closure``, with a tensor's restoration counted once
    more for every dropped tensor still waiting to be recomputed from it).
    guide: tensors to evict first and how to restore them (``eviction_cover``'s
    choice: ``"page"`` or ``"remat"``), or to evict last (``"keep"``); the others
    follow the rule.  guide_once: a tensor listed for eviction loses that priority once it
    has been restored (recomputed or paged in), so a recomputed chain can stay for its
    next readers instead of being evicted first again.
    """
    stop_at = None if time_limit is None else time.perf_counter() + time_limit
    try:
        return _greedy(g, budget, remat, paging, prefer, cap_bytes, guide or {}, guide_once, stop_at,
                       give_up_above, stop)
    except _Fail:
        return None


def _greedy(g, budget, remat, paging, prefer, cap_bytes, guide, guide_once=False, stop_at=None,
            give_up_above=None, stop=None):
    n = len(g.nodes)
    nd = g.nodes
    preds, succs = g.preds, g.succs
    mem = g.ram
    md = g.last_useful_stage
    cap = ram_cap(budget.ram_bytes) if cap_bytes is None else cap_bytes
    fixed = g.fixed_ram_bytes
    count_paging = budget.paging_time != PAGING_HIDDEN
    deadline = budget.runtime_s if budget.runtime_s is not None else math.inf
    # runtime committed so far: every node once, plus extra work decided on the way
    rt = g.plain_runtime_s
    # page-out time of copies not yet paged in: drop_unread_pageouts may remove those, so only
    # rt - unread is sure to be spent (it never decreases)
    unread, unread_t = set(), 0.0
    give_up = math.inf if give_up_above is None else give_up_above
    plan = Plan.empty(n)
    stored: set[int] = set()
    dropped: set[int] = set()    # evicted for recomputation
    resident: set[int] = set()   # in RAM after the previous stage
    restored: set[int] = set()   # recomputed or paged in at least once (for guide_once)

    def rank(x: int) -> int:
        """Eviction priority from the guide: listed for eviction first, ``keep`` last."""
        kind = guide.get(x)
        if kind is None or (guide_once and kind != "keep" and x in restored):
            return 1
        return 0 if kind == "keep" else 2

    def next_use(x: int, after: int) -> int:
        for s in succs[x]:
            if s > after:
                return s
        return n + 1

    def page_cost(x):
        e = nd[x].pagein_energy_j + (0.0 if x in stored else nd[x].pageout_energy_j)
        tt = nd[x].pagein_time_s + (0.0 if x in stored else nd[x].pageout_time_s)
        return e, (tt if count_paging else 0.0)

    def remat_cost(x: int, at: int, present: set[int]) -> tuple[float, float]:
        return recompute_cost(g, x, at, present, stored if paging else (), count_paging)

    def choose_page(x, closure=None) -> bool:
        """Evicting x (still needed later): page it (True) or drop it for recomputation (False)."""
        if x in stored:
            return True
        if not paging:
            if not remat:
                raise _Fail
            return False
        if not remat:
            return True
        if guide.get(x) in ("page", "remat"):
            return guide[x] == "page"
        pe, pt = page_cost(x)
        re_, rtime = closure if closure is not None else (nd[x].compute_energy_j, nd[x].compute_time_s)
        fits_p, fits_r = rt + pt <= deadline, rt + rtime <= deadline
        if prefer == "page":
            want = fits_p or not fits_r
        elif prefer == "remat":
            want = not fits_r and (fits_p or pt < rtime)
        else:
            if fits_p and fits_r:
                want = pe <= re_
            else:
                want = fits_p or (not fits_r and pt < rtime)
        return want

    def out_of_time() -> bool:
        return (stop_at is not None and time.perf_counter() > stop_at) or (stop is not None and stop())

    for t in range(n):
        if out_of_time():
            raise _Fail
        K = {i for i in resident if md[i] >= t}
        drop_after: set[int] = set()
        paged_now: set[int] = set()    # evicted at this boundary with a page-out in stage t-1
        replan = True   # False: the last eviction left the stage's plan as it was

        def carried() -> set[int]:
            """What stays in RAM into stage t+1 (built afresh: the next stage's candidate order follows it)."""
            return {i for i in (K | C | set(ins)) if md[i] >= t + 1 and i not in drop_after}

        for attempt in range(4 * n + 10):
            # one stage of a dense graph can take thousands of evictions, each replanning a long recomputation
            if attempt and out_of_time():
                raise _Fail
            if replan:
                # --- plan the stage: what to compute / page in
                C: set[int] = {t}
                ins: dict[int, int] = {}

                def avail(p, k):
                    if p in K or p in C:
                        return
                    if p in ins:
                        ins[p] = min(ins[p], k)
                        return
                    if p in stored and paging:
                        ins[p] = k
                        return
                    if not remat:
                        raise _Fail
                    C.add(p)
                    for q in preds[p]:
                        avail(q, p)

                for p in preds[t]:
                    avail(p, t)
                comp = sorted(C)
                keep_next = carried()
                # --- RAM exactly as the MILP charges it
                last: dict[int, int] = {}
                readers: dict[int, list[int]] = {}    # tensor -> the nodes of comp reading it, ascending
                for k in comp:
                    for p in preds[k]:
                        last[p] = k
                        readers.setdefault(p, []).append(k)
                arr: dict[int, list[int]] = {}
                for i, k in ins.items():
                    arr.setdefault(k, []).append(i)
                def replay(until: int = -1):
                    """The stage's RAM peak and where it is; with ``until``, what is resident there."""
                    cur = fixed + sum(mem[i] for i in K)
                    res = set(K)
                    peak, kstar = -1, -1
                    for k in comp:
                        for i in arr.get(k, ()):
                            cur += mem[i]
                            res.add(i)
                        cur += mem[k]
                        res.add(k)
                        if k == until:
                            return set(res)     # a copy, as candidates are taken in its order
                        if cur > peak:
                            peak, kstar = cur, k
                        for i in (*preds[k], k):
                            if i in res and i not in keep_next and last.get(i, -1) <= k:
                                res.discard(i)
                                cur -= mem[i]
                    return peak, kstar

                # (a stage that recomputes a long chain computes thousands of nodes: the resident set
                # is rebuilt once, at the peak, not copied at every new high)
                peak, kstar = replay()
                if peak <= cap:
                    break
                snap = replay(kstar)
            # --- evict one tensor charged at the peak
            pinned = set(preds[kstar]) | {kstar}
            best, best_key = None, None
            present = K | C | set(ins)
            closures: dict[int, tuple[float, float]] = {}
            # the guide's rank comes first in every key: only the highest rank with a candidate can win
            by_rank: dict[int, list[int]] = {}
            for x in snap:
                if x not in pinned and mem[x] > 0:
                    by_rank.setdefault(rank(x), []).append(x)
            cands = []
            for r in sorted(by_rank, reverse=True):
                for x in by_rank[r]:
                    rd = readers.get(x, ())
                    read_after = [k for k in rd if k > kstar]
                    if x in K and not (rd and rd[0] <= kstar):
                        cands.append((x, "K", read_after[0] if read_after else next_use(x, t)))
                    elif x in keep_next and not read_after:
                        cands.append((x, "drop_after", next_use(x, t)))
                if cands:
                    break
            if prefer in ("closure", "cascade"):
                # cheapest restoration per byte, weighed by the square of the time until the next
                # use (a cost-aware Belady; the square measured best on the zoo and aten graphs).
                # Ties go to the first candidate.  A closure costs at least x's own compute, so
                # candidates are tried best-first by that optimistic key, and the search stops
                # once no optimistic key can beat the best exact one.  A tensor that dropped
                # tensors still awaiting recomputation read (a ResNet block's input, needed to
                # recompute the block's output) costs one restoration more per such reader:
                # evicting it turns their recomputations into cascades.
                scored = []
                waiting_on = Counter(p for v in dropped if v not in present and md[v] >= t for p in preds[v]) \
                    if prefer == "cascade" else Counter()
                for pos, (x, kind, nu) in enumerate(cands):
                    pe = page_cost(x)[0] if paging else math.inf
                    scale = mem[x] * max(1, nu - t) ** 2 / (1 + waiting_on[x])
                    optimistic = min(nd[x].compute_energy_j if remat else math.inf, pe)
                    scored.append(((-optimistic / scale, nu, -pos), x, kind, nu, pe, scale))
                scored.sort(reverse=True)
                for opt_key, x, kind, nu, pe, scale in scored:
                    if best_key is not None and opt_key <= best_key:
                        break
                    closures[x] = remat_cost(x, nu, present) if remat else (math.inf, math.inf)
                    key = (-min(closures[x][0], pe) / scale, nu, opt_key[2])
                    if best_key is None or key > best_key:
                        best, best_key = (x, kind), key
            else:
                for x, kind, nu in cands:
                    key = (nu, mem[x])
                    if best_key is None or key > best_key:
                        best, best_key = (x, kind), key
            if best is None:
                raise _Fail
            x, kind = best
            needed_later = md[x] >= t + (1 if kind == "drop_after" else 0)
            if needed_later and x not in stored:
                if choose_page(x, closures.get(x)):
                    pe, pt = page_cost(x)
                    if kind == "K":
                        # page out during the previous stage, where x was in RAM
                        if t == 0:
                            raise _Fail
                        plan.outs[t - 1].add(x)
                        paged_now.add(x)
                    else:
                        plan.outs[t].add(x)
                    stored.add(x)
                    if count_paging:
                        rt += nd[x].pageout_time_s
                        unread.add(x)
                        unread_t += nd[x].pageout_time_s
            if x not in stored:
                dropped.add(x)
            if kind == "K":
                K.discard(x)
                # x read by no node of the stage: what the stage computes and pages in stays as it was,
                # and x's bytes leave every position, so the peak stays where it was, that much lower
                replan = x in readers
                if not replan:
                    keep_next.discard(x)
                    peak -= mem[x]
                    if peak <= cap:
                        keep_next = carried()
                        break
                    snap = replay(kstar)
            else:
                drop_after.add(x)
                replan = True
        else:
            raise _Fail
        # --- commit the stage
        plan.keep[t] = set(K)
        plan.comp[t] = comp
        for i, k in ins.items():
            plan.ins[t].setdefault(k, []).append(i)
            if count_paging:
                rt += nd[i].pagein_time_s
                if i in unread:
                    unread.discard(i)
                    unread_t -= nd[i].pageout_time_s
        for k in comp:
            if k != t:
                rt += nd[k].compute_time_s
        if rt - unread_t > give_up:
            raise _Overrun
        if guide_once:
            restored.update(ins)
            restored.update(k for k in comp if k != t)
        resident = keep_next
    plan.keep[n] = set()
    _tidy(g, plan, md)
    return plan


def _tidy(g: CostedGraph, plan: Plan, md: list[int]) -> None:
    """Stop keeping tensors that a stage neither reads, pages out nor carries on (they only cost RAM)."""
    n = plan.n
    for t in range(n - 1, 0, -1):
        read = {p for k in plan.comp[t] for p in g.preds[k]}
        nxt = plan.keep[t + 1] if t + 1 <= n else set()
        for i in list(plan.keep[t]):
            if i not in read and i not in nxt and i not in plan.outs[t]:
                plan.keep[t].discard(i)


def drop_unread_pageouts(plan: Plan) -> Plan:
    """Remove page-outs that no later page-in reads (in place).

    The greedy pages a tensor out when it evicts it, before knowing whether it
    will be recomputed instead; such a copy costs write energy and time and
    changes nothing else, since a page-out does not free RAM.
    """
    read_after: dict[int, int] = {}   # tensor -> last stage that pages it in
    for t in range(plan.n):
        for lst in plan.ins[t].values():
            for i in lst:
                read_after[i] = t
    for t in range(plan.n):
        plan.outs[t] = {i for i in plan.outs[t] if read_after.get(i, -1) >= t}
    return plan


def _replays(g: CostedGraph, plan: Plan, budget: Budget) -> bool:
    from ..schedule.validate import ScheduleError, simulate
    from .api import SolveError
    from .milp import emit
    try:
        simulate(g, emit(g, plan), budget)
    except (ScheduleError, SolveError):
        return False
    return True


def best_greedy(g: CostedGraph, budget: Budget, *, remat: bool = True, paging: bool = True,
                cap_bytes: int | None = None, exhaustive_up_to: int = 400,
                guide: dict[int, str] | None = None, per_rule: list | None = None,
                closest: list | None = None, rules: list | None = None,
                time_limit: float | None = None, stop=None) -> Plan | None:
    """The cheapest feasible plan among the greedy's eviction rules (None if none is feasible).

    The greedy's running time estimate can undershoot (recomputation chains), so
    rules that overrun the deadline are retried against a stricter internal one;
    up to ``exhaustive_up_to`` nodes every internal deadline is tried (a tighter
    one sometimes steers the rule to a cheaper plan).  With a ``guide`` (the
    eviction cover's choice) the guided rule is tried as well, with and without
    ``guide_once``.  ``per_rule``, if given, receives the cheapest feasible plan
    of every rule; ``closest``, if given and no rule meets the deadline, the plan
    that overruns it least.  ``rules``: the (prefer, guide, guide_once) runs to
    try instead of these.  ``time_limit``: the runs stop after that many seconds, a run in
    progress included (one run takes about 0.4 s on 1,600 nodes, but 10 s to minutes on 5,000
    and on dense 1,000-node DAGs); what was found by then is returned.  Once a run has made a
    plan but none meets the deadline they stop after half of it: rules that keep overrunning
    leave the rest to the deadline's guides.  ``stop``: polled during the runs; once it is true
    the run in progress ends and no other starts.
    """
    t0 = time.perf_counter()
    best, best_e, made = None, math.inf, False
    if rules is None:
        rules = [(p, None, False) for p in rule_names(remat, paging)]
        if guide:
            rules += [("energy", guide, False), ("energy", guide, True)]
            ck = checkpointed(g, guide)
            if ck:
                rules.append(("energy", ck, False))
    over: list = []     # [runtime, plan] of the plan overrunning the deadline least
    for pref, gd, once in rules:
        rule_best, rule_e = None, math.inf
        for shrink in (1.0, 0.75, 0.5, 0.25, 0.0):
            met = best is not None or rule_best is not None     # a plan within the deadline exists
            left = None
            if time_limit is not None:
                # until some run has made a plan, the runs may take all of the time limit
                left = (time_limit if met or not made else 0.5 * time_limit) - (time.perf_counter() - t0)
            if (left is not None and left < 0) or (stop is not None and stop()):
                break
            b = budget
            if budget.runtime_s is not None and shrink < 1.0:
                slack = max(0.0, budget.runtime_s - g.plain_runtime_s)
                b = Budget(budget.ram_bytes, g.plain_runtime_s + shrink * slack, budget.paging_time)
            # a run bound to overrun the deadline is given up as soon as that is certain, unless its plan
            # may yet be the nearest miss: it would be discarded (the same plans, sooner)
            give_up = None
            if budget.runtime_s is not None:
                if closest is None or met:
                    give_up = budget.runtime_s * (1 + 1e-7)
                elif over:
                    give_up = max(budget.runtime_s, over[0]) * (1 + 1e-7)
            try:
                p = _greedy(g, b, remat, paging, pref, cap_bytes, gd or {}, once,
                            None if left is None else time.perf_counter() + left, give_up, stop)
            except _Overrun:
                made = True
                continue
            except _Fail:
                break
            made = True
            drop_unread_pageouts(p)
            e, rt = plan_costs(g, p, budget.paging_time)
            p.rule = (pref, gd or {}, b, once)
            if budget.runtime_s is not None and rt > budget.runtime_s * (1 + 1e-9):
                if closest is not None and (not over or rt < over[0]) and _replays(g, p, _ram_only(budget)):
                    over[:] = [rt, p]
                continue
            if not _replays(g, p, budget):
                continue   # a rule's plan the emitter or validator refuses is skipped, never returned
            if e < rule_e:
                rule_best, rule_e = p, e
            if len(g.nodes) > exhaustive_up_to:
                break   # large graphs: first feasible deadline per rule
        if rule_best is not None:
            if per_rule is not None:
                per_rule.append(rule_best)
            if rule_e < best_e:
                best, best_e = rule_best, rule_e
    if best is None and over and closest is not None:
        closest.append(over[1])
    return best


def checkpointed(g: CostedGraph, guide: dict[int, str], every: int = 3) -> dict[int, str]:
    """The guide with every ``every``-th chain link kept (set to ``keep``), or {} when it has none.

    A chain link is a tensor the guide recomputes that another recomputed tensor needs as a live
    input, and whose own recomputation needs one: a ResNet block output, which recomputing the
    next block's output needs.  With every link dropped, each recomputation in the backward pass
    runs back through all earlier blocks; keeping every k-th one bounds that chain, as
    checkpointing does.
    """
    def live_remat_inputs(v: int) -> set[int]:
        out, stack, seen = set(), [v], set()
        while stack:
            u = stack.pop()
            for p in g.preds[u]:
                if p in seen:
                    continue
                seen.add(p)
                if g.last_reader[p] == u and g.ram[p] > 0:
                    stack.append(p)          # past its use: recomputed along with u
                elif guide.get(p) == "remat":
                    out.add(p)
        return out
    needs = {v: live_remat_inputs(v) for v, k in guide.items() if k == "remat"}
    links = sorted({p for ins in needs.values() for p in ins if needs.get(p)})
    if not links:
        return {}
    return {**guide, **{v: "keep" for v in links[every - 1::every]}}


def rule_names(remat: bool = True, paging: bool = True) -> list[str]:
    """The greedy's rules that apply when both (or only one) of recomputation and paging are allowed."""
    return ["energy", "page", "remat", "closure", "cascade"] if (remat and paging) else ["energy", "closure", "cascade"]


def _ram_only(budget: Budget) -> Budget:
    return Budget(budget.ram_bytes, None, budget.paging_time)


def search_guides(g: CostedGraph, budget: Budget, plan: Plan, *, remat: bool = True, paging: bool = True,
                  target_energy: float = 0.0, time_limit: float = 10.0, patience: int | None = None,
                  seed: int = 0, stop=None) -> Plan:
    """Improve a greedy plan by local search over its guide; the best plan found (``plan`` if none).

    A plan over the deadline is first brought under it (least overrun first), then
    made cheaper.  A move adds a tensor to the guide (to be evicted first, paged or
    recomputed, or evicted last: ``keep``), drops one, changes one's kind, or swaps
    one for another; the rule that made ``plan`` re-runs with the new guide, and a cheaper
    plan within the budgets is kept.  It stops at ``target_energy`` (a plan that
    cheap is proven good enough), after ``time_limit`` seconds, or after
    ``patience`` moves in a row without gain.  The search is seeded, so a run is
    repeatable for a given number of moves; its result is replayed by the
    validator before it is returned.
    """
    search = GuideSearch(g, budget, plan, remat=remat, paging=paging, target_energy=target_energy, seed=seed)
    return search.run(time_limit, patience, stop=stop)


class GuideSearch:
    """The local search of :func:`search_guides`, resumable: ``run`` continues where the last call
    stopped, so a search can be given more patience later without repeating its moves."""

    def __init__(self, g: CostedGraph, budget: Budget, plan: Plan, *, remat: bool = True, paging: bool = True,
                 target_energy: float = 0.0, seed: int = 0):
        self.g, self.budget, self.remat, self.paging = g, budget, remat, paging
        self.target = target_energy
        self.best = plan
        self.cands = [v for v in range(len(g.nodes)) if g.ram[v] > 0 and g.last_reader[v] > v + 1]
        self.kinds = [k for k, ok in (("remat", remat), ("page", paging)) if ok] + ["keep"]
        self.deadline = budget.runtime_s if budget.runtime_s is not None else math.inf
        self.patience = max(1000, 10 * len(self.cands))    # moves without gain before it stops
        self.kick = max(100, len(self.cands))
        self.rnd = random.Random(seed)
        self.idle = self.stuck = 0
        self.best_key = self._key(plan)
        self.best_guide = dict(plan.rule[1]) if plan.rule is not None else {}
        self.cur_guide, self.cur_key = self.best_guide, self.best_key    # the best, or a kick away from it

    def _key(self, p: Plan) -> tuple[float, float]:
        e, rt = plan_costs(self.g, p, self.budget.paging_time)
        return max(0.0, rt - self.deadline * (1 + 1e-9)), e

    @staticmethod
    def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] < b[0] * (1 - 1e-9) if b[0] > 0 else (a[0] == 0 and a[1] < b[1] * (1 - 1e-12))

    def _moved(self, gd: dict[int, str]) -> dict[int, str]:
        rnd, kinds = self.rnd, self.kinds
        gd = dict(gd)
        v = rnd.choice(self.cands)
        move = rnd.random()
        if gd and move < 0.4:
            del gd[rnd.choice(sorted(gd))]
            gd.setdefault(v, rnd.choice(kinds))
        elif v in gd:
            if move < 0.7:
                del gd[v]
            else:
                gd[v] = rnd.choice([k for k in kinds if k != gd[v]])
        else:
            gd[v] = rnd.choice(kinds)
        return gd

    def __getstate__(self) -> dict:
        # sent to a worker process without the graph, which the worker already holds
        return {k: v for k, v in self.__dict__.items() if k != "g"}

    @property
    def reached(self) -> bool:
        """A plan within the deadline and at or below the target energy was found."""
        return self.best.rule is not None and self.best_key[0] == 0 and self.best_key[1] <= self.target

    @property
    def done(self) -> bool:
        """Nothing left to search, or the target is reached."""
        return self.best.rule is None or not self.cands or self.reached

    def run(self, time_limit: float, patience: int | None = None, stop=None) -> Plan:
        """Search until ``patience`` moves in a row (counted across calls) bring no gain, or for
        ``time_limit`` seconds, or until the target is reached (or ``stop()`` is true); the best
        plan so far."""
        if self.done:
            return self.best
        g = self.g
        prefer, _, rule_budget, once = self.best.rule
        patience = patience if patience is not None else self.patience
        t0 = time.perf_counter()
        while not self.done and self.idle < patience and time.perf_counter() - t0 < time_limit \
                and not (stop is not None and stop()):
            self.idle += 1
            self.stuck += 1
            if self.stuck > self.kick:
                # no gain around the current point for a while: restart a few random moves from the best
                self.cur_guide, self.cur_key, self.stuck = self.best_guide, (math.inf, math.inf), 0
                for _ in range(3):
                    self.cur_guide = self._moved(self.cur_guide)
            gd = self._moved(self.cur_guide)
            p = greedy_plan(g, rule_budget, remat=self.remat, paging=self.paging, prefer=prefer, guide=gd,
                            guide_once=once, time_limit=time_limit - (time.perf_counter() - t0))
            if p is None:
                continue
            drop_unread_pageouts(p)
            k = self._key(p)
            if not self._better(k, self.cur_key):
                continue
            self.cur_guide, self.cur_key, self.stuck = gd, k, 0
            if self._better(k, self.best_key) and \
                    _replays(g, p, self.budget if k[0] == 0 else _ram_only(self.budget)):
                p.rule = (prefer, gd, rule_budget, once)
                self.best, self.best_guide, self.best_key, self.idle = p, gd, k, 0
        return self.best
