"""The guide search: local search over the guides of the best plans, in rounds, side by side in worker
processes (:mod:`poet.solve.search.guides`, :mod:`poet.solve.search.pool`).

It starts from two plans, sharing the search time: the cheapest, and a cover-guided one or else the
cheapest of another rule (each rule's search explores a different neighbourhood; a third start only
thins the time of the other two).  Where a search stalls depends on its seed: on resnet18_cifar/m4 at
30% RAM every search gains within its first 250 moves or not at all, and two seeds in four reach the
bound within 100 moves, while on resnet18/m4 at 20% the one that does goes 350 moves without gain
first.  So the searches are resumable and run in rounds: each round adds a search of every start with
the next seed (up to ``policy.search_rounds`` seeds, on graphs of ``policy.restart_min_nodes`` or
more), then resumes every search, best first, until it goes twice as many moves without gain as in the
round before (first twice its kick distance, at most its own patience).  It ends when every search has
stalled at its own patience, the time is up, or the plan is within the gap of the bound.

Before it starts it decides what follows (:class:`~poet.solve.phases.state.SearchPlan`): the interval
search, and whether the MILP may (when it may not fit the time left by the estimate, the MILP is built
now to know its size, and when HiGHS could not set it up in the half the search would leave it, the
search gets 90% of the time instead).
"""

from __future__ import annotations

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..search import intervals
from ..search.guides import GuideSearch
from ..search.pool import SearchPool, worker_count
from .milp import build_milp, cpsat_skip_reason, small_for_cpsat
from .state import Origin, SearchPlan, SolveState


class GuideSearchPhase:
    name = "guide search"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches_skip():
            return state.searches_skip()
        if state.plan is None:
            return "no plan to search from"
        if state.plan_proven():
            return "the plan held is within the gap of the bound"
        if state.capuchin_proven():
            return "the Capuchin-style schedule is within the gap of the bound"
        if state.stopped():  # (not even the searches' setup, which loads OR-Tools and forks workers)
            return "asked to stop"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        state.searches = plan_searches(state)
        since = state.time.elapsed()
        opts, policy, lb = state.opts, state.policy, state.lb
        share = policy.search_share_before_intervals if state.searches.intervals_skip is None else None
        if state.searches.milp_follows and small_for_cpsat(state) and cpsat_skip_reason(state) is None:
            share = min(share or 1.0, policy.tiled_cpsat_search_share)  # CP-SAT's pass makes better use of it
        span = state.search_seconds(state.searches.milp_follows, share)
        if state.tiled_rules and not state.searches.milp_follows:
            span *= 1.0 - policy.window_polish_share  # the window polish follows (phases/windows.py)
        target = state.target()
        starts = search_starts(state)
        max_seeds = policy.search_rounds if len(state.g.nodes) >= policy.restart_min_nodes else 1
        searches: list[GuideSearch] = []
        rounds = 0

        def left() -> float:
            """Search time left, 0 once the plan is good enough or the last 1% of the span is reached."""
            rest = span - (state.time.elapsed() - since)
            return 0.0 if state.plan_e <= target or rest <= 0.01 * span or state.stopped() else rest

        state.progress("guide search", objective=state.plan_e, bound=lb, gap=state.gap())
        with SearchPool(state.g, worker_count(opts.threads)) as pool:
            while left():
                if rounds < max_seeds:
                    searches += [
                        GuideSearch(
                            state.g,
                            state.budget,
                            st,
                            remat=state.remat,
                            paging=state.paging,
                            target_energy=target,
                            seed=rounds,
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
                    # each round goes twice as many moves without gain as the one before, at most its patience
                    moves = [sr.patience if max_seeds == 1 else min(sr.patience, 2 * sr.kick << rounds) for sr in batch]
                    batch = pool.run([(sr, share, m) for sr, m in zip(batch, moves)], stop=opts.stop)
                    searches[j : j + len(batch)] = batch
                    for sr in batch:
                        state.offer(sr.best, Origin.GREEDY)
                    state.progress("guide search", objective=state.plan_e, bound=lb, gap=state.gap())
                rounds += 1
        state.note(heuristic_energy_j=state.plan_e)
        return state.phase_record(self.name, since, rounds=rounds, searches=len(searches))


def search_starts(state: SolveState) -> list:
    """The plans the searches start from: the plan held, if a rule made it, and a cover-guided plan of
    another rule, or else the cheapest plans of other rules (a plan no rule made has no guide)."""
    plan = state.plan
    guided = [p for p in state.rule_plans if p is not plan and p.rule and p.rule[1]][:1]
    others = sorted(
        (
            p
            for p in state.rule_plans
            if p is not plan and p.rule and not p.rule[1] and p.rule[0] != (plan.rule or ("",))[0]
        ),
        key=state.energy,
    )
    return ([plan] if plan.rule else []) + (guided or others[: 1 if plan.rule else 2])


def plan_searches(state: SolveState) -> SearchPlan:
    """Whether the MILP may follow the searches, and why the interval search will not run (if not).
    When the MILP may not fit the time left by the estimate, it is built now to know its size."""
    g, policy, rest = state.g, state.policy, state.time.left()
    n = len(g.nodes)
    milp_follows = state.method != "heuristic"
    intervals_skip = None
    if not policy.interval_min_nodes <= n <= policy.interval_max_nodes:
        intervals_skip = f"{n:,} nodes, outside policy.interval_min_nodes to interval_max_nodes"
    elif not intervals.available():
        intervals_skip = "OR-Tools is not installed"
    elif rest is not None and rest < policy.interval_min_rest_s:
        intervals_skip = f"{rest:.1f} s left, under policy.interval_min_rest_s"
    if milp_follows and rest is not None and 0.5 * rest < policy.milp_setup_seconds(policy.estimated_milp_nonzeros(n)):
        # it may not fit: built now to know its size.  When HiGHS could not even set it up in the half of
        # the time left that the search would leave it, the search gets that time
        state.milp = build_milp(state)
        milp_follows = policy.milp_setup_seconds(state.milp.problem.num_nonzeros) <= 0.5 * state.time.left()
    return SearchPlan(milp_follows, intervals_skip)
