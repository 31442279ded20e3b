"""The guide search: local search over the eviction guide that a greedy rule follows.

A move adds a tensor to the guide, drops one, changes its kind or swaps two; the rule
that made the plan re-runs with the new guide, and a cheaper plan within the budgets is
kept.  :class:`GuideSearch` is resumable, so the portfolio runs searches in rounds, side by
side in worker processes (:mod:`poet.solve.search.pool`).
"""

from __future__ import annotations

import math
import random
import time

from ...graph.core import CostedGraph
from ...schedule.core import Budget
from ..stage.emit import replays, without_deadline
from ..stage.plan import GuideKind, Plan, drop_unread_pageouts, plan_costs
from .greedy import greedy_plan


def search_guides(
    g: CostedGraph,
    budget: Budget,
    plan: Plan,
    *,
    remat: bool = True,
    paging: bool = True,
    target_energy: float = 0.0,
    time_limit: float = 10.0,
    patience: int | None = None,
    seed: int = 0,
    stop=None,
) -> Plan:
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

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        plan: Plan,
        *,
        remat: bool = True,
        paging: bool = True,
        target_energy: float = 0.0,
        seed: int = 0,
    ):
        self.g, self.budget, self.remat, self.paging = g, budget, remat, paging
        self.target = target_energy
        self.best = plan
        mem, last = g.ram, g.last_reader  # (g.ram builds a list: once, not per node)
        self.cands = [v for v in range(len(g.nodes)) if mem[v] > 0 and last[v] > v + 1]
        self.kinds = [k for k, ok in ((GuideKind.REMAT, remat), (GuideKind.PAGE, paging)) if ok] + [GuideKind.KEEP]
        self.deadline = budget.runtime_s if budget.runtime_s is not None else math.inf
        self.patience = max(1000, 10 * len(self.cands))  # moves without gain before it stops
        self.kick = max(100, len(self.cands))
        self.rnd = random.Random(seed)
        self.idle = self.stuck = 0
        self.best_key = self._key(plan)
        self.best_guide = dict(plan.rule[1]) if plan.rule is not None else {}
        self.cur_guide, self.cur_key = self.best_guide, self.best_key  # the best, or a kick away from it

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
        while (
            not self.done
            and self.idle < patience
            and time.perf_counter() - t0 < time_limit
            and not (stop is not None and stop())
        ):
            self.idle += 1
            self.stuck += 1
            if self.stuck > self.kick:
                # no gain around the current point for a while: restart a few random moves from the best
                self.cur_guide, self.cur_key, self.stuck = self.best_guide, (math.inf, math.inf), 0
                for _ in range(3):
                    self.cur_guide = self._moved(self.cur_guide)
            gd = self._moved(self.cur_guide)
            p = greedy_plan(
                g,
                rule_budget,
                remat=self.remat,
                paging=self.paging,
                prefer=prefer,
                guide=gd,
                guide_once=once,
                time_limit=time_limit - (time.perf_counter() - t0),
                stop=stop,
            )
            if p is None:
                continue
            drop_unread_pageouts(p)
            k = self._key(p)
            if not self._better(k, self.cur_key):
                continue
            self.cur_guide, self.cur_key, self.stuck = gd, k, 0
            if self._better(k, self.best_key) and replays(
                g, p, self.budget if k[0] == 0 else without_deadline(self.budget)
            ):
                p.rule = (prefer, gd, rule_budget, once)
                self.best, self.best_guide, self.best_key, self.idle = p, gd, k, 0
        return self.best
