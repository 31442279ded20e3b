"""The greedy rules (:mod:`poet.solve.search.greedy`), guided by the cover; when they all overrun the
deadline, guided by covers for stricter deadlines and by the fastest eviction set.

When the cover's evictions already take nearly all of the deadline's slack (``slack_used`` at least
``policy.deadline_bound_share``), the deadline's guides run first: the rules' plans, which restore some
tensors more than once, tend to overrun it (all of them on the op-level ResNets on the a72 at 1.2x,
minutes of runs on 4,818 nodes).  docs/pipeline.md ("Greedy rules") has the measurements.
"""

from __future__ import annotations

import math

from ...schedule.core import Budget
from ...schedule.report import PhaseRecord
from ..bounds import eviction_cover
from ..policy import SolvePolicy
from ..search.greedy import best_greedy, checkpointed, rule_names
from ..stage.plan import Plan, plan_costs
from .state import Origin, SolveState


class GreedyRules:
    name = "greedy rules"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches_skip():
            return state.searches_skip()
        rules_s = state.rules_seconds()
        if state.stream is not None and rules_s is not None:
            # not even one run would end in time (its time grows with the tensors resident per stage,
            # which the one-pass schedule counted): the one-pass schedule (or the idle-gap plan) is held
            pairs = state.stream.resident_pairs or 0
            need = max(policy.greedy_s_per_node * len(state.g.nodes), policy.greedy_s_per_pair * pairs)
            if rules_s < need:
                return f"{rules_s:.1f} s left, a run takes about {need:.0f} s"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        lb, since, cover = state.lb, state.time.elapsed(), state.cover
        deadline_bound = (cover.slack_used or 0.0) >= state.policy.deadline_bound_share
        state.note(deadline_bound=deadline_bound)
        if deadline_bound:
            guided: list = []
            plan, nearest = deadline_guided(state, guided, None)
            state.progress("greedy rules", bound=lb, objective=None if plan is None else state.energy(plan))
            missed: list = []
            plan = cheaper(
                state,
                plan,
                rules(state, guide=cover.guide, per_rule=state.rule_plans, closest=missed if plan is None else None),
            )
            nearest = nearer(state, nearest, missed)
            state.rule_plans += guided
        else:
            state.progress("greedy rules", bound=lb)
            missed = []
            plan = rules(state, guide=cover.guide, per_rule=state.rule_plans, closest=missed)
            nearest = nearer(state, None, missed)
            if plan is None and nearest is not None:  # every rule overran the deadline
                plan, nearest = deadline_guided(state, state.rule_plans, nearest)
        state.rules_plan, state.nearest = plan, nearest
        rec = state.phase_record(self.name, since, rule_plans=len(state.rule_plans), deadline_bound=deadline_bound)
        state.offer(plan, Origin.GREEDY, wins_ties=True)  # the idle-gap plan only when it is cheaper
        if state.plan is not None:
            state.note(heuristic_energy_j=state.plan_e)
        return rec


class DeadlineSearch:
    """Every rule overran the deadline: search the guide of the nearest miss until one meets it."""

    name = "deadline search"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches_skip():
            return state.searches_skip()
        if state.rules_plan is not None:
            return "a rule's plan meets the deadline"
        if state.nearest is None:
            return "no rule's plan overran the deadline"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        from ..search.guides import search_guides

        g, budget = state.g, state.budget
        state.progress("searching for a schedule within the deadline", bound=state.lb)
        since = state.time.elapsed()
        cand = search_guides(
            g,
            budget,
            state.nearest,
            remat=state.remat,
            paging=state.paging,
            target_energy=math.inf,
            stop=state.opts.stop,
            time_limit=state.search_seconds(state.method != "heuristic"),
        )
        miss = plan_costs(g, cand, budget.paging_time)[1]
        met = miss <= budget.runtime_s * (1 + 1e-9)
        if met:
            state.rules_plan = cand
            state.offer(cand, Origin.GREEDY, wins_ties=True)
            state.note(heuristic_energy_j=state.plan_e)
        else:
            state.note(nearest_runtime_s=miss)
        return state.phase_record(self.name, since, met=met, runtime_s=miss)


def rules(state: SolveState, **kw) -> Plan | None:
    """The cheapest plan of a run of the greedy rules (:func:`best_greedy`), in the time left."""
    return best_greedy(
        state.g,
        state.budget,
        remat=state.remat,
        paging=state.paging,
        stop=state.opts.stop,
        time_limit=state.rules_seconds(),
        **kw,
    )


def cheaper(state: SolveState, a: Plan | None, b: Plan | None) -> Plan | None:
    return b if a is None or (b is not None and state.energy(b) < state.energy(a)) else a


def nearer(state: SolveState, held: Plan | None, missed: list) -> Plan | None:
    """The plan that overruns the deadline less: ``held``, or the nearest miss of a run of the rules
    (``missed``, filled by :func:`best_greedy`), which replaces it only when strictly nearer."""
    if not missed:
        return held
    g, pt = state.g, state.budget.paging_time
    if held is None or plan_costs(g, missed[0], pt)[1] < plan_costs(g, held, pt)[1]:
        return missed[0]
    return held


def deadline_guided(state: SolveState, per_rule: list, nearest: Plan | None) -> tuple[Plan | None, Plan | None]:
    """Guide two rules by the energy cover's eviction set for a stricter deadline, then each rule by the
    fastest eviction set (the runtime cover's), its tensors evicted first only until their first
    restoration: the cheapest plan, and the nearest miss (``nearest`` or nearer).  ``per_rule``
    receives each rule's cheapest plan."""
    state.progress("greedy rules for the deadline", bound=state.lb)
    t_min, fast_guide = state.runtime_cover_with_guide()
    state.t_min = t_min
    strict = tightened_guides(state, t_min, state.time.left())
    plan = None
    for runs in (
        [(r, gd, False) for gd in strict for r in ("energy", "remat")],
        [(r, fast_guide, True) for r in rule_names(state.remat, state.paging)],
    ):
        missed: list = []
        plan = cheaper(state, plan, rules(state, per_rule=per_rule, closest=missed, rules=runs))
        nearest = nearer(state, nearest, missed)
    return plan, nearest


def tightened_guides(state: SolveState, t_min: float, time_left: float | None) -> list[dict]:
    """The energy cover's guide for a deadline stricter than the real one, as it is and checkpointed:
    room for the restorations the cover does not see (a chain rebuilt more than once).  The cover gets
    at most half of ``time_left``; none when that is under a second."""
    budget = state.budget
    if budget.runtime_s is None or not math.isfinite(t_min) or t_min >= budget.runtime_s:
        return []
    seconds = state.cover_seconds() if time_left is None else min(state.cover_seconds(), 0.5 * time_left)
    if seconds < 1.0:
        return []
    strict = Budget(
        budget.ram_bytes,
        t_min + state.policy.tightened_deadline_share * (budget.runtime_s - t_min),
        budget.paging_time,
    )
    cover = eviction_cover(
        state.g, strict, remat=state.remat, paging=state.paging, time_limit=seconds, policy=state.policy
    )
    guide = dict(cover.guide)
    if not math.isfinite(cover.bound) or not guide:
        return []
    # checkpointed first: their runs take seconds on 4,818 nodes, the guide's as it is 45 s each
    return [ck for every in (3, 4, 6) if (ck := checkpointed(state.g, guide, every))] + [guide]
