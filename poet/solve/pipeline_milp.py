"""The common part of :class:`poet.solve.pipeline.Pipeline`: the state of one solve, its record,
the helpers every phase uses, the last phase (the MILP, :meth:`PipelineCore.milp`) and the answer
built from what the phases found (:meth:`PipelineCore.plan_result`, :meth:`PipelineCore.bound_result`).

:class:`PipelineCore` runs nothing on its own: :class:`~poet.solve.pipeline.Pipeline` inherits from it
and adds the phases before the MILP (the cover, the greedy rules, the searches) and their order.
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


class PipelineCore:
    """One solve of the stage form, without its phases before the MILP (:class:`~poet.solve.pipeline.Pipeline`
    adds them): the best plan held (``plan``, ``plan_e``), what the phases found, the record in
    ``report``, the MILP phase and the answers."""

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
        # the phases' time: the limit less what emitting and validating the answer will take on a graph this size
        limit = opts.time_limit_s
        self.time = TimeBudget(
            None if limit is None else limit - self.policy.finish_reserve(limit, len(g.nodes)), opts.clock
        )
        self.plan: Plan | None = None  # the best plan held
        self.plan_e: float | None = None  # its energy
        self.origin = "greedy"  # what found the plan held: the greedy (and its guide search), "gap-drops"
        #                            or "intervals"
        self.gap_plan: Plan | None = None  # the idle-gap recomputation plan, held from the start
        self.stream: tuple[tuple, float] | None = None  # the one-pass paging schedule's steps and energy
        self.resident_pairs = 0  # its tensors resident summed over the nodes (the greedy runs' size)
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
        t, left = self.policy.cover_time(self.time.limit_s), self.time.left()
        return t if left is None else min(t, max(0.5, share_left * left))

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

    # -- the last phase ----------------------------------------------------------------------------
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
        if res.x is None and self.stream is not None and res.status != INFEASIBLE:
            return self.plan_result()  # no schedule of the MILP's own: the one-pass one is held
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
        steps = None
        if self.stream is not None and (plan_e is None or self.stream[1] < plan_e):
            # the one-pass paging schedule (large graphs) is the cheapest held
            steps, plan_e, origin = self.stream[0], self.stream[1], "one-pass paging"
            self.plan_e = plan_e
        gap = self.gap()
        proven = gap is not None and gap <= self.opts.gap
        message = (
            "no schedule found by the greedy"
            if plan is None and steps is None
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
        if plan is None and steps is None:
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
        return self.schedule(emit(self.g, plan) if steps is None else steps, OPTIMAL if proven else FEASIBLE)
