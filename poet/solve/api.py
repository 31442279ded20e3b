"""The front door: ``poet.solve(model, device, memory=..., runtime=...)``, the path ``poet solve`` takes too.

:func:`plan_and_solve` is that path: it prices the source and tiles it when the RAM budget needs it
(:func:`~poet.solve.problem.tiled_problem`), gives a tiled graph its default time limit and takes the
time planning the tiles took out of the limit (``SolvePolicy.tiled_time_limit_s``,
``tiled_min_solve_share``), then solves (:func:`solve_costed`: the cache, then the strategy).
:func:`solve` returns its schedule; ``poet solve`` also reports the tiling and the limits it returns.

Every strategy returns the same :class:`~poet.schedule.Schedule`, and every
schedule with steps has been replayed by the independent validator before it
is returned; a strategy whose schedule does not validate is a bug and raises.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from dataclasses import dataclass
from types import SimpleNamespace

from ..graph.core import CostedGraph
from ..graph.tiling_plan import TILE_AUTO
from ..schedule.core import INFEASIBLE, PAGING_SERIAL, Budget, Schedule
from ..schedule.report import MinBudgets, SolveReport
from ..units import BudgetError, fmt_bytes
from . import cache as disk
from . import headroom
from .options import SolveOptions
from .policy import DEFAULT_POLICY, SolvePolicy, available_ram_bytes
from .problem import TiledProblem, costed_graph, make_budget, tiled_problem
from .progress import report_progress
from .result import checked

__all__ = ["SolveOptions", "Solved", "costed_graph", "make_budget", "plan_and_solve", "solve", "solve_costed"]


def strategy_table() -> dict:
    """The strategy table (:data:`poet.solve.strategies.STRATEGIES`), imported on first use: it loads
    numpy and HiGHS, which ``poet --help``, ``poet devices`` and ``poet validate`` never need."""
    from .strategies import STRATEGIES

    return STRATEGIES


@dataclass(frozen=True)
class Solved:
    """A schedule, and how the question was put to the solver."""

    schedule: Schedule
    problem: TiledProblem  # the graph solved (tiled or not) and its budget
    time_limit_s: float | None  # the limit of the whole answer: the one asked for, or a tiled graph's default
    solve_limit_s: float | None  # the solve's share of it, after planning the tiles
    planning_s: float  # seconds spent pricing the graph and planning its tiles


def solve(
    graph,
    device=None,
    *,
    memory,
    runtime=None,
    strategy: str = "poet",
    paging_time: str = PAGING_SERIAL,
    time_limit: float | None = None,
    threads: int | None = None,
    gap: float = 1e-3,
    method: str = "auto",
    backend: str = "highs",
    batch_size: int = 1,
    fixed_ram=None,
    tile=TILE_AUTO,
    weights: str = "flash",
    staging=None,
    progress=None,
    verbose: bool = False,
    find_min_budgets: bool = True,
    cache: bool = False,
    stop=None,
    policy: SolvePolicy | None = None,
) -> Schedule:
    """Find the minimum-energy schedule of ``graph`` within the budgets, as ``poet solve`` does.

    graph:   a :class:`CostedGraph`, a structural :class:`Graph`, a zoo model name
             (``poet models``), a generated graph's spec (``layered:250:1``) or the path
             of a ``poet-graph/1`` file.
    device:  a device name (``poet devices``), a TOML path or a Device; needed
             unless ``graph`` is already costed.
    memory:  RAM budget: bytes (int) or ``"3MB"``, ``"256KiB"``, or ``"40%"`` (of
             the way from fixed bytes to the keep-everything peak).
    runtime: deadline: seconds, ``"2.5s"``, ``"7.6x"`` (multiple of one plain
             forward+backward), or None for no deadline.
    paging_time: how paging counts against the deadline: ``serial`` (added),
             ``overlap`` (per stage, max of compute and paging) or ``hidden``
             (not at all: the original POET assumption).
    strategy: ``poet`` (joint remat+paging MILP), ``remat``, ``paging``,
             ``keep-all``, ``chen``, ... (``poet.solve.STRATEGIES``).
    fixed_ram: RAM the schedule does not control: bytes, or ``params``, ``sgd``, ``adam``
             (multiples of a zoo model's parameters).
    tile:    ``auto`` (a zoo model whose RAM budget is below its untiled minimum is tiled,
             docs/tiling.md), ``off``, or a tile count.  A tiled graph is solved within
             ``policy.tiled_time_limit_s`` when no ``time_limit`` is given, and the time
             planning its tiles comes out of the limit.
    weights: where the parameters live: ``flash`` (default, the paper's setting: not counted),
             ``ram`` (in the RAM budget) or ``stream`` (in storage: the weight and gradient traffic
             is priced into every node; docs/weights.md).  ``staging``: the staging buffer under
             ``stream`` (bytes; default 1/32 of the budget, at least 256 B), counted as fixed RAM.

    cache:   reuse an earlier answer to the same solve, and keep this one, on
             disk (``poet.solve.cache`` says what is reused when; a cached
             schedule is replayed by the validator before it is returned).
    stop:    a callable polled during the ``poet`` strategy's solve; once it
             returns true the solve ends its current step (a greedy run, a
             HiGHS solve at its next callback) and returns the best validated
             schedule found so far, with its gap and ``report.stopped_early``.
             Such an answer is not cached unless it is proven.
    policy:  the portfolio's tuning (:class:`~poet.solve.policy.SolvePolicy`); the default
             is what the benchmarks were measured with.

    The result's ``status`` is ``optimal`` only when the solver proved the
    relative gap ``<= gap``; its totals come from the validator's replay.
    """
    return plan_and_solve(**locals()).schedule  # (its parameters, exactly)


def plan_and_solve(graph, device=None, **ask) -> Solved:
    """:func:`solve` (``ask``: its keyword arguments), with the problem it solved and the limits it had
    (the module docstring).  ``poet solve`` calls it."""
    args = inspect.signature(solve).bind(graph, device, **ask)
    args.apply_defaults()
    return tile_and_solve(SimpleNamespace(**args.arguments))


def tile_and_solve(a) -> Solved:
    """The path of the module docstring, for the arguments ``a`` of :func:`solve`."""
    policy = a.policy if a.policy is not None else DEFAULT_POLICY
    planning_from = time.perf_counter()
    caps = policy.tile_caps(a.time_limit, available_ram_bytes())
    # the budgets are read against the untiled graph; tiling happens only when its minimum does not fit
    problem = tiled_problem(
        a.graph,
        a.device,
        memory=a.memory,
        runtime=a.runtime,
        paging_time=a.paging_time,
        batch_size=a.batch_size,
        fixed_ram=a.fixed_ram,
        tile=a.tile,
        weights=a.weights,
        staging=a.staging,
        max_tile_nodes=caps.nodes,
        max_tile_seconds=caps.seconds,
        max_tile_nodes_why=caps.nodes_why,
        progress=None if a.progress is None else lambda what: report_progress(a, what),
    )
    if a.strategy not in strategy_table():
        raise BudgetError(f"unknown strategy {a.strategy!r}; choose one of {', '.join(strategy_table())}")
    planning_s = time.perf_counter() - planning_from
    limit = solve_limit = a.time_limit
    if problem.tiled:
        limit, solve_limit = policy.tiled_solve_limit(a.time_limit, planning_s, len(problem.graph.nodes))
    opts = SolveOptions(
        time_limit_s=solve_limit,
        threads=a.threads,
        gap=a.gap,
        backend=a.backend,
        method=a.method,
        progress=a.progress,
        verbose=a.verbose,
        find_min_budgets=a.find_min_budgets,
        cache=a.cache,
        stop=a.stop,
        policy=policy,
    )
    s = solve_problem(problem, a.strategy, opts)
    searched = None
    if limit is not None and headroom.skip_reason(problem, s, a.graph, policy) is None:
        searched = headroom.search_headroom(
            problem,
            s,
            a.graph,
            lambda p, o: solve_problem(p, a.strategy, o),
            opts,
            deadline=planning_from + limit,
            policy=policy,
            device=a.device,
            batch_size=a.batch_size,
            max_tile_nodes=caps.nodes,
            progress=None if a.progress is None else lambda what: report_progress(a, what),
        )
        if searched.schedule is not s:
            # the answer had the solve's limit; the share its graph was given is the search's business
            searched.schedule.report = searched.schedule.report.with_(time_limit_s=s.report.time_limit_s)
        problem, s = searched.problem, searched.schedule
    if problem.plan is not None:
        summary = problem.plan.summary()
        if searched is not None and searched.tried:
            summary["planned_ram_bytes"] = searched.planned_ram_bytes
            summary["headroom"] = [dataclasses.asdict(t) for t in searched.tried]
        s.report = s.report.with_(tiling=summary)
    return Solved(s, problem, limit, solve_limit, planning_s)


def solve_problem(p: TiledProblem, strategy: str, opts: SolveOptions) -> Schedule:
    """:func:`solve_costed` on the problem's graph and budget; on a tiled graph the poet strategy's rules
    for tiled graphs apply (``SolveOptions.tiled``)."""
    return solve_costed(p.graph, p.budget, strategy, dataclasses.replace(opts, tiled=p.tiled))


def solve_costed(g: CostedGraph, budget: Budget, strategy: str, opts: SolveOptions) -> Schedule:
    t0 = opts.clock()
    lower = g.min_ram_bytes()
    if budget.ram_bytes < lower:
        # Hopeless before any MILP: some node cannot hold its inputs and output.
        return Schedule(
            graph=g,
            budget=budget,
            steps=(),
            status=INFEASIBLE,
            strategy=strategy,
            report=SolveReport(
                method="bound",
                solve_seconds=opts.clock() - t0,
                min_budgets=MinBudgets(ram_bytes_lower_bound=lower),
                message=(
                    f"RAM budget {fmt_bytes(budget.ram_bytes)} is below {fmt_bytes(lower)} "
                    f"({lower} B), the largest node output plus all its inputs plus fixed RAM; "
                    f"no schedule of any strategy can fit"
                ),
            ),
        )
    entry = disk.entry_path(g, budget, strategy, opts) if opts.cache else None
    notes: list[str] = []
    if entry is not None and not opts.verbose:  # a verbose solve is asked for its log: it runs
        hit = disk.lookup(entry, g, budget, strategy, opts, notes)
        if hit is not None:
            hit.report = hit.report.with_(solve_seconds=opts.clock() - t0)
            return hit
    sched = strategy_table()[strategy](g, budget, opts)
    if notes:
        sched.report = sched.report.with_(cache_note=notes[0])
    if not sched.report.solve_seconds:  # the portfolio times itself; the baselines are timed here
        sched.report = sched.report.with_(solve_seconds=opts.clock() - t0)
    if opts.stop is not None and opts.stop():
        sched.report = sched.report.with_(
            stopped_early=True,
            message=(
                sched.report.message
                + "; stopped early on request"
                + (
                    ": the best schedule found by then"
                    if sched.steps
                    else ", before the smallest feasible budgets were all found"
                    if sched.status == INFEASIBLE
                    else ", before a schedule was found"
                )
            ),
        )
    sched = checked(sched)
    if entry is not None and (sched.status in disk.PROVEN or not sched.report.stopped_early):
        # an answer cut short is only as good as the time it had, which no time limit records
        why = disk.store(entry, sched, opts)
        if why:
            sched.report = sched.report.with_(cache_error=why)
    return sched
