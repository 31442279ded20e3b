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

import dataclasses
import math
from types import MappingProxyType

from ..graph.core import CostedGraph
from ..schedule.core import FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL, Budget, Schedule
from ..schedule.report import MilpStats, MinBudgets, PhaseRecord, SolveReport
from ..units import fmt_bytes, fmt_seconds
from .bounds import eviction_cover
from .errors import SolveError
from .lp.highs import get_backend
from .milp.formulation import Formulation, build
from .milp.warm_start import decode, plan_to_start
from .min_budgets import min_budgets
from .options import METHODS
from .policy import TimeBudget
from .progress import report_progress
from .result import relative_gap
from .search import intervals
from .search.gap_drops import gap_drop_plan
from .search.greedy import best_greedy, checkpointed, rule_names
from .search.guides import GuideSearch, search_guides
from .search.pool import SearchPool, worker_count
from .stage.emit import emit
from .stage.plan import Plan, plan_costs


def status_message(res, strategy: str) -> str:
    """What a MILP result means, in a sentence."""
    if res.status == OPTIMAL:
        return f"optimal (proven relative gap {res.gap:.2e})"
    if res.status == FEASIBLE:
        return f"feasible; optimality not proven (relative gap {res.gap:.2%}): {res.detail}"
    if res.status == INFEASIBLE:
        return f"no {strategy} schedule meets both budgets (proven infeasible)"
    return f"no schedule found before the solver stopped ({res.detail})"


class Pipeline:
    """One solve of the stage form: the phases of the module docstring, in order, each a method that
    updates the best plan held (``plan``, ``plan_e``) and records what it did in ``report``."""

    def __init__(
        self,
        g: CostedGraph,
        budget: Budget,
        opts,
        *,
        remat: bool,
        paging: bool,
        strategy: str,
        incumbent_energy: float | None = None,
    ):
        method = getattr(opts, "method", "auto") or "auto"
        if method not in METHODS:
            raise SolveError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.policy = opts.policy
        if method == "auto":
            method = "fast" if len(g.nodes) <= self.policy.auto_max_nodes else "heuristic"
        self.g, self.budget, self.opts = g, budget, opts
        self.remat, self.paging, self.strategy, self.method = remat, paging, strategy, method
        self.incumbent_energy = incumbent_energy
        self.time = TimeBudget(opts.time_limit_s, opts.clock)
        self.plan: Plan | None = None  # the best plan held
        self.plan_e: float | None = None  # its energy
        self.origin = "greedy"  # what found the plan held: the greedy (and its guide search), "gap-drops"
        #                            or "intervals"
        self.gap_plan: Plan | None = None  # the idle-gap recomputation plan, held from the start
        self.f: Formulation | None = None  # the MILP, once built
        self.lb = 0.0  # the eviction cover's bound
        self.guide: dict[int, str] = {}  # and its evictions
        self.cover_info: dict = {}
        self.rule_plans: list = []  # each rule's cheapest plan
        self.closest: list = []  # the plan that overruns the deadline least, when none meets it
        self.report = SolveReport(
            requested_method=opts.method, requested_gap=opts.gap, time_limit_s=opts.time_limit_s, threads=opts.threads
        )
        self.phases: list[PhaseRecord] = []
        self.t_min: float | None = None  # the runtime cover's bound, once computed

    # -- the record --------------------------------------------------------------------------------
    def note(self, **changes) -> None:
        """Set fields of the report (the names are checked: a misspelt field raises)."""
        self.report = self.report.with_(**changes)

    def record(self, name: str, since: float, **facts) -> None:
        """A phase ended: how long since ``since`` (``time.elapsed()``), the best energy held, its facts."""
        self.phases.append(PhaseRecord(name, self.time.elapsed() - since, self.plan_e, MappingProxyType(facts)))

    # -- helpers -----------------------------------------------------------------------------------
    def stopped(self) -> bool:
        """Asked to end early: the best plan held is the answer."""
        return self.opts.stop is not None and bool(self.opts.stop())

    def progress(self, phase: str, **d) -> None:
        report_progress(self.opts, phase, **d)

    def energy(self, plan: Plan) -> float:
        return plan_costs(self.g, plan, self.budget.paging_time)[0]

    def gap(self) -> float | None:
        """The gap of the plan held to the cover's bound (None without a plan)."""
        return None if self.plan_e is None else relative_gap(self.plan_e, self.lb)

    def cover_seconds(self, share_left: float = 1.0) -> float:
        """The eviction cover's time (``policy.cover_time``), at most ``share_left`` of what the time
        limit leaves (0.5 s at least: a cover cut short still bounds validly)."""
        t, left = self.policy.cover_time(self.opts.time_limit_s), self.time.left()
        return t if left is None else min(t, max(0.5, share_left * left))

    def rules_seconds(self) -> float | None:
        return self.policy.rules_time(self.opts.time_limit_s, self.time.elapsed())

    def search_seconds(self, milp_follows: bool, share: float | None = None) -> float:
        return self.policy.search_time(self.opts.time_limit_s, self.time.elapsed(), milp_follows, share)

    def interval_seconds(self) -> float:
        return self.policy.interval_time(self.opts.time_limit_s, self.time.elapsed())

    def runtime_cover(self) -> tuple[float, dict[int, str]]:
        """A proven lower bound on the runtime of any schedule within the RAM budget, and the
        eviction set that attains it (eviction cover)."""
        return eviction_cover(
            self.g,
            self.budget,
            remat=self.remat,
            paging=self.paging,
            objective="time",
            time_limit=self.cover_seconds(),
            stop=self.opts.stop,
        )

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

    def gap_drops(self) -> None:
        """Phase 0: the idle-gap recomputation plan (:mod:`poet.solve.search.gap_drops`).  It takes little
        time and is feasible where the rules' recomputations cascade (dense DAGs, where every rule can
        fail); held from the start, it is what a stop or the time limit returns when nothing else is."""
        if not self.remat or self.method == "faithful":
            return
        self.progress("recomputation across idle gaps")
        since, limit = self.time.elapsed(), self.opts.time_limit_s
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

    def bound_result(self) -> Schedule:
        """No set of evictions that makes RAM fit leaves enough time: the deadline is out of reach."""
        g, budget = self.g, self.budget
        t_min = self.runtime_cover()[0]
        self.note(
            method="bound",
            solve_seconds=self.time.elapsed(),
            min_budgets=MinBudgets(runtime_s_lower_bound=t_min),
            message=(
                f"the deadline {fmt_seconds(budget.runtime_s)} is too short for "
                f"{fmt_bytes(budget.ram_bytes)} of RAM (proven by the eviction cover)"
            ),
        )
        if self.opts.find_min_budgets and len(g.nodes) <= self.policy.auto_max_nodes:
            self.smallest_budgets()
        return self.schedule((), INFEASIBLE)

    def greedy_rules(self) -> None:
        """Phase 2: the greedy rules, the deadline's guides first when the cover says the deadline binds."""
        lb, since = self.lb, self.time.elapsed()
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

    def build_milp(self) -> Formulation:
        tb = self.time.elapsed()
        self.progress("building the MILP", objective=self.plan_e, bound=self.lb)
        built = build(self.g, self.budget, remat=self.remat, paging=self.paging, tighten=(self.method == "fast"))
        self.record("MILP build", tb, nonzeros=built.problem.num_nonzeros)
        return built

    def milp(self) -> Schedule:
        """Phase 5: the MILP, warm-started from the plan held, unless HiGHS could not set it up in the
        time left; the better of its answer and the plan held, gap against the better bound."""
        g, opts, policy, lb = self.g, self.opts, self.policy, self.lb
        plan, plan_e = self.plan, self.plan_e
        if self.f is None and plan is not None and opts.time_limit_s is not None:
            # not built yet (after the interval search, which leaves a tenth of the time): when what is
            # left is under half of what HiGHS would need by the estimate (which the zoo and aten graphs'
            # MILPs reach to within 25%), it could not start either, and is not even built (up to 1 s)
            rest = self.time.left()
            nonzeros = policy.estimated_milp_nonzeros(len(g.nodes))
            if rest < 0.5 * policy.milp_setup_seconds(nonzeros):
                return self.plan_result(
                    skipped=(max(rest, 0.0), policy.milp_setup_seconds(nonzeros), nonzeros), estimated=True
                )
        if self.f is None:
            self.f = self.build_milp()
        f = self.f
        if plan is not None and opts.time_limit_s is not None:
            rest = self.time.left()
            need = policy.milp_setup_seconds(f.problem.num_nonzeros)
            if rest < need:
                # it would stop at its time limit no sooner than `need` from now, with nothing new
                return self.plan_result(skipped=(max(rest, 0.0), need, f.problem.num_nonzeros))
        start = None
        if plan is not None:
            start, why = plan_to_start(f, g, plan)
            self.note(warm_start=self.origin if start is not None else f"none ({why})")
        backend = get_backend(opts.backend)
        limit = opts.time_limit_s
        if limit is not None:
            limit = max(0.1, self.time.left())
        kw = {"start": start} if start is not None else {}
        if opts.stop is not None:
            kw["stop"] = opts.stop

        def milp_progress(d):
            # In joules, against the better of the solver's bound and the structural one.  With a warm
            # start the best is the schedule held: HiGHS 1.16 reports objectives in its presolved space,
            # where it priced the resnet18_cifar/m4 start 0.3% of plain below its value.
            obj = (
                plan_e
                if plan_e is not None
                else (None if d.get("objective") is None else d["objective"] * f.energy_unit)
            )
            bnd = max(lb, (d.get("bound") or 0.0) * f.energy_unit)
            self.progress(
                "MILP",
                objective=obj,
                bound=bnd,
                nodes=d.get("nodes"),
                gap=None if obj is None else relative_gap(obj, bnd),
            )

        since = self.time.elapsed()
        res = backend(
            f.problem,
            time_limit=limit,
            threads=opts.threads,
            gap=opts.gap,
            progress=None if opts.progress is None else milp_progress,
            verbose=opts.verbose,
            **kw,
        )
        self.record("MILP", since, status=res.status, detail=res.detail, **res.extra)
        p = f.problem
        bound = None if res.bound is None or not math.isfinite(res.bound) else res.bound * f.energy_unit
        obj = None if res.objective is None else res.objective * f.energy_unit
        self.note(
            method="milp-" + self.method,
            status_detail=res.detail,
            gap=res.gap,
            energy_j=obj,
            bound_energy_j=bound,
            message=status_message(res, self.strategy),
            solve_seconds=self.time.elapsed(),
            milp=MilpStats(opts.backend, p.num_cols, int(p.integer.sum()), p.num_rows, p.num_nonzeros, res.seconds),
        )
        if res.x is None and plan is not None and res.status != INFEASIBLE:
            # the solver stopped without an incumbent of its own: the greedy schedule is the best found
            best_lb = max(lb, bound or 0.0)
            gap = relative_gap(plan_e, best_lb)
            self.note(
                gap=gap,
                energy_j=plan_e,
                bound_energy_j=best_lb,
                message=f"feasible greedy schedule; gap {gap:.2%} to the best proven bound ({res.detail})",
            )
            return self.schedule(emit(g, plan), OPTIMAL if gap <= opts.gap else FEASIBLE)
        if res.x is None:
            if res.status == INFEASIBLE and opts.find_min_budgets:
                self.smallest_budgets()
            return self.schedule((), res.status if res.status != OPTIMAL else NO_SOLUTION)
        status = res.status
        if obj is not None and (bound is None or lb > bound):
            # the structural bound is stronger than the solver's: the gap is measured against it
            gap = relative_gap(obj, lb)
            if res.gap is None or gap < res.gap:
                self.note(gap=gap, bound_energy_j=lb)
                if status == FEASIBLE and gap <= opts.gap:
                    status = OPTIMAL
                    self.note(
                        message=(
                            f"optimal (relative gap {gap:.2e} to the structural lower bound; "
                            f"the solver stopped with {res.detail})"
                        )
                    )
                elif status == FEASIBLE:
                    self.note(
                        message=(
                            f"feasible; not proven optimal: gap {gap:.2%} to the structural lower bound ({res.detail})"
                        )
                    )
        return self.schedule(emit(g, decode(f, res.x)), status)

    def smallest_budgets(self) -> None:
        """No schedule meets the budgets: the smallest RAM and deadline that have one (two MILPs)."""
        since = self.time.elapsed()
        found = min_budgets(self.g, self.budget, self.opts, remat=self.remat, paging=self.paging, time_budget=self.time)
        if found.runtime_s_lower_bound is None:
            found = dataclasses.replace(found, runtime_s_lower_bound=self.report.min_budgets.runtime_s_lower_bound)
        self.note(min_budgets=found)
        self.record("smallest budgets", since)

    # -- results -----------------------------------------------------------------------------------
    def schedule(self, steps, status: str) -> Schedule:
        """The answer, with the report and the phases' records."""
        mb = self.report.min_budgets
        if self.t_min is not None and mb.runtime_s_lower_bound is None:  # the runtime cover ran on the way
            self.note(min_budgets=dataclasses.replace(mb, runtime_s_lower_bound=self.t_min))
        return Schedule(
            graph=self.g,
            budget=self.budget,
            steps=tuple(steps),
            status=status,
            strategy=self.strategy,
            report=self.report.with_(phases=tuple(self.phases)),
        )

    def plan_result(self, skipped: tuple[float, float, int] | None = None, estimated: bool = False) -> Schedule:
        """The best plan held as the answer, with its gap to the structural bound; ``skipped``:
        (seconds left, seconds HiGHS needs to start, nonzeros) when the MILP was not started;
        ``estimated``: those nonzeros are the estimate's, the MILP was not built."""
        budget, plan, plan_e, origin = self.budget, self.plan, self.plan_e, self.origin
        gap = self.gap()
        proven = gap is not None and gap <= self.opts.gap
        message = (
            "no schedule found by the greedy"
            if plan is None
            else (
                f"optimal: the {origin} schedule is within {gap:.2e} of the structural lower bound"
                if proven
                else f"feasible {origin} schedule, {gap:.2%} above the structural lower bound"
            )
        )
        self.note(
            method=origin + "+bound" if proven else origin,
            milp=None,
            gap=gap,
            energy_j=plan_e,
            bound_energy_j=self.lb,
            solve_seconds=self.time.elapsed(),
            message=message,
        )
        if skipped is not None:
            rest, need, nonzeros = skipped
            self.note(
                milp_skipped=True,
                status_detail=f"{rest:.1f} s left, too few to start the MILP (about {need:.0f} s)",
                message=message
                + (
                    f"; the MILP was not started: {rest:.1f} s of the time limit were left, and "
                    f"HiGHS needs about {need:.0f} s to set up a MILP of "
                    f"{'about ' * estimated}{nonzeros:,} nonzeros (a longer --time-limit lets "
                    f"it run)"
                ),
            )
        if plan is None:
            if budget.runtime_s is not None:
                t_min = self.t_min if self.t_min is not None else self.runtime_cover()[0]
                near = self.report.nearest_runtime_s
                self.note(
                    min_budgets=MinBudgets(runtime_s_lower_bound=t_min),
                    message=(
                        f"no schedule found within the deadline {fmt_seconds(budget.runtime_s)}"
                        + (f" (the nearest found takes {fmt_seconds(near)})" if near else "")
                        + "; a longer deadline or more RAM will help"
                    ),
                )
            return self.schedule((), NO_SOLUTION)
        return self.schedule(emit(self.g, plan), OPTIMAL if proven else FEASIBLE)


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
