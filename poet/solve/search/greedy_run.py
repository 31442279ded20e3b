"""One run of a greedy rule: a feasible stage plan from one walk over the stages.

The greedy walks the stages in order.  Stage ``t`` computes node ``t``; every
missing input is paged in (if stored) or recomputed (recursively).  When the
stage's RAM peak, charged exactly as the MILP charges it (the free rule of
:mod:`poet.solve.stage.emit`), exceeds the budget, a tensor charged at the peak
is evicted -- by the rule's order (Belady's furthest next use, or the cheapest
restoration per byte) -- and either paged out or dropped for later
recomputation, whichever costs less energy while the deadline still has room.
:func:`greedy_run` is one such walk; :mod:`poet.solve.search.greedy` runs the rules
and keeps the cheapest plan.
"""

from __future__ import annotations

import math
import time
from collections import Counter

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, Budget
from ..stage.emit import freed_after
from ..stage.plan import Plan, ram_cap


class GreedyFailed(Exception):
    """The run found no plan within the budgets (or ran out of time, or was asked to stop)."""


# How many inputs deep the greedy prices a recomputation (deeper: not worth pricing, never chosen).
RECOMPUTE_DEPTH = 8


def recompute_cost(
    g: CostedGraph, x: int, at: int, present, stored, count_paging: bool = True, stats: dict | None = None
) -> tuple[float, float]:
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


class GreedyOverrun(GreedyFailed):
    """The run's plan is bound to take longer than it may (``give_up_above``)."""


def greedy_run(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    prefer: str = "energy",
    cap_bytes: int | None = None,
    guide: dict[int, str] | None = None,
    guide_once: bool = False,
    stop_at: float | None = None,
    give_up_above: float | None = None,
    stop=None,
    clock=time.perf_counter,
) -> Plan:
    """One walk of rule ``prefer`` (see :func:`poet.solve.search.greedy.greedy_plan` for the arguments);
    ``stop_at``: the time on ``clock`` at which it gives up.  Raises :class:`GreedyFailed` when it finds no
    plan, :class:`GreedyOverrun` once the plan is bound to take more than ``give_up_above`` seconds."""
    guide = guide or {}
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
    dropped: set[int] = set()  # evicted for recomputation
    resident: set[int] = set()  # in RAM after the previous stage
    restored: set[int] = set()  # recomputed or paged in at least once (for guide_once)

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
                raise GreedyFailed
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
        return (stop_at is not None and clock() > stop_at) or (stop is not None and stop())

    for t in range(n):
        if out_of_time():
            raise GreedyFailed
        K = {i for i in resident if md[i] >= t}
        drop_after: set[int] = set()
        paged_now: set[int] = set()  # evicted at this boundary with a page-out in stage t-1
        replan = True  # False: the last eviction left the stage's plan as it was

        def carried() -> set[int]:
            """What stays in RAM into stage t+1 (built afresh: the next stage's candidate order follows it)."""
            return {i for i in (K | C | set(ins)) if md[i] >= t + 1 and i not in drop_after}

        for attempt in range(4 * n + 10):
            # one stage of a dense graph can take thousands of evictions, each replanning a long recomputation
            if attempt and out_of_time():
                raise GreedyFailed
            if replan:
                # --- plan the stage: what to compute / page in
                C: set[int] = {t}
                ins: dict[int, int] = {}

                # every missing input: paged in before its first reader k, or recomputed with its own
                # missing inputs (the result does not depend on the order; no recursion: chains run deep)
                todo = [(p, t) for p in preds[t]]
                while todo:
                    p, k = todo.pop()
                    if p in K or p in C:
                        continue
                    if p in ins:
                        ins[p] = min(ins[p], k)
                        continue
                    if p in stored and paging:
                        ins[p] = k
                        continue
                    if not remat:
                        raise GreedyFailed
                    C.add(p)
                    todo.extend((q, p) for q in preds[p])
                comp = sorted(C)
                keep_next = carried()
                # --- RAM exactly as the MILP charges it (last: stage.emit.last_readers, built with readers)
                last: dict[int, int] = {}
                readers: dict[int, list[int]] = {}  # tensor -> the nodes of comp reading it, ascending
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
                            return set(res)  # a copy, as candidates are taken in its order
                        if cur > peak:
                            peak, kstar = cur, k
                        for i in freed_after(g, k, last, keep_next):  # the emitter's free rule
                            if i in res:
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
                waiting_on = (
                    Counter(p for v in dropped if v not in present and md[v] >= t for p in preds[v])
                    if prefer == "cascade"
                    else Counter()
                )
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
                raise GreedyFailed
            x, kind = best
            needed_later = md[x] >= t + (1 if kind == "drop_after" else 0)
            if needed_later and x not in stored:
                if choose_page(x, closures.get(x)):
                    pe, pt = page_cost(x)
                    if kind == "K":
                        # page out during the previous stage, where x was in RAM
                        if t == 0:
                            raise GreedyFailed
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
            raise GreedyFailed
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
            raise GreedyOverrun
        if guide_once:
            restored.update(ins)
            restored.update(k for k in comp if k != t)
        resident = keep_next
    plan.keep[n] = set()
    tidy(g, plan, md)
    return plan


def tidy(g: CostedGraph, plan: Plan, md: list[int]) -> None:
    """Stop keeping tensors that a stage neither reads, pages out nor carries on (they only cost RAM)."""
    n = plan.n
    for t in range(n - 1, 0, -1):
        read = {p for k in plan.comp[t] for p in g.preds[k]}
        nxt = plan.keep[t + 1] if t + 1 <= n else set()
        for i in list(plan.keep[t]):
            if i not in read and i not in nxt and i not in plan.outs[t]:
                plan.keep[t].discard(i)
