"""The one-pass paging rule with recomputation: drop what is cheaper to recompute than to page.

On the ``m4`` a page-in of a small tile costs what hundreds of thousands of FLOPs cost (the SD card's
per-transfer latency), so a BatchNorm, ReLU, add or LayerNorm tile is far cheaper to compute again from
its input than to write out and read back.  This pass is :func:`~poet.solve.search.stream.stream_schedule`
(nodes in order, Belady eviction: the resident tensor read furthest in the future goes first) with two
more choices:

* **drop instead of page out.**  A victim not yet on storage whose restoration by recomputation is
  estimated cheaper than its page-out plus a page-in is freed without a page-out.  The estimate is its
  compute energy plus, per input, nothing if that input is read at the same stage anyway, else its
  restoration (a page-in, plus a page-out if nothing else keeps it; the recomputation of an input
  dropped or already freed after its last reader, recursively).  Its inputs are then *held for it*: they
  count as read at its next use, so they are not freed before it is restored (they may be paged out or
  dropped themselves; an input already freed is marked dropped too), with chains of dropped tensors at
  most ``max_depth`` long, and no drop whose restoration would not fit beside the other inputs of the
  stage that needs it.
* **recompute instead of page in.**  A stored tensor needed again whose inputs are all in RAM is
  recomputed when that is cheaper than its page-in.

A tensor needed at a stage is restored with everything it depends on (page-ins and recomputations in
dependency order, all inside the stage's RAM).  Time and memory stay linear in the graph times the
bounded depth.  Its schedule is in stage form (node t first computed in stage t), priced here as the
validator prices it; the caller validates it.  It makes no optimality claim: the portfolio holds it
beside the plain rule and keeps the cheaper validated schedule.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Op, Step
from ..stage.plan import ram_cap
from .stream import CLOCK_EVERY, NOTHING, StreamResult, priced

MAX_DEPTH = 3  # the longest chain of dropped tensors a restoration recomputes


def stream_remat_schedule(
    g: CostedGraph,
    budget: Budget,
    *,
    time_limit: float | None = None,
    stop=None,
    clock=time.perf_counter,
    max_depth: int = MAX_DEPTH,
    ceiling_j: float | None = None,
) -> StreamResult:
    """The pass of the module docstring: its instructions, energy and runtime (the caller validates
    them), or none (:class:`~poet.solve.search.stream.StreamResult` says why) when it does not fit the
    budgets, or when ``time_limit`` seconds pass or ``stop()`` is true first.  With ``ceiling_j``, none
    as soon as the energy spent so far is above it (a search pricing many orders needs only to know that
    one costs more, and most cost more well before their end)."""
    run = _Pass(g, budget, max_depth)
    if ceiling_j is not None:  # (the extra energy only grows; the margin covers the running sum's rounding)
        run.extra_allowed = ceiling_j - g.plain_energy_j + 1e-9 * abs(ceiling_j)
    return run.run(None if time_limit is None else clock() + time_limit, stop, clock)


class _Pass:
    """The pass's state: what is resident, stored, dropped, and who waits for what."""

    def __init__(self, g: CostedGraph, budget: Budget, max_depth: int):
        self.g, self.budget, self.max_depth = g, budget, max_depth
        self.n, self.m, self.preds, self.succs, self.nd = len(g.nodes), g.ram, g.preds, g.succs, g.nodes
        self.reader = [0] * self.n  # per tensor, the index in succs[x] of its next reader not yet computed
        self.resident: set[int] = set()
        self.stored: set[int] = set()
        self.dropped: set[int] = set()  # computed, freed without a page-out, to be recomputed
        self.waiters: dict[int, set[int]] = {}  # tensor -> the dropped tensors whose recomputation reads it
        self.used = g.fixed_ram_bytes
        self.cap = ram_cap(budget.ram_bytes)
        self.heap: list[tuple[int, int]] = []  # (-next use, tensor)
        self.hkey: dict[int, int] = {}  # the key of each tensor's live heap entry
        self.steps: list[Step] = []
        self.extra_e: list[float] = []  # page and recompute energy
        self.extra_spent, self.extra_allowed = 0.0, math.inf  # their running sum, and where the pass gives up
        self.stage_t: list[float] = []  # per stage, its paging time (serial / overlap pricing)
        self.stage_c: list[float] = []  # per stage, its compute time, recomputations included

    # -- the future --------------------------------------------------------------------------------
    def real_next(self, x: int) -> int:
        r, i = self.succs[x], self.reader[x]
        return r[i] if i < len(r) else self.n

    def next_use(self, x: int, depth: int = 0) -> int:
        """The next stage that reads ``x``, or restores a dropped tensor that reads it."""
        u = self.real_next(x)
        if depth <= self.max_depth:
            for w in self.waiters.get(x, ()):
                u = min(u, self.next_use(w, depth + 1))
        return u

    def read_at(self, x: int, u: int) -> bool:
        r = self.succs[x]
        i = bisect_left(r, u, self.reader[x])
        return i < len(r) and r[i] == u

    def push(self, x: int) -> None:
        key = -self.next_use(x)
        self.hkey[x] = key
        heapq.heappush(self.heap, (key, x))

    # -- the estimates -----------------------------------------------------------------------------
    def restore_e(self, p: int, u: int, depth: int) -> float:
        """The energy of having ``p`` in RAM at stage ``u`` for a recomputation, as far as it is ours."""
        if self.read_at(p, u):
            return 0.0  # read at that stage anyway
        nd = self.nd[p]
        if self.absent(p):
            return self.recompute_e(p, u, depth + 1)
        r = self.succs[p]
        if p in self.stored or (r and r[-1] >= u):
            return nd.pagein_energy_j  # its page-out, if any, is paid for its own reads
        return nd.pagein_energy_j + nd.pageout_energy_j

    def recompute_e(self, x: int, u: int, depth: int = 0) -> float:
        if depth >= self.max_depth:
            return math.inf
        return self.nd[x].compute_energy_j + math.fsum(self.restore_e(p, u, depth) for p in self.preds[x])

    def chain(self, x: int) -> int:
        """The longest chain of dropped tensors through ``x`` if it were dropped now."""
        return self.chain_down(x, 1) + self.chain_up(x, 0)

    # (methods, not closures inside chain: a recursive closure is a reference cycle, which would keep
    # each pass's state alive until the garbage collector's next full run)
    def chain_down(self, v: int, d: int) -> int:
        if d > self.max_depth:
            return d
        return max((self.chain_down(p, d + 1) for p in self.preds[v] if self.absent(p)), default=d)

    def chain_up(self, v: int, d: int) -> int:
        if d > self.max_depth:
            return d
        return max((self.chain_up(w, d + 1) for w in self.waiters.get(v, ())), default=d)

    def footprint(self, x: int, depth: int = 0) -> int:
        """The RAM that restoring ``x`` takes at once, at most (its dropped inputs restored first)."""
        if depth > self.max_depth:
            return self.cap + 1
        return self.m[x] + sum(self.footprint(p, depth + 1) if self.absent(p) else self.m[p] for p in self.preds[x])

    def absent(self, v: int) -> bool:
        """Neither in RAM nor on storage: dropped, or freed after its last reader (recomputable from its
        inputs if they are)."""
        return v not in self.resident and v not in self.stored

    def restorable(self, v: int, depth: int) -> bool:
        if not self.absent(v):
            return True
        return depth < self.max_depth and all(self.restorable(p, depth + 1) for p in self.preds[v])

    def worth_dropping(self, x: int) -> bool:
        nd, u = self.nd[x], self.next_use(x)
        if not all(self.restorable(p, 1) for p in self.preds[x]) or self.chain(x) > self.max_depth:
            return False  # an input gone for good, or too long a chain
        others = sum(self.m[p] for p in self.preds[u] if p != x) if u < self.n else 0
        if self.footprint(x) + others > self.cap:
            return False  # its restoration would not fit beside the other inputs of the stage that needs it
        return self.recompute_e(x, u) < nd.pageout_energy_j + nd.pagein_energy_j

    # -- the moves ---------------------------------------------------------------------------------
    def evict(self, x: int, t: int) -> None:
        nd = self.nd[x]
        if x not in self.stored:
            if self.worth_dropping(x):
                self.drop(x)
            else:
                self.steps.append(Step(Op.PAGE_OUT, x, t))
                self.stored.add(x)
                self.spend(nd.pageout_energy_j)
                self.stage_t[-1] += nd.pageout_time_s
        self.steps.append(Step(Op.FREE, x, t))
        self.resident.discard(x)
        self.used -= self.m[x]

    def drop(self, x: int) -> None:
        """``x`` is to be recomputed: its inputs are held for it, and an input already freed is to be
        recomputed too."""
        self.dropped.add(x)
        for p in self.preds[x]:
            self.waiters.setdefault(p, set()).add(x)
            if p in self.resident:
                self.push(p)  # its next use may be sooner now
            elif p not in self.stored and p not in self.dropped:
                self.drop(p)

    def recomputed(self, x: int) -> bool:
        """``x`` comes back by recomputation: it was dropped, or it is stored but its inputs are all in
        RAM and computing it is cheaper than its page-in."""
        nd = self.nd[x]
        if x in self.dropped:
            return True
        return nd.compute_energy_j < nd.pagein_energy_j and all(p in self.resident for p in self.preds[x])

    def plan_restore(self, x: int, order: list[tuple[int, bool]], planned: set[int]) -> None:
        """Append to ``order`` what brings ``x`` back (the tensor, and whether it is recomputed), its
        dependencies first."""
        if x in self.resident or x in planned:
            return
        if x in self.dropped:
            for p in self.preds[x]:
                self.plan_restore(p, order, planned)
        planned.add(x)
        order.append((x, self.recomputed(x)))

    def restore(self, x: int, recompute: bool, t: int) -> None:
        nd = self.nd[x]
        if recompute:
            self.steps.append(Step(Op.COMPUTE, x, t))
            self.spend(nd.compute_energy_j)
            self.stage_c[-1] += nd.compute_time_s
            if x in self.dropped:
                self.dropped.discard(x)
                for p in self.preds[x]:
                    self.waiters[p].discard(x)
        else:
            self.steps.append(Step(Op.PAGE_IN, x, t))
            self.spend(nd.pagein_energy_j)
            self.stage_t[-1] += nd.pagein_time_s
        self.resident.add(x)
        self.used += self.m[x]

    def spend(self, e: float) -> None:
        self.extra_e.append(e)
        self.extra_spent += e

    def settle(self, x: int, t: int) -> None:
        """After stage ``t``: free ``x`` if nothing reads it any more, else queue it for eviction."""
        r = self.succs[x]
        while self.reader[x] < len(r) and r[self.reader[x]] <= t:
            self.reader[x] += 1
        if x not in self.resident:
            return
        if self.reader[x] == len(r) and not self.waiters.get(x):
            self.steps.append(Step(Op.FREE, x, t))
            self.resident.discard(x)
            self.used -= self.m[x]
        elif self.m[x] > 0:
            self.push(x)

    def run(self, t_end: float | None, stop, clock) -> StreamResult:
        cap, pairs = self.cap, 0
        for t in range(self.n):
            pairs += len(self.resident)
            if t % CLOCK_EVERY == 0 and ((t_end is not None and clock() > t_end) or (stop is not None and stop())):
                return NOTHING
            if self.extra_spent > self.extra_allowed:
                return NOTHING  # above the ceiling asked for
            self.stage_t.append(0.0)
            self.stage_c.append(self.nd[t].compute_time_s)
            ins = sorted(set(self.preds[t]))
            held = set(ins)
            for p in ins:  # one missing input at a time: what only its restoration needed may go again
                if p in self.resident:
                    continue
                order: list[tuple[int, bool]] = []
                self.plan_restore(p, order, set())
                hold = held | {x for x, _ in order}
                for x, recompute in order:
                    if recompute:
                        hold.update(self.preds[x])
                if not self.make_room(sum(self.m[x] for x, _ in order), hold, cap, t):
                    return NOTHING  # the restoration alone does not fit
                for x, recompute in order:
                    self.restore(x, recompute, t)
                for x in sorted(hold - held):
                    self.settle(x, t)  # not read by t: freed if nothing else reads it, else evictable
            if not self.make_room(self.m[t], held, cap, t):
                return NOTHING  # what t needs alone does not fit
            self.steps.append(Step(Op.COMPUTE, t, t))
            self.resident.add(t)
            self.used += self.m[t]
            for x in ins + [t]:
                self.settle(x, t)
        return self.result(pairs)

    def make_room(self, need: int, held: set[int], cap: int, t: int) -> bool:
        """Evict, the tensor read furthest in the future first (Belady's rule), until ``need`` more bytes
        fit.  (Picking the cheapest to bring back among the few furthest was measured worse: resnet18_cifar
        at 32 KiB +0.1%, bert at 256 KiB +0.4%.)"""
        kept = []
        while self.used + need > cap:
            if not self.heap:
                break
            key, x = heapq.heappop(self.heap)
            if x not in self.resident or self.hkey.get(x) != key:
                continue  # stale
            if x in held:
                kept.append((key, x))
            elif -key != self.next_use(x):
                self.push(x)  # its next use moved: queue it again at the right place
            else:
                del self.hkey[x]
                self.evict(x, t)
        for entry in kept:
            heapq.heappush(self.heap, entry)
        return self.used + need <= cap

    def result(self, pairs: int) -> StreamResult:
        energy = self.g.plain_energy_j + math.fsum(self.extra_e)
        return priced(self.steps, energy, math.fsum(self.stage_c), self.stage_c, self.stage_t, self.budget, pairs)
