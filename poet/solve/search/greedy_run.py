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
from ..stage.plan import GuideKind, Plan, ram_cap


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
    walk = Walk(
        g,
        budget,
        remat=remat,
        paging=paging,
        prefer=prefer,
        cap_bytes=cap_bytes,
        guide=guide or {},
        guide_once=guide_once,
        stop_at=stop_at,
        give_up_above=give_up_above,
        stop=stop,
        clock=clock,
    )
    for t in range(walk.n):
        if walk.out_of_time():
            raise GreedyFailed
        stage = Stage(walk, t)
        stage.fit()
        walk.commit(stage)
    walk.plan.keep[walk.n] = set()
    tidy(g, walk.plan, walk.md)
    return walk.plan


# How an eviction candidate is held at the stage's peak: carried into the stage from the one before
# (it leaves RAM at the stage's start), or computed or paged in by the stage and read by none of its
# nodes after the peak (it is not carried on into the next stage)
CARRIED = "carried"
NOT_CARRIED_ON = "not carried on"


class Walk:
    """What one run knows across its stages: the plan so far, what is on storage, what was dropped
    for recomputation, what stays in RAM into the next stage, and the runtime committed.  Its methods
    are the rule's decisions (which tensor ranks first, page or recompute) and the commit of a stage."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        *,
        remat: bool,
        paging: bool,
        prefer: str,
        cap_bytes: int | None,
        guide: dict[int, str],
        guide_once: bool,
        stop_at: float | None,
        give_up_above: float | None,
        stop,
        clock,
    ):
        self.g, self.n = g, len(g.nodes)
        self.nd, self.preds, self.succs, self.mem, self.md = g.nodes, g.preds, g.succs, g.ram, g.last_useful_stage
        self.remat, self.paging, self.prefer = remat, paging, prefer
        self.guide, self.guide_once = guide, guide_once
        self.cap = ram_cap(budget.ram_bytes) if cap_bytes is None else cap_bytes
        self.fixed = g.fixed_ram_bytes
        self.count_paging = budget.paging_time != PAGING_HIDDEN
        self.deadline = budget.runtime_s if budget.runtime_s is not None else math.inf
        self.give_up = math.inf if give_up_above is None else give_up_above
        self.stop_at, self.stop, self.clock = stop_at, stop, clock
        # runtime committed so far: every node once, plus extra work decided on the way
        self.rt = g.plain_runtime_s
        # page-out time of copies not yet paged in: drop_unread_pageouts may remove those, so only
        # rt - unread_t is sure to be spent (it never decreases)
        self.unread: set[int] = set()
        self.unread_t = 0.0
        self.plan = Plan.empty(self.n)
        self.stored: set[int] = set()
        self.dropped: set[int] = set()  # evicted for recomputation
        self.resident: set[int] = set()  # in RAM after the previous stage
        self.restored: set[int] = set()  # recomputed or paged in at least once (for guide_once)

    def out_of_time(self) -> bool:
        return (self.stop_at is not None and self.clock() > self.stop_at) or (self.stop is not None and self.stop())

    def rank(self, x: int) -> int:
        """Eviction priority from the guide: listed for eviction first, ``keep`` last."""
        kind = self.guide.get(x)
        if kind is None or (self.guide_once and kind != GuideKind.KEEP and x in self.restored):
            return 1
        return 0 if kind == GuideKind.KEEP else 2

    def next_use(self, x: int, after: int) -> int:
        for s in self.succs[x]:
            if s > after:
                return s
        return self.n + 1

    def page_cost(self, x: int) -> tuple[float, float]:
        nd, stored = self.nd[x], x in self.stored
        e = nd.pagein_energy_j + (0.0 if stored else nd.pageout_energy_j)
        tt = nd.pagein_time_s + (0.0 if stored else nd.pageout_time_s)
        return e, (tt if self.count_paging else 0.0)

    def remat_cost(self, x: int, at: int, present: set[int]) -> tuple[float, float]:
        return recompute_cost(self.g, x, at, present, self.stored if self.paging else (), self.count_paging)

    def choose_page(self, x: int, closure: tuple[float, float] | None) -> bool:
        """Evicting x (still needed later): page it (True) or drop it for recomputation (False)."""
        if x in self.stored:
            return True
        if not self.paging:
            if not self.remat:
                raise GreedyFailed
            return False
        if not self.remat:
            return True
        if self.guide.get(x) in (GuideKind.PAGE, GuideKind.REMAT):
            return self.guide[x] == GuideKind.PAGE
        pe, pt = self.page_cost(x)
        re_, rtime = closure if closure is not None else (self.nd[x].compute_energy_j, self.nd[x].compute_time_s)
        fits_p, fits_r = self.rt + pt <= self.deadline, self.rt + rtime <= self.deadline
        if self.prefer == "page":
            return fits_p or not fits_r
        if self.prefer == "remat":
            return not fits_r and (fits_p or pt < rtime)
        if fits_p and fits_r:
            return pe <= re_
        return fits_p or (not fits_r and pt < rtime)

    def evict(self, x: int, how: str, t: int, closure: tuple[float, float] | None) -> None:
        """Take x out of RAM in stage t: paged out first (in the stage before, if it was carried into t)
        when the rule says so and it is needed later and not on storage yet, else dropped."""
        needed_later = self.md[x] >= t + (1 if how == NOT_CARRIED_ON else 0)
        if needed_later and x not in self.stored and self.choose_page(x, closure):
            if how == CARRIED:
                if t == 0:
                    raise GreedyFailed
                self.plan.outs[t - 1].add(x)  # page out during the previous stage, where x was in RAM
            else:
                self.plan.outs[t].add(x)
            self.stored.add(x)
            if self.count_paging:
                self.rt += self.nd[x].pageout_time_s
                self.unread.add(x)
                self.unread_t += self.nd[x].pageout_time_s
        if x not in self.stored:
            self.dropped.add(x)

    def commit(self, stage: Stage) -> None:
        """Write a stage that fits into the plan and count its extra runtime; give up once bound to overrun."""
        t, nd = stage.t, self.nd
        self.plan.keep[t] = set(stage.K)
        self.plan.comp[t] = stage.comp
        for i, k in stage.ins.items():
            self.plan.ins[t].setdefault(k, []).append(i)
            if self.count_paging:
                self.rt += nd[i].pagein_time_s
                if i in self.unread:
                    self.unread.discard(i)
                    self.unread_t -= nd[i].pageout_time_s
        for k in stage.comp:
            if k != t:
                self.rt += nd[k].compute_time_s
        if self.rt - self.unread_t > self.give_up:
            raise GreedyOverrun
        if self.guide_once:
            self.restored.update(stage.ins)
            self.restored.update(k for k in stage.comp if k != t)
        self.resident = stage.keep_next


class Stage:
    """One stage being fitted: what it keeps from the last stage (``K``), computes (``C``, ``comp``) and
    pages in (``ins``: tensor -> the first node reading it), what it carries on (``keep_next``), and its
    RAM peak, charged exactly as the MILP charges it (the free rule of :mod:`poet.solve.stage.emit`)."""

    def __init__(self, walk: Walk, t: int):
        self.walk, self.t = walk, t
        self.K = {i for i in walk.resident if walk.md[i] >= t}
        self.drop_after: set[int] = set()  # read by the stage, then dropped instead of carried on

    def fit(self) -> None:
        """Evict one tensor at the peak at a time until the stage fits (raises GreedyFailed if it cannot)."""
        walk, mem = self.walk, self.walk.mem
        replan = True  # False: the last eviction left the stage's plan as it was
        # one stage of a dense graph can take thousands of evictions, each replanning a long recomputation
        for attempt in range(4 * walk.n + 10):
            if attempt and walk.out_of_time():
                raise GreedyFailed
            if replan:
                self.plan()
                self.peak, self.kstar = self.replay()
                if self.peak <= walk.cap:
                    return
                self.snap = self.replay(self.kstar)
            x, how, closure = self.pick()
            walk.evict(x, how, self.t, closure)
            if how == NOT_CARRIED_ON:
                self.drop_after.add(x)
                replan = True
                continue
            self.K.discard(x)
            # x read by no node of the stage: what the stage computes and pages in stays as it was, and
            # x's bytes leave every position, so the peak stays where it was, that much lower
            replan = x in self.readers
            if not replan:
                self.keep_next.discard(x)
                self.peak -= mem[x]
                if self.peak <= walk.cap:
                    self.keep_next = self.carried()
                    return
                self.snap = self.replay(self.kstar)
        raise GreedyFailed

    def carried(self) -> set[int]:
        """What stays in RAM into stage t+1 (built afresh: the next stage's candidate order follows it)."""
        md, t = self.walk.md, self.t
        return {i for i in (self.K | self.C | set(self.ins)) if md[i] >= t + 1 and i not in self.drop_after}

    def plan(self) -> None:
        """What the stage computes and pages in: every missing input paged in before its first reader k
        if stored, else recomputed with its own missing inputs (the result does not depend on the order;
        no recursion: chains run deep); then who reads what, for the RAM replay."""
        walk, t, K = self.walk, self.t, self.K
        preds = walk.preds
        self.C = C = {t}
        self.ins = ins = {}
        todo = [(p, t) for p in preds[t]]
        while todo:
            p, k = todo.pop()
            if p in K or p in C:
                continue
            if p in ins:
                ins[p] = min(ins[p], k)
                continue
            if p in walk.stored and walk.paging:
                ins[p] = k
                continue
            if not walk.remat:
                raise GreedyFailed
            C.add(p)
            todo.extend((q, p) for q in preds[p])
        self.comp = sorted(C)
        self.keep_next = self.carried()
        # RAM exactly as the MILP charges it (last: stage.emit.last_readers, built with readers)
        self.last: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}  # tensor -> the nodes of comp reading it, ascending
        for k in self.comp:
            for p in preds[k]:
                self.last[p] = k
                self.readers.setdefault(p, []).append(k)
        self.arrivals: dict[int, list[int]] = {}  # node -> the tensors paged in right before it
        for i, k in ins.items():
            self.arrivals.setdefault(k, []).append(i)

    def replay(self, until: int = -1):
        """The stage's RAM peak and the node where it is, or with ``until``, what is resident when that
        node has been computed (a stage that recomputes a long chain computes thousands of nodes: the
        resident set is rebuilt once, at the peak, not copied at every new high)."""
        g, mem, last, keep_next = self.walk.g, self.walk.mem, self.last, self.keep_next
        cur = self.walk.fixed + sum(mem[i] for i in self.K)
        res = set(self.K)
        peak, kstar = -1, -1
        for k in self.comp:
            for i in self.arrivals.get(k, ()):
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

    def candidates(self) -> list[tuple[int, str, int]]:
        """The tensors charged at the peak that may go (x, how it is held, its next use), of the guide's
        highest rank that has any: only that rank can win, as it comes first in every rule's key."""
        walk, mem, kstar = self.walk, self.walk.mem, self.kstar
        pinned = set(walk.preds[kstar]) | {kstar}
        by_rank: dict[int, list[int]] = {}
        for x in self.snap:
            if x not in pinned and mem[x] > 0:
                by_rank.setdefault(walk.rank(x), []).append(x)
        cands: list[tuple[int, str, int]] = []
        for r in sorted(by_rank, reverse=True):
            for x in by_rank[r]:
                rd = self.readers.get(x, ())
                read_after = [k for k in rd if k > kstar]
                if x in self.K and not (rd and rd[0] <= kstar):
                    cands.append((x, CARRIED, read_after[0] if read_after else walk.next_use(x, self.t)))
                elif x in self.keep_next and not read_after:
                    cands.append((x, NOT_CARRIED_ON, walk.next_use(x, self.t)))
            if cands:
                break
        return cands

    def pick(self) -> tuple[int, str, tuple[float, float] | None]:
        """The tensor the rule evicts, how it is held, and its recomputation closure's cost if priced."""
        cands = self.candidates()
        if self.walk.prefer in ("closure", "cascade"):
            best = self.cheapest_per_byte(cands)
        else:
            best = furthest_next_use(cands, self.walk.mem)
        if best is None:
            raise GreedyFailed
        return best

    def cheapest_per_byte(self, cands: list[tuple[int, str, int]]) -> tuple[int, str, tuple[float, float]] | None:
        """``closure`` and ``cascade``: the cheapest restoration per byte, weighed by the square of the
        time until the next use (a cost-aware Belady; the square measured best on the zoo and aten
        graphs).  Ties go to the first candidate.  A closure costs at least x's own compute, so
        candidates are tried best-first by that optimistic key, and the search stops once no optimistic
        key can beat the best exact one.  Under ``cascade``, a tensor that dropped tensors still awaiting
        recomputation read (a ResNet block's input, needed to recompute the block's output) costs one
        restoration more per such reader: evicting it turns their recomputations into cascades."""
        walk, t, mem, nd = self.walk, self.t, self.walk.mem, self.walk.nd
        present = self.K | self.C | set(self.ins)
        waiting_on = (
            Counter(p for v in walk.dropped if v not in present and walk.md[v] >= t for p in walk.preds[v])
            if walk.prefer == "cascade"
            else Counter()
        )
        scored = []
        for pos, (x, how, nu) in enumerate(cands):
            pe = walk.page_cost(x)[0] if walk.paging else math.inf
            scale = mem[x] * max(1, nu - t) ** 2 / (1 + waiting_on[x])
            optimistic = min(nd[x].compute_energy_j if walk.remat else math.inf, pe)
            scored.append(((-optimistic / scale, nu, -pos), x, how, nu, pe, scale))
        scored.sort(reverse=True)
        best, best_key = None, None
        for opt_key, x, how, nu, pe, scale in scored:
            if best_key is not None and opt_key <= best_key:
                break
            closure = walk.remat_cost(x, nu, present) if walk.remat else (math.inf, math.inf)
            key = (-min(closure[0], pe) / scale, nu, opt_key[2])
            if best_key is None or key > best_key:
                best, best_key = (x, how, closure), key
        return best


def furthest_next_use(cands: list[tuple[int, str, int]], mem: list[int]) -> tuple[int, str, None] | None:
    """Belady's rule (``energy``, ``page``, ``remat``): the candidate read furthest in the future, the
    larger first on a tie, the first listed on a full tie."""
    best, best_key = None, None
    for x, how, nu in cands:
        key = (nu, mem[x])
        if best_key is None or key > best_key:
            best, best_key = (x, how, None), key
    return best


def tidy(g: CostedGraph, plan: Plan, md: list[int]) -> None:
    """Stop keeping tensors that a stage neither reads, pages out nor carries on (they only cost RAM)."""
    n = plan.n
    for t in range(n - 1, 0, -1):
        read = {p for k in plan.comp[t] for p in g.preds[k]}
        nxt = plan.keep[t + 1] if t + 1 <= n else set()
        for i in list(plan.keep[t]):
            if i not in read and i not in nxt and i not in plan.outs[t]:
                plan.keep[t].discard(i)
