"""What one solve of the portfolio holds while its phases run: :class:`SolveState`, and :class:`Phase`.

Every phase (one module each in :mod:`poet.solve.phases`) reads and extends the state: the best stage
plan held and where it came from (:class:`Origin`), the schedules held besides it (the one-pass paging
schedule, the Capuchin-style schedule), the eviction cover's bound and guide, the MILP once built and
run, the report's notes and the phases' records.  :func:`poet.solve.phases.answer.answer` turns what
they found into the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ...schedule.report import PhaseRecord, SolveReport
from ..bounds import CoverResult, eviction_cover
from ..errors import SolveError
from ..lp.problem import MilpResult
from ..milp.formulation import Formulation
from ..options import METHODS, SolveOptions
from ..policy import SolvePolicy, TimeBudget
from ..progress import report_progress
from ..result import relative_gap
from ..search.stream import StreamResult
from ..stage.plan import Plan, plan_costs


class Origin(StrEnum):
    """Where an answer came from: the ``method`` of the report names it (``+bound`` when it meets the
    proven bound within the gap)."""

    GREEDY = "greedy"  # a greedy rule's plan, or the guide search's, or the deadline search's
    GAP_DROPS = "gap-drops"  # the idle-gap recomputation plan
    INTERVALS = "intervals"  # the interval search (CP-SAT)
    ONE_PASS = "one-pass paging"  # the one-pass paging schedule
    CAPUCHIN = "capuchin"  # the Capuchin-style schedule
    MILP = "milp"  # the MILP (its method: milp-fast, milp-warm, milp-faithful)
    BOUND = "bound"  # no schedule: the bound proved the budgets infeasible
    STREAMING_PAGE_RULE = "streaming page rule"  # a tiled graph too large for the portfolio
    TILING_FALLBACK = "streaming page rule (tiling fallback)"  # a tiled graph the portfolio found nothing for
    WINDOWS = "window re-solve"  # the best plan's schedule improved a window of stages at a time


@dataclass(frozen=True)
class SearchPlan:
    """What follows the guide search, decided before it starts (its share of the time depends on it)."""

    milp_follows: bool
    intervals_skip: str | None  # why the interval search will not run (None: it will, while the gap is open)


@dataclass(frozen=True)
class MilpSkip:
    """The MILP was not started: HiGHS could not have set it up in the time left."""

    rest_s: float  # seconds left
    need_s: float  # seconds HiGHS needs to set it up, by policy.milp_setup_s_per_nonzero
    nonzeros: int
    estimated: bool  # the nonzeros are the estimate's: it was not even built


@dataclass
class SolveState:
    """One solve of the portfolio, from its first phase to its answer (the module docstring)."""

    g: CostedGraph
    budget: Budget
    opts: SolveOptions
    strategy: str
    remat: bool
    paging: bool
    method: str  # the method that runs: auto already resolved to fast or heuristic
    time: TimeBudget  # the phases' time: the limit less what emitting and validating the answer takes
    full_time: TimeBudget  # the limit itself, from the same start (the smallest budgets' MILPs count on it)
    started: float  # the clock when the solve began (the answer's solve_seconds count from it)
    report: SolveReport
    records: list[PhaseRecord] = field(default_factory=list)
    # the best stage plan held, its energy and where it came from
    plan: Plan | None = None
    plan_e: float | None = None
    origin: Origin = Origin.GREEDY
    rules_plan: Plan | None = None  # the greedy rules' (or the deadline search's) cheapest plan
    rule_plans: list[Plan] = field(default_factory=list)  # each rule's cheapest plan: the guide search's starts
    nearest: Plan | None = None  # the plan that overruns the deadline least, when no rule's plan meets it
    stream: StreamResult | None = None  # the one-pass paging schedule, when it found one
    capuchin: Schedule | None = None  # the Capuchin-style schedule, validated, when it found one
    cover: CoverResult | None = None  # the eviction cover's bound and guide
    residency_large: bool = False  # the residency ILP was too large for the lower-bound phase (phases/residency.py)
    t_min: float | None = None  # the runtime cover's bound (the shortest runtime any schedule needs), once computed
    searches: SearchPlan | None = None  # set when the guide search ran
    milp: Formulation | None = None  # the MILP, once built
    milp_result: MilpResult | None = None  # HiGHS's answer, when it ran
    milp_skip: MilpSkip | None = None
    fallback: StreamResult | None = None  # the tiling fallback's page rule, when it ran
    polished: StreamResult | None = None  # the best plan's schedule after the window polish, when cheaper

    @classmethod
    def start(cls, g: CostedGraph, budget: Budget, opts: SolveOptions, *, strategy: str, remat: bool, paging: bool):
        method = getattr(opts, "method", "auto") or "auto"
        if method not in METHODS:
            raise SolveError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if method == "auto":
            method = "fast" if len(g.nodes) <= opts.policy.auto_max_nodes else "heuristic"
        report = SolveReport(
            requested_method=opts.method, requested_gap=opts.gap, time_limit_s=opts.time_limit_s, threads=opts.threads
        )
        started = opts.clock()
        unset = TimeBudget(None, opts.clock)  # (set next)
        state = cls(g, budget, opts, strategy, remat, paging, method, unset, unset, started, report)
        state.restart_clock(opts.time_limit_s)
        return state

    # -- the rules every phase reads -----------------------------------------------------------------
    @property
    def policy(self) -> SolvePolicy:
        return self.opts.policy

    @property
    def tiled_rules(self) -> bool:
        """The graph is a tiling of a zoo model solved by the poet strategy: the size rule and the
        streaming fallback apply."""
        return self.opts.tiled and self.strategy == "poet"

    @property
    def size_rule(self) -> str | None:
        """Why the portfolio is not tried at all (only the one-pass paging schedule, as the streaming
        page rule): a tiled graph too large for it to answer in minutes; None otherwise."""
        n, most = len(self.g.nodes), self.policy.tiled_portfolio_max_nodes
        if not self.tiled_rules or n <= most:
            return None
        return f"the tiled graph has {n:,} nodes, more than the portfolio answers in minutes ({most:,})"

    def searches_skip(self) -> str | None:
        """Why none of the searches for plans runs (the greedy rules and the searches after them): a tiled
        graph too large for the portfolio, the faithful method, or a deadline proven out of reach."""
        if self.size_rule:
            return self.size_rule
        if self.method == "faithful":
            return "the faithful method runs the MILP alone"
        if self.infeasible:
            return "the eviction cover proved the deadline out of reach"
        return None

    @property
    def lb(self) -> float:
        """The eviction cover's bound (0 before it ran)."""
        return 0.0 if self.cover is None else self.cover.bound

    @property
    def infeasible(self) -> bool:
        """The cover proved that no eviction set meets the deadline."""
        return self.cover is not None and not math.isfinite(self.cover.bound)

    def gap(self) -> float | None:
        """The gap of the plan held to the cover's bound (None without a plan)."""
        return None if self.plan_e is None else relative_gap(self.plan_e, self.lb)

    def plan_proven(self) -> bool:
        """The plan held is within the gap asked for of the cover's bound."""
        gap = self.gap()
        return gap is not None and gap <= self.opts.gap

    def target(self) -> float:
        """The energy at which a plan is proven within the gap asked for: the searches stop there."""
        return self.lb / (1 - self.opts.gap) if self.opts.gap < 1 else math.inf

    def capuchin_proven(self) -> bool:
        """The Capuchin-style schedule is within the gap of the cover's bound."""
        e = None if self.capuchin is None else self.capuchin.totals.energy_j
        return e is not None and self.cover is not None and e - self.lb <= self.opts.gap * e

    def stopped(self) -> bool:
        """Asked to end early: the best plan held is the answer."""
        return self.opts.stop is not None and bool(self.opts.stop())

    def has_schedule(self) -> bool:
        """A schedule is held (a plan, the one-pass or the Capuchin-style schedule, or the MILP's)."""
        milp_found = self.milp_result is not None and self.milp_result.x is not None
        return self.plan is not None or self.stream is not None or self.capuchin is not None or milp_found

    # -- what the phases change ----------------------------------------------------------------------
    def energy(self, plan: Plan) -> float:
        return plan_costs(self.g, plan, self.budget.paging_time)[0]

    def offer(self, plan: Plan | None, origin: Origin, wins_ties: bool = False) -> bool:
        """Hold ``plan`` if it is cheaper than the plan held (or as cheap, with ``wins_ties``)."""
        if plan is None:
            return False
        e = self.energy(plan)
        if self.plan_e is not None and not (e < self.plan_e or (wins_ties and e == self.plan_e)):
            return False
        self.plan, self.plan_e, self.origin = plan, e, origin
        return True

    def restart_clock(self, limit_s: float | None) -> None:
        """The phases share ``limit_s`` from now on, less what emitting and validating the answer will
        take on a graph this size (a prelude's time came out of the limit)."""
        reserve = self.policy.finish_reserve(limit_s, len(self.g.nodes))
        self.full_time = TimeBudget(limit_s, self.opts.clock)
        self.time = TimeBudget(None if limit_s is None else limit_s - reserve, self.opts.clock, self.full_time.start)

    def note(self, **changes) -> None:
        """Set fields of the report (the names are checked: a misspelt field raises)."""
        self.report = self.report.with_(**changes)

    def phase_record(self, name: str, since: float, **facts) -> PhaseRecord:
        """A phase ended: how long since ``since`` (``time.elapsed()``), the best energy held, its facts."""
        return PhaseRecord(name, self.time.elapsed() - since, self.plan_e, MappingProxyType(facts))

    def record(self, name: str, since: float, **facts) -> None:
        """A step within a phase ended (the MILP's build, the smallest budgets): recorded at once, in order."""
        self.records.append(self.phase_record(name, since, **facts))

    def progress(self, phase: str, **d) -> None:
        report_progress(self.opts, phase, **d)

    # -- the time each phase gets (SolvePolicy's shares of what the limit leaves) -----------------------
    def cover_seconds(self, share_left: float = 1.0) -> float:
        """The eviction cover's time (``policy.cover_time``), at most ``share_left`` of what the time
        limit leaves (0.5 s at least: a cover cut short still bounds validly)."""
        t, left = self.policy.cover_time(self.time.limit_s), self.time.left()
        return t if left is None else min(t, max(0.5, share_left * left))

    def rules_seconds(self) -> float | None:
        return self.policy.rules_time(self.time.limit_s, self.time.elapsed())

    def search_seconds(self, milp_follows: bool, share: float | None = None) -> float:
        return self.policy.search_time(self.time.limit_s, self.time.elapsed(), milp_follows, share)

    def interval_seconds(self) -> float:
        return self.policy.interval_time(self.time.limit_s, self.time.elapsed())

    def runtime_cover(self) -> float:
        """A proven lower bound on the runtime of any schedule within the RAM budget (the runtime cover),
        kept as ``t_min``."""
        if self.t_min is None:
            self.t_min = self.runtime_cover_with_guide()[0]
        return self.t_min

    def runtime_cover_with_guide(self) -> tuple[float, dict]:
        """The runtime cover's bound and the fastest eviction set, which attains it."""
        cover = eviction_cover(
            self.g,
            self.budget,
            remat=self.remat,
            paging=self.paging,
            objective="time",
            time_limit=self.cover_seconds(),
            stop=self.opts.stop,
            policy=self.policy,
        )
        return cover.bound, dict(cover.guide)


class Phase(Protocol):
    """One step of the portfolio: it runs unless ``skip_reason`` gives a reason, and returns its record."""

    name: str

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None: ...

    def run(self, state: SolveState) -> PhaseRecord: ...
