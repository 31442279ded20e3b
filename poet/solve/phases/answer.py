"""The answer of a solve, from what its phases found: the cheapest schedule held, with its gap to the best
proven bound, or no schedule with the reason and, where computed, the smallest feasible budgets.

In order: a tiled graph too large for the portfolio gets the streaming page rule's schedule
(:func:`size_rule_answer`); otherwise the bound's verdict (:func:`bound_answer`), the MILP's answer
(:func:`milp_answer`) or the best plan held (:func:`plan_answer`); then the one-pass schedule where it
beats the MILP's (:func:`with_one_pass`), the Capuchin-style schedule where it is cheaper
(:func:`with_capuchin`), and the tiling fallback's where nothing else was found
(:func:`with_fallback`).  The report's ``method`` names the :class:`~poet.solve.phases.state.Origin`.
"""

from __future__ import annotations

import dataclasses
import math

from ...schedule.core import FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL, Schedule
from ...schedule.report import MilpStats, MinBudgets
from ...units import fmt_bytes, fmt_seconds
from ..milp.warm_start import decode
from ..result import checked, relative_gap
from ..stage.emit import emit
from .state import Origin, SolveState


def answer(state: SolveState) -> Schedule:
    """The solve's answer (the module docstring), timed from its start, with every phase's record."""
    if state.size_rule:
        s = size_rule_answer(state)
    else:
        s = with_fallback(with_capuchin(with_one_pass(portfolio_answer(state), state), state), state)
    s.report = s.report.with_(solve_seconds=state.opts.clock() - state.started, phases=tuple(state.records))
    return s


def portfolio_answer(state: SolveState) -> Schedule:
    if state.infeasible:
        return bound_answer(state)
    if state.milp_result is not None:
        return milp_answer(state)
    return plan_answer(state)


def schedule(state: SolveState, steps, status: str) -> Schedule:
    """A schedule of the state's problem with the report so far (and the runtime cover's bound, if it ran)."""
    mb = state.report.min_budgets
    if state.t_min is not None and mb.runtime_s_lower_bound is None:  # the runtime cover ran on the way
        state.note(min_budgets=dataclasses.replace(mb, runtime_s_lower_bound=state.t_min))
    g, budget, strategy = state.g, state.budget, state.strategy
    return Schedule(graph=g, budget=budget, steps=tuple(steps), status=status, strategy=strategy, report=state.report)


def bound_answer(state: SolveState) -> Schedule:
    """No set of evictions that makes RAM fit leaves enough time: the deadline is out of reach."""
    budget = state.budget
    state.note(
        method=Origin.BOUND.value,
        message=(
            f"the deadline {fmt_seconds(budget.runtime_s)} is too short for "
            f"{fmt_bytes(budget.ram_bytes)} of RAM (proven by the eviction cover)"
        ),
    )
    if state.report.min_budgets == MinBudgets():  # the smallest budgets were not computed
        state.note(min_budgets=MinBudgets(runtime_s_lower_bound=state.runtime_cover()))
    return schedule(state, (), INFEASIBLE)


def plan_answer(state: SolveState) -> Schedule:
    """The cheapest schedule held besides the MILP's (the best plan, or the one-pass schedule), with its
    gap to the structural bound; where the MILP was not started, the status detail and message say why."""
    budget, plan, energy, origin = state.budget, state.plan, state.plan_e, state.origin
    steps = None
    if state.stream is not None and (energy is None or state.stream.energy_j < energy):
        # the one-pass paging schedule (large graphs) is the cheapest held
        steps, energy, origin = state.stream.steps, state.stream.energy_j, Origin.ONE_PASS
    if state.polished is not None and (energy is None or state.polished.energy_j < energy):
        steps, energy, origin = state.polished.steps, state.polished.energy_j, Origin.WINDOWS
    below = energy is not None and below_bound(energy, state.lb)
    lb = state.g.plain_energy_j if below else state.lb
    gap = None if energy is None or below else relative_gap(energy, lb)
    proven = gap is not None and gap <= state.opts.gap
    if plan is None and steps is None:
        message = "no schedule found by the greedy"
    elif below:
        message = (
            f"feasible {origin} schedule in another order than the graph's, {energy:.6g} J: below the proven "
            f"bound for schedules in the graph's order ({state.lb:.6g} J), so cheaper than any of them; "
            "no bound covers other orders: optimality unknown"
        )
    elif proven:
        message = f"optimal: the {origin} schedule is within {gap:.2e} of the structural lower bound"
    else:
        message = f"feasible {origin} schedule, {gap:.2%} above the structural lower bound"
    state.note(
        method=origin + "+bound" if proven else origin.value,
        milp=None,
        gap=gap,
        energy_j=energy,
        bound_energy_j=lb,
        message=message,
    )
    skip = state.milp_skip
    if skip is not None:
        state.note(
            milp_skipped=True,
            status_detail=f"{skip.rest_s:.1f} s left, too few to start the MILP (about {skip.need_s:.0f} s)",
            message=message
            + (
                f"; the MILP was not started: {skip.rest_s:.1f} s of the time limit were left, and "
                f"HiGHS needs about {skip.need_s:.0f} s to set up a MILP of "
                f"{'about ' * skip.estimated}{skip.nonzeros:,} nonzeros (a longer --time-limit lets "
                f"it run)"
            ),
        )
    if plan is None and steps is None:
        if budget.runtime_s is not None:
            near = state.report.nearest_runtime_s
            state.note(
                min_budgets=MinBudgets(runtime_s_lower_bound=state.runtime_cover()),
                message=(
                    f"no schedule found within the deadline {fmt_seconds(budget.runtime_s)}"
                    + (f" (the nearest found takes {fmt_seconds(near)})" if near else "")
                    + "; a longer deadline or more RAM will help"
                ),
            )
        return schedule(state, (), NO_SOLUTION)
    return schedule(state, emit(state.g, plan) if steps is None else steps, OPTIMAL if proven else FEASIBLE)


def milp_message(res, strategy: str) -> str:
    """What a MILP result means, in a sentence."""
    if res.status == OPTIMAL:
        return f"optimal (proven relative gap {res.gap:.2e})"
    if res.status == FEASIBLE:
        return f"feasible; optimality not proven (relative gap {res.gap:.2%}): {res.detail}"
    if res.status == INFEASIBLE:
        return f"no {strategy} schedule meets both budgets (proven infeasible)"
    return f"no schedule found before the solver stopped ({res.detail})"


def milp_backend(res, asked: str) -> str:
    """The backend whose schedule the MILP phase returned: on a small tiled graph CP-SAT runs first and
    HiGHS after it (``found_by``), whatever backend was asked for; the neighbourhood search between them
    solves its sub-MILPs on CP-SAT."""
    return {"CP-SAT": "cpsat", "HiGHS": "highs", "neighbourhoods": "cpsat"}.get(res.extra.get("found_by"), asked)


def milp_answer(state: SolveState) -> Schedule:
    """The better of the MILP's answer and the plan held, its gap against the better of the solver's bound
    and the structural one."""
    res, f, opts, lb = state.milp_result, state.milp, state.opts, state.lb
    p = f.problem
    bound = None if res.bound is None or not math.isfinite(res.bound) else res.bound * f.energy_unit
    obj = None if res.objective is None else res.objective * f.energy_unit
    state.note(
        method=f"{Origin.MILP}-{state.method}",
        status_detail=res.detail,
        gap=res.gap,
        energy_j=obj,
        bound_energy_j=bound,
        message=milp_message(res, state.strategy),
        milp=MilpStats(
            milp_backend(res, opts.backend), p.num_cols, int(p.integer.sum()), p.num_rows, p.num_nonzeros, res.seconds
        ),
    )
    if res.x is None and state.plan is not None and res.status != INFEASIBLE:
        # the solver stopped without an incumbent of its own: the plan held is the best found
        best_lb = max(lb, bound or 0.0)
        gap = relative_gap(state.plan_e, best_lb)
        state.note(
            gap=gap,
            energy_j=state.plan_e,
            bound_energy_j=best_lb,
            message=f"feasible greedy schedule; gap {gap:.2%} to the best proven bound ({res.detail})",
        )
        return schedule(state, emit(state.g, state.plan), OPTIMAL if gap <= opts.gap else FEASIBLE)
    if res.x is None and state.stream is not None and res.status != INFEASIBLE:
        return plan_answer(state)  # no schedule of the MILP's own: the one-pass one is held
    if res.x is None:
        return schedule(state, (), res.status if res.status != OPTIMAL else NO_SOLUTION)
    status = res.status
    if obj is not None and (bound is None or lb > bound):
        # the structural bound is stronger than the solver's: the gap is measured against it
        gap = relative_gap(obj, lb)
        if res.gap is None or gap < res.gap:
            state.note(gap=gap, bound_energy_j=lb)
            if status == FEASIBLE and gap <= opts.gap:
                status = OPTIMAL
                state.note(
                    message=(
                        f"optimal (relative gap {gap:.2e} to the structural lower bound; "
                        f"the solver stopped with {res.detail})"
                    )
                )
            elif status == FEASIBLE:
                state.note(
                    message=f"feasible; not proven optimal: gap {gap:.2%} to the structural lower bound ({res.detail})"
                )
    return schedule(state, emit(state.g, decode(f, res.x)), status)


def below_bound(energy: float, bound: float) -> bool:
    """A schedule below the proven bound, past the bounds' rounding: one in another order than the graph's,
    which the bounds (for the graph's order) do not cover; its answer claims no gap, its bound the plain
    energy (every node computed once: what bounds any order)."""
    return energy < bound * (1 - 1e-6)


def with_one_pass(s: Schedule, state: SolveState) -> Schedule:
    """Where the MILP answered, the one-pass schedule (or the window-polished one) when it is cheaper (the
    plan answer weighs them already): in the order the order search found, which the MILP's stage form
    (the graph's order) does not have.  Its gap is against the best proven bound; those bounds are for
    schedules in the graph's order, so one below them gets no gap."""
    held = [x for x in (state.stream, state.polished) if x is not None and x.found]
    if state.milp_result is None or not held or (not s.steps and s.status != INFEASIBLE):
        return s
    best = min(held, key=lambda x: x.energy_j)
    mine = checked(s).totals.energy_j if s.steps else math.inf
    if best.energy_j >= mine:
        return s
    rep, e = s.report, best.energy_j
    lb = max(x for x in (rep.bound_energy_j, rep.structural_bound_energy_j, state.g.plain_energy_j) if x is not None)
    gap = None if below_bound(e, lb) else relative_gap(e, lb)
    status = OPTIMAL if gap is not None and gap <= state.opts.gap else FEASIBLE
    if gap is None:
        message = (
            f"the one-pass schedule in a searched order ({e:.6g} J) is below the proven bound ({lb:.6g} J), "
            "which holds for schedules in the graph's order only: optimality unknown"
        )
        lb = state.g.plain_energy_j
    else:
        theirs = "the MILP found none" if not s.steps else f"the MILP's best: {mine:.6g} J"
        message = (
            f"the one-pass schedule in a searched order beat the MILP's ({theirs}); gap {gap:.2%} to the proven bound"
        )
    origin = Origin.ONE_PASS if best is state.stream else Origin.WINDOWS
    rep = rep.with_(
        gap=gap,
        bound_energy_j=lb,
        energy_j=e,
        message=message,
        incumbent=origin.value,
        superseded_method=rep.method,
        method=origin + "+bound" if status == OPTIMAL else origin.value,
    )
    return Schedule(graph=state.g, budget=s.budget, steps=best.steps, status=status, strategy=s.strategy, report=rep)


def with_capuchin(s: Schedule, state: SolveState) -> Schedule:
    """The portfolio's answer, or the Capuchin-style schedule where that is cheaper, with an honest gap."""
    h = state.capuchin
    if h is None:
        return s
    g, opts = s.graph, state.opts
    mine = checked(s).totals.energy_j if s.steps else math.inf
    if h.totals.energy_j >= mine:
        return s
    rep = s.report
    e = h.totals.energy_j
    if s.status == INFEASIBLE and not s.steps:
        # proven impossible in the stage model, yet a freely ordered schedule fits
        rep = rep.with_(
            gap=None,
            bound_energy_j=None,
            message=(
                "the MILP's stage model has no schedule here, but the Capuchin-style heuristic's "
                "freely ordered one fits; optimality unknown"
            ),
        )
        status = FEASIBLE
    else:
        lb = max(x for x in (rep.bound_energy_j, rep.structural_bound_energy_j, g.plain_energy_j) if x is not None)
        gap = relative_gap(e, lb)
        status = OPTIMAL if gap <= opts.gap else FEASIBLE
        rep = rep.with_(
            gap=gap,
            bound_energy_j=lb,
            message=(
                f"the Capuchin-style heuristic's schedule beat the solver's best ({mine:.6g} J); "
                f"gap {gap:.2%} to the proven bound"
            ),
        )
    # the schedule is the heuristic's; say so, and how it was proven when it was
    rep = rep.with_(
        energy_j=e,
        incumbent=Origin.CAPUCHIN.value,
        superseded_method=rep.method,
        method=Origin.CAPUCHIN + "+bound" if status == OPTIMAL else Origin.CAPUCHIN.value,
    )
    return Schedule(graph=g, budget=s.budget, steps=h.steps, status=status, strategy=s.strategy, report=rep)


def with_fallback(s: Schedule, state: SolveState) -> Schedule:
    """Where the portfolio ended without a schedule on a tiled graph, the fallback page rule's schedule,
    with its gap to the best proven bound (every node is computed at least once: plain energy is one)."""
    found = state.fallback
    if found is None or not found.found or s.steps or s.status != NO_SOLUTION:
        return s
    rep = s.report
    bound = max(state.g.plain_energy_j, rep.structural_bound_energy_j or 0.0, rep.bound_energy_j or 0.0)
    gap = relative_gap(found.energy_j, bound)
    report = rep.with_(
        method=Origin.TILING_FALLBACK.value,
        energy_j=found.energy_j,
        bound_energy_j=bound,
        gap=gap,
        message=(
            f"the portfolio found no schedule in its time ({rep.message}); the page rule on the tiled "
            f"graph's streaming order did, {gap:.2%} above the proven lower bound"
        ),
    )
    status = OPTIMAL if gap <= state.opts.gap else FEASIBLE
    return dataclasses.replace(s, steps=found.steps, status=status, totals=None, report=report)


def size_rule_answer(state: SolveState) -> Schedule:
    """A tiled graph too large for the portfolio: the streaming page rule's schedule (the one-pass paging
    schedule), reported as what it is, with its gap to plain backprop energy (every node once, nothing
    paged: a lower bound of any schedule)."""
    why, plain, found = state.size_rule, state.g.plain_energy_j, state.stream
    state.note(method=Origin.STREAMING_PAGE_RULE.value, bound_energy_j=plain)
    if found is None:
        state.note(
            message=f"{why}; the streaming page rule found no schedule within the budgets "
            "(paging breaks the deadline, or its time ran out): a longer deadline or more RAM will help"
        )
        return schedule(state, (), NO_SOLUTION)
    gap = relative_gap(found.energy_j, plain)
    windows = next((r.facts for r in state.records if r.name == "window re-solve" and "saved_j" in r.facts), None)
    improved = "" if windows is None else f", improved by {windows['kept']} window re-solves"
    state.note(
        energy_j=found.energy_j,
        gap=gap,
        message=f"{why}; the streaming page rule's schedule{improved} is {gap:.2%} above the lower bound "
        "(plain backprop: every node once, nothing paged)",
    )
    return schedule(state, found.steps, OPTIMAL if gap <= state.opts.gap else FEASIBLE)
