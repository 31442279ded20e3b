"""The portfolio that ``poet solve`` runs for the MILP strategies (``poet``, ``remat``, ``paging``).

In order (docs/pipeline.md says why):

1. :meth:`Pipeline.lower_bound` -- the eviction cover (:mod:`poet.solve.bounds`): a proven lower
   bound on the energy, and the evictions that attain it (the guide).  No eviction set meets the
   deadline: the answer is ``infeasible`` at once.
2. :meth:`Pipeline.greedy_rules` -- the greedy rules (:mod:`poet.solve.search.greedy`), guided by
   the cover; when they all overrun the deadline, guided by covers for stricter deadlines, and a
   guide search for the nearest miss (:meth:`Pipeline.deadline_search`).
3. :meth:`Pipeline.guide_search` -- local search over the guides of the best plans, in rounds,
   side by side in worker processes (:mod:`poet.solve.search.guides`, ``.pool``).
4. :meth:`Pipeline.interval_search` -- retention intervals on CP-SAT, on mid-sized graphs
   (:mod:`poet.solve.search.intervals`).
5. :meth:`Pipeline.milp` -- the MILP (:mod:`poet.solve.milp`), warm-started from the best plan, on
   HiGHS; skipped when a plan is already within the gap of the bound, or when HiGHS could not
   even set it up in the time left.

The best validated schedule wins; its gap is measured against the better of the cover's bound
and the MILP's.  What each phase did is recorded in the schedule's report (a
:class:`~poet.schedule.report.PhaseRecord` per phase in ``SolveReport.phases``).  The ``poet``
strategy also runs the Capuchin-style heuristic first and keeps the cheaper answer
(:mod:`poet.solve.strategies.poet`).
"""

from __future__ import annotations

import math

from ..graph.core import CostedGraph
from ..schedule.core import Budget, Schedule
from .bounds import eviction_cover
from .pipeline_milp import PipelineCore
from .result import relative_gap
from .search import intervals
from .search.gap_drops import gap_drop_plan
from .search.greedy import best_greedy, checkpointed, rule_names
from .search.guides import GuideSearch, search_guides
from .search.pool import SearchPool, worker_count
from .search.stream import stream_schedule
from .stage.plan import Plan, live_pairs, plan_costs


class Pipeline(PipelineCore):
    """One solve of the stage form: the phases of the module docstring, in order, each a method that
    updates the best plan held (``plan``, ``plan_e``) and records what it did in ``report``.  The state,
    the record, the MILP phase and the answers are :class:`~poet.solve.pipeline_milp.PipelineCore`'s."""

    # -- helpers -----------------------------------------------------------------------------------
    def rules_seconds(self) -> float | None:
        return self.policy.rules_time(self.time.limit_s, self.time.elapsed())

    def search_seconds(self, milp_follows: bool, share: float | None = None) -> float:
        return self.policy.search_time(self.time.limit_s, self.time.elapsed(), milp_follows, share)

    def interval_seconds(self) -> float:
        return self.policy.interval_time(self.time.limit_s, self.time.elapsed())

    def tightened_guides(self, t_min: float, time_left: float | None) -> list[dict[int, str]]:
        """The energy cover's guide for a deadline stricter than the real one, as it is and checkpointed:
        room for the restorations the cover does not see (a chain rebuilt more than once).  The cover
        gets at most half of ``time_left``; none when that is under a second."""
        budget = self.budget
        if budget.runtime_s is None or not math.isfinite(t_min) or t_min >= budget.runtime_s:
            return []
        seconds = self.cover_seconds() if time_left is None else min(self.cover_seconds(), 0.5 * time_left)
        if seconds < 1.0:
            return []
        strict = Budget(
            budget.ram_bytes,
            t_min + self.policy.tightened_deadline_share * (budget.runtime_s - t_min),
            budget.paging_time,
        )
        lb, guide = eviction_cover(self.g, strict, remat=self.remat, paging=self.paging, time_limit=seconds)
        if not math.isfinite(lb) or not guide:
            return []
        # checkpointed first: their runs take seconds on 4,818 nodes, the guide's as it is 45 s each
        return [ck for every in (3, 4, 6) if (ck := checkpointed(self.g, guide, every))] + [guide]

    def cheaper(self, a: Plan | None, b: Plan | None) -> Plan | None:
        return b if a is None or (b is not None and self.energy(b) < self.energy(a)) else a

    def nearest(self, nearer: list) -> None:
        """Keep ``nearer`` as the nearest miss of the deadline if it is nearer than the one held."""
        g, pt = self.g, self.budget.paging_time
        if nearer and (not self.closest or plan_costs(g, nearer[0], pt)[1] < plan_costs(g, self.closest[0], pt)[1]):
            self.closest[:] = nearer

    def rules(self, **kw) -> Plan | None:
        """The cheapest plan of a run of the greedy rules (:func:`best_greedy`), in the time left."""
        return best_greedy(
            self.g,
            self.budget,
            remat=self.remat,
            paging=self.paging,
            stop=self.opts.stop,
            time_limit=self.rules_seconds(),
            **kw,
        )

    # -- the phases --------------------------------------------------------------------------------
    def run(self) -> Schedule:
        """The phases, in order; the best schedule found, with its gap and record."""
        self.streaming()
        self.gap_drops()
        if not self.lower_bound():
            return self.bound_result()
        outside_proven = (
            self.incumbent_energy is not None
            and self.incumbent_energy - self.lb <= self.opts.gap * self.incumbent_energy
        )
        if self.method != "faithful":
            self.greedy_rules()
            gap_lb = self.gap()
            # (asked to stop: not even the searches' setup, which loads OR-Tools and forks workers)
            if gap_lb is not None and gap_lb > self.opts.gap and not outside_proven and not self.stopped():
                milp_follows, cp_follows = self.plan_searches()
                self.guide_search(milp_follows, cp_follows)
                if cp_follows and self.gap() > self.opts.gap and not self.stopped():
                    self.interval_search()
                self.note(heuristic_energy_j=self.plan_e)
                gap_lb = self.gap()
            if self.method == "heuristic" or (
                self.method == "fast" and (outside_proven or (gap_lb is not None and gap_lb <= self.opts.gap))
            ):
                return self.plan_result()
        if self.stopped():
            return self.plan_result()
        return self.milp()

    def streaming(self) -> None:
        """Phase 0 on large graphs: the one-pass paging schedule (:mod:`poet.solve.search.stream`), linear in
        the graph, held from the start so that the time limit or a stop always has a schedule to return,
        whatever the phases after it can or cannot finish."""
        if not self.paging or self.method == "faithful" or len(self.g.nodes) < self.policy.stream_min_nodes:
            return
        self.progress("one-pass paging schedule")
        since, left, info = self.time.elapsed(), self.time.left(), {}
        # linear (1 s on 20,000 nodes, 11-38 s on the 37,376-node tiled bert under load): it may take
        # the whole time left and the grace promised on top (docs/reliability.md), since what follows
        # holds no schedule on a graph that size; a stop ends it at once
        found = stream_schedule(
            self.g,
            self.budget,
            time_limit=None if left is None else max(0.0, left) + 0.05 * self.time.limit_s + 2.0,
            stop=self.opts.stop,
            clock=self.opts.clock,
            info=info,
        )
        self.resident_pairs = info.get("resident_pairs", 0)
        if found is not None:
            self.stream = (tuple(found[0]), found[1])
        elif "runtime_s" in info:  # it overran the deadline: the nearest miss so far
            self.note(nearest_runtime_s=info["runtime_s"])
        energy = None if found is None else found[1]
        self.record("one-pass paging", since, found=found is not None, energy_j=energy, **info)

    def gap_drops(self) -> None:
        """Phase 0: the idle-gap recomputation plan (:mod:`poet.solve.search.gap_drops`).  It takes little
        time and is feasible where the rules' recomputations cascade (dense DAGs, where every rule can
        fail); held from the start, it is what a stop or the time limit returns when nothing else is.
        Its plan holds every kept tensor at every stage: where that is more (tensor, stage) pairs than
        ``policy.stage_pairs_max`` it is not tried (recorded as skipped)."""
        if not self.remat or self.method == "faithful":
            return
        pairs = live_pairs(self.g)
        if pairs > self.policy.stage_pairs_max:
            self.record("gap drops", self.time.elapsed(), skipped=f"{pairs:,} (tensor, stage) pairs", found=False)
            return
        self.progress("recomputation across idle gaps")
        since, limit = self.time.elapsed(), self.time.limit_s
        self.gap_plan = gap_drop_plan(
            self.g,
            self.budget,
            stop=self.opts.stop,
            time_limit=None if limit is None else self.policy.gap_drops_share * limit,
        )
        self.record(
            "gap drops",
            since,
            found=self.gap_plan is not None,
            energy_j=None if self.gap_plan is None else self.energy(self.gap_plan),
        )

    def lower_bound(self) -> bool:
        """Phase 1: the eviction cover's bound and guide; False when no eviction set meets the deadline."""
        self.progress("lower bound")
        since = self.time.elapsed()
        self.lb, self.guide = eviction_cover(
            self.g,
            self.budget,
            remat=self.remat,
            paging=self.paging,
            time_limit=self.cover_seconds(0.5),
            info=self.cover_info,
            stop=self.opts.stop,
        )
        self.record("lower bound", since, bound_energy_j=self.lb, evictions=len(self.guide), **self.cover_info)
        if not math.isfinite(self.lb):
            return False
        self.note(structural_bound_energy_j=self.lb)
        return True

    def greedy_rules(self) -> None:
        """Phase 2: the greedy rules, the deadline's guides first when the cover says the deadline binds."""
        lb, since = self.lb, self.time.elapsed()
        policy, rules_s = self.policy, self.rules_seconds()
        need = max(policy.greedy_s_per_node * len(self.g.nodes), policy.greedy_s_per_pair * self.resident_pairs)
        if self.stream is not None and rules_s is not None and rules_s < need:
            # not even one run would end in time (size-aware): the one-pass schedule (or gap drops) is held
            self.record("greedy rules", since, skipped=f"{rules_s:.1f} s left, a run takes about {need:.0f} s")
            if self.gap_plan is not None:
                self.plan, self.plan_e, self.origin = self.gap_plan, self.energy(self.gap_plan), "gap-drops"
            return
        # The cover's evictions take (nearly) all of the deadline's slack: the rules' plans, which
        # restore some tensors more than once, tend to overrun it (all of them on the op-level ResNets
        # on the a72 at 1.2x, minutes of runs on 4,818 nodes), so the deadline's guides go first.
        deadline_bound = self.cover_info.get("slack_used", 0.0) >= self.policy.deadline_bound_share
        self.note(deadline_bound=deadline_bound)
        if deadline_bound:
            guided, nearer = [], []
            plan = self.deadline_guided(guided)
            self.progress("greedy rules", bound=lb, objective=None if plan is None else self.energy(plan))
            plan = self.cheaper(
                plan, self.rules(guide=self.guide, per_rule=self.rule_plans, closest=nearer if plan is None else None)
            )
            self.nearest(nearer)
            self.rule_plans += guided
        else:
            self.progress("greedy rules", bound=lb)
            plan = self.rules(guide=self.guide, per_rule=self.rule_plans, closest=self.closest)
            if plan is None and self.closest:  # every rule overran the deadline
                plan = self.deadline_guided(self.rule_plans)
        self.plan = plan
        if plan is not None:
            self.plan_e = self.energy(plan)
        self.record("greedy rules", since, rule_plans=len(self.rule_plans), deadline_bound=deadline_bound)
        if plan is None and self.closest:
            self.deadline_search()
        if self.gap_plan is not None and (self.plan is None or self.energy(self.gap_plan) < self.energy(self.plan)):
            self.plan, self.origin = self.gap_plan, "gap-drops"
        if self.plan is not None:
            self.plan_e = self.energy(self.plan)
            self.note(heuristic_energy_j=self.plan_e)

    def deadline_guided(self, per_rule: list) -> Plan | None:
        """Guide two rules by the energy cover's eviction set for a stricter deadline, then each rule
        by the fastest eviction set (the runtime cover's), its tensors evicted first only until
        their first restoration."""
        self.progress("greedy rules for the deadline", bound=self.lb)
        t_min, fast_guide = self.runtime_cover()
        self.t_min = t_min
        strict = self.tightened_guides(t_min, self.time.left())
        plan = None
        for rules in (
            [(r, gd, False) for gd in strict for r in ("energy", "remat")],
            [(r, fast_guide, True) for r in rule_names(self.remat, self.paging)],
        ):
            nearer: list = []
            plan = self.cheaper(plan, self.rules(per_rule=per_rule, closest=nearer, rules=rules))
            self.nearest(nearer)
        return plan

    def deadline_search(self) -> None:
        """Every rule overran the deadline: search the guide of the nearest miss until one meets it."""
        self.progress("searching for a schedule within the deadline", bound=self.lb)
        ts = self.time.elapsed()
        cand = search_guides(
            self.g,
            self.budget,
            self.closest[0],
            remat=self.remat,
            paging=self.paging,
            target_energy=math.inf,
            stop=self.opts.stop,
            time_limit=self.search_seconds(self.method != "heuristic"),
        )
        miss = plan_costs(self.g, cand, self.budget.paging_time)[1]
        if miss <= self.budget.runtime_s * (1 + 1e-9):
            self.plan = cand
            self.plan_e = self.energy(cand)
        else:
            self.note(nearest_runtime_s=miss)
        self.record("deadline search", ts, met=miss <= self.budget.runtime_s * (1 + 1e-9), runtime_s=miss)

    def plan_searches(self) -> tuple[bool, bool]:
        """Whether the MILP may follow the searches, and whether the interval search runs.  When the
        MILP may not fit the time left by the estimate, it is built now to know its size."""
        g, policy, rest = self.g, self.policy, self.time.left()
        milp_follows = self.method != "heuristic"
        cp_follows = (
            policy.interval_min_nodes <= len(g.nodes) <= policy.interval_max_nodes
            and intervals.available()
            and (rest is None or rest >= policy.interval_min_rest_s)
        )
        if (
            milp_follows
            and rest is not None
            and 0.5 * rest < policy.milp_setup_seconds(policy.estimated_milp_nonzeros(len(g.nodes)))
        ):
            # it may not fit: built now to know its size.  When HiGHS could not even set it up in
            # the half of the time left that the search would leave it, the search gets that time
            self.f = self.build_milp()
            milp_follows = policy.milp_setup_seconds(self.f.problem.num_nonzeros) <= 0.5 * self.time.left()
        return milp_follows, cp_follows

    def guide_search(self, milp_follows: bool, cp_follows: bool) -> None:
        """Phase 3: local search over the guides of two starts, sharing the search time: the cheapest
        plan and a cover-guided one, or else the cheapest of another rule (each rule's search explores
        a different neighbourhood; a third start only thins the time of the other two).

        Where a search stalls depends on its seed: on resnet18_cifar/m4 at 30% RAM every search gains
        within its first 250 moves or not at all, and two seeds in four reach the bound within 100
        moves, while on resnet18/m4 at 20% the one that does goes 350 moves without gain first.  So the
        searches are resumable and run in rounds: each round adds a search of every start with the
        next seed (up to ``policy.search_rounds`` seeds, on graphs of ``policy.restart_min_nodes`` or
        more), then resumes every search, best first, until it goes twice as many moves without gain
        as in the round before (first twice its kick distance, at most its own patience).  It ends
        when every search has stalled at its own patience.  The searches of a round run side by side,
        one per core (:mod:`poet.solve.search.pool`)."""
        g, budget, opts, policy, plan, lb = self.g, self.budget, self.opts, self.policy, self.plan, self.lb
        ts = self.time.elapsed()
        span = self.search_seconds(milp_follows, policy.search_share_before_intervals if cp_follows else None)
        self.target = lb / (1 - opts.gap) if opts.gap < 1 else math.inf
        guided = [p for p in self.rule_plans if p is not plan and p.rule and p.rule[1]][:1]
        others = sorted(
            (
                p
                for p in self.rule_plans
                if p is not plan and p.rule and not p.rule[1] and p.rule[0] != (plan.rule or ("",))[0]
            ),
            key=self.energy,
        )
        # a plan no rule made (gap drops) has no guide to search from: the rules' plans are searched
        starts = ([plan] if plan.rule else []) + (guided or others[: 1 if plan.rule else 2])
        max_seeds = policy.search_rounds if len(g.nodes) >= policy.restart_min_nodes else 1
        searches: list = []
        rounds = 0

        def left() -> float:
            """Search time left, 0 once the plan is good enough or the last 1% of the span is reached."""
            rest = span - (self.time.elapsed() - ts)
            return 0.0 if self.plan_e <= self.target or rest <= 0.01 * span or self.stopped() else rest

        self.progress("guide search", objective=self.plan_e, bound=lb, gap=self.gap())
        with SearchPool(g, worker_count(opts.threads)) as pool:
            while left():
                if rounds < max_seeds:
                    searches += [
                        GuideSearch(
                            g, budget, st, remat=self.remat, paging=self.paging, target_energy=self.target, seed=rounds
                        )
                        for st in starts
                    ]
                elif all(sr.done or sr.idle >= sr.patience for sr in searches):
                    break
                searches.sort(key=lambda sr: sr.best_key[1])
                for j in range(0, len(searches), pool.workers):
                    rest = left()
                    if not rest:
                        break
                    batch = searches[j : j + pool.workers]
                    share = rest * len(batch) / (len(searches) - j)
                    batch = pool.run(
                        [
                            (sr, share, sr.patience if max_seeds == 1 else min(sr.patience, 2 * sr.kick << rounds))
                            for sr in batch
                        ],
                        stop=opts.stop,
                    )
                    searches[j : j + len(batch)] = batch
                    for sr in batch:
                        cand_e = self.energy(sr.best)
                        if cand_e < self.plan_e:
                            self.plan, self.plan_e = sr.best, cand_e
                    self.progress("guide search", objective=self.plan_e, bound=lb, gap=self.gap())
                rounds += 1
        self.record("guide search", ts, rounds=rounds, searches=len(searches))

    def interval_search(self) -> None:
        """Phase 4: retention intervals on CP-SAT, from the search's plan: a different neighbourhood
        (any tensor's lives may move), slower per gain, but it goes on gaining where the guide search
        stalls (resnet18_cifar/m4 at 20% RAM, bench/results.md)."""
        g, lb, opts = self.g, self.lb, self.opts
        tc = self.time.elapsed()
        self.progress("interval search", objective=self.plan_e, bound=lb, gap=self.gap())
        info: dict = {"start_energy_j": self.plan_e}
        plan_e = self.plan_e

        def cp_progress(e):
            e = min(e, plan_e)  # the model's price of a solution, before it is validated
            self.progress("interval search", objective=e, bound=lb, gap=relative_gap(e, lb))

        cand = intervals.interval_plan(
            g,
            self.budget,
            start=self.plan,
            time_limit=self.interval_seconds(),
            threads=worker_count(opts.threads),
            remat=self.remat,
            paging=self.paging,
            target_energy=self.target,
            info=info,
            stop=opts.stop,
            progress=None if opts.progress is None else cp_progress,
        )
        cand_e = math.inf if cand is None else self.energy(cand)
        if cand_e < self.plan_e:
            self.plan, self.plan_e, self.origin = cand, cand_e, "intervals"
        self.record("interval search", tc, **info, energy_j=self.plan_e)


def solve_milp(
    g: CostedGraph,
    budget: Budget,
    opts,
    *,
    remat: bool,
    paging: bool,
    strategy: str,
    incumbent_energy: float | None = None,
) -> Schedule:
    """The MILP strategies' solve (:class:`Pipeline`).  ``incumbent_energy``: the energy of a schedule
    the caller already holds; when it meets the proven bound, the MILP is skipped."""
    return Pipeline(
        g, budget, opts, remat=remat, paging=paging, strategy=strategy, incumbent_energy=incumbent_energy
    ).run()
