"""One entry point, many strategies: ``poet.solve(graph, device, memory=..., runtime=...)``.

Every strategy returns the same :class:`~poet.schedule.Schedule`, and every
schedule with steps has been replayed by the independent validator before it
is returned; a strategy whose schedule does not validate is a bug and raises.
"""

from __future__ import annotations

from pathlib import Path

from ..graph.core import CostedGraph, Graph
from ..graph.io import load_graph
from ..graph.zoo import build_model
from ..hardware.cost import linear_cost_model
from ..schedule.core import INFEASIBLE, PAGING_MODES, PAGING_SERIAL, Budget, Schedule
from ..schedule.report import MinBudgets, SolveReport
from ..units import MAX_BYTES, BudgetError, fmt_bytes, parse_bytes, parse_percent, parse_runtime
from . import cache as disk
from .baselines.keep_all import keep_all_peak
from .options import SolveOptions
from .policy import DEFAULT_POLICY, SolvePolicy
from .result import checked


def strategy_table() -> dict:
    """The strategy table (:data:`poet.solve.strategies.STRATEGIES`), imported on first use: it loads
    numpy and HiGHS, which ``poet --help``, ``poet devices`` and ``poet validate`` never need."""
    from .strategies import STRATEGIES

    return STRATEGIES


def costed_graph(graph, device=None, *, batch_size: int = 1, fixed_ram_bytes=None) -> CostedGraph:
    """Accept a CostedGraph, a structural Graph (+device), a zoo model name (+device) or a JSON path."""
    if isinstance(graph, CostedGraph):
        g = graph
    elif isinstance(graph, Graph):
        if device is None:
            raise BudgetError("a structural graph needs a device to be priced (device='a72', ...)")
        g = linear_cost_model(graph, device)
    elif isinstance(graph, (str, Path)) and (str(graph).endswith(".json") or Path(graph).is_file()):
        g = load_graph(graph)
    elif isinstance(graph, str):
        if device is None:
            raise BudgetError(f"model {graph!r} needs a device (device='a72', see `poet devices`)")
        g = linear_cost_model(build_model(graph, batch_size=batch_size), device)
    else:
        raise TypeError(f"cannot make a costed graph from {type(graph).__name__}")
    if fixed_ram_bytes is not None:
        g = g.with_fixed_ram(parse_bytes(fixed_ram_bytes, "fixed RAM", allow_zero=True))
    return g


def make_budget(g: CostedGraph, memory, runtime=None, paging_time: str = PAGING_SERIAL) -> Budget:
    if paging_time not in PAGING_MODES:
        raise BudgetError(f"paging_time must be one of {', '.join(PAGING_MODES)}, got {paging_time!r}")
    if isinstance(memory, str) and memory.strip().endswith("%"):
        frac = parse_percent(memory)
        ram = int(g.fixed_ram_bytes + frac * (keep_all_peak(g) - g.fixed_ram_bytes))
        if ram > MAX_BYTES:
            raise BudgetError(f"memory budget {memory} is above 2^53 B (9 PB), more than any device holds")
    else:
        ram = parse_bytes(memory)
    return Budget(ram_bytes=ram, runtime_s=parse_runtime(runtime, g.plain_runtime_s), paging_time=paging_time)


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
    progress=None,
    verbose: bool = False,
    find_min_budgets: bool = True,
    cache: bool = False,
    stop=None,
    policy: SolvePolicy | None = None,
) -> Schedule:
    """Find the minimum-energy schedule of ``graph`` within the budgets.

    graph:   a :class:`CostedGraph`, a structural :class:`Graph`, a zoo model name
             (``poet models``) or the path of a ``poet-graph/1`` file.
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

    cache:   reuse an earlier answer to the same solve, and keep this one, on
             disk (``poet.solve.cache`` says what is reused when; a cached
             schedule is replayed by the validator before it is returned).
    stop:    a callable polled during the ``poet`` strategy's solve; once it
             returns true the solve ends its current step (a greedy run, a
             HiGHS solve at its next callback) and returns the best validated
             schedule found so far, with its gap and ``report.stopped_early``.
             Such an answer is not cached unless it is proven.
    policy:  the pipeline's tuning (:class:`~poet.solve.policy.SolvePolicy`); the default
             is what the benchmarks were measured with.

    The result's ``status`` is ``optimal`` only when the solver proved the
    relative gap ``<= gap``; its totals come from the validator's replay.
    """
    g = costed_graph(graph, device, batch_size=batch_size, fixed_ram_bytes=fixed_ram)
    budget = make_budget(g, memory, runtime, paging_time)
    if strategy not in strategy_table():
        raise BudgetError(f"unknown strategy {strategy!r}; choose one of {', '.join(strategy_table())}")
    opts = SolveOptions(
        time_limit_s=time_limit,
        threads=threads,
        gap=gap,
        backend=backend,
        method=method,
        progress=progress,
        verbose=verbose,
        find_min_budgets=find_min_budgets,
        cache=cache,
        stop=stop,
        policy=policy if policy is not None else DEFAULT_POLICY,
    )
    return solve_costed(g, budget, strategy, opts)


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
    if not sched.report.solve_seconds:  # the pipeline times itself; the baselines are timed here
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
