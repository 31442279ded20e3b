"""One entry point, many strategies: ``poet.solve(graph, device, memory=..., runtime=...)``.

Every strategy returns the same :class:`~poet.schedule.Schedule`, and every
schedule with steps has been replayed by the independent validator before it
is returned; a strategy whose schedule does not validate is a bug and raises.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..graph.core import CostedGraph, Graph
from ..schedule.core import (INFEASIBLE, PAGING_MODES, PAGING_SERIAL, Budget, Schedule)
from ..schedule.validate import ScheduleError, validate
from ..units import MAX_BYTES, BudgetError, fmt_bytes, parse_bytes, parse_percent, parse_runtime


class SolveError(RuntimeError):
    """A strategy produced something it should not have (a bug, reported clearly)."""


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float | None = None
    threads: int | None = None
    gap: float = 1e-3            # relative MIP gap at which a solution counts as optimal
    backend: str = "highs"
    method: str = "auto"         # formulation variant, see poet.solve.milp.METHODS
    progress: Callable[[dict], None] | None = None
    verbose: bool = False
    find_min_budgets: bool = True   # on infeasibility, compute the smallest feasible budgets
    cache: bool = False          # reuse and keep answers on disk (poet.solve.cache)
    # polled while the poet strategy solves: once it returns true, the solve ends its current step
    # as soon as it can and returns the best validated schedule found so far (Ctrl-C in the CLI)
    stop: Callable[[], bool] | None = None

    def __post_init__(self):
        t = self.time_limit_s
        if t is not None and not (t > 0 and t != float("inf")):
            raise BudgetError(f"time limit {t} s is not a positive number of seconds; omit it to solve "
                              f"without a limit")
        if self.threads is not None and self.threads < 1:
            raise BudgetError(f"threads must be 1 or more (got {self.threads}); omit it to use every core")
        from .milp import METHODS
        if self.method not in METHODS:
            raise BudgetError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not 0 <= self.gap < 1:
            raise BudgetError(f"gap {self.gap} must be a relative gap in [0, 1), e.g. 0.01 for 1%")


# name -> callable(graph, budget, options) -> Schedule (steps not yet validated)
STRATEGIES: dict[str, Callable] = {}
DESCRIPTIONS: dict[str, str] = {}


def register(name: str, description: str):
    def deco(fn):
        STRATEGIES[name] = fn
        DESCRIPTIONS[name] = description
        return fn
    return deco


def costed_graph(graph, device=None, *, batch_size: int = 1, fixed_ram_bytes=None) -> CostedGraph:
    """Accept a CostedGraph, a structural Graph (+device), a zoo model name (+device) or a JSON path."""
    from ..graph.io import load_graph
    from ..hardware.cost import linear_cost_model

    if isinstance(graph, CostedGraph):
        g = graph
    elif isinstance(graph, Graph):
        if device is None:
            raise BudgetError("a structural graph needs a device to be priced (device='a72', ...)")
        g = linear_cost_model(graph, device)
    elif isinstance(graph, (str, Path)) and (str(graph).endswith(".json") or Path(graph).is_file()):
        g = load_graph(graph)
    elif isinstance(graph, str):
        from ..graph.zoo import build_model
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
        from .baselines import keep_all_peak
        frac = parse_percent(memory)
        ram = int(g.fixed_ram_bytes + frac * (keep_all_peak(g) - g.fixed_ram_bytes))
        if ram > MAX_BYTES:
            raise BudgetError(f"memory budget {memory} is above 2^53 B (9 PB), more than any device holds")
    else:
        ram = parse_bytes(memory)
    return Budget(ram_bytes=ram, runtime_s=parse_runtime(runtime, g.plain_runtime_s), paging_time=paging_time)


def solve(graph, device=None, *, memory, runtime=None, strategy: str = "poet",
          paging_time: str = PAGING_SERIAL, time_limit: float | None = None, threads: int | None = None,
          gap: float = 1e-3, method: str = "auto", backend: str = "highs", batch_size: int = 1,
          fixed_ram=None, progress=None, verbose: bool = False, find_min_budgets: bool = True,
          cache: bool = False, stop=None) -> Schedule:
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
             schedule found so far, with its gap and ``solver["stopped_early"]``.
             Such an answer is not cached unless it is proven.

    The result's ``status`` is ``optimal`` only when the solver proved the
    relative gap ``<= gap``; its totals come from the validator's replay.
    """
    g = costed_graph(graph, device, batch_size=batch_size, fixed_ram_bytes=fixed_ram)
    budget = make_budget(g, memory, runtime, paging_time)
    if strategy not in STRATEGIES:
        raise BudgetError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    opts = SolveOptions(time_limit_s=time_limit, threads=threads, gap=gap, backend=backend, method=method,
                        progress=progress, verbose=verbose, find_min_budgets=find_min_budgets, cache=cache,
                        stop=stop)
    return solve_costed(g, budget, strategy, opts)


def solve_costed(g: CostedGraph, budget: Budget, strategy: str, opts: SolveOptions) -> Schedule:
    t0 = time.perf_counter()
    lower = g.min_ram_bytes()
    if budget.ram_bytes < lower:
        # Hopeless before any MILP: some node cannot hold its inputs and output.
        return Schedule(graph=g, budget=budget, steps=(), status=INFEASIBLE, strategy=strategy, solver={
            "method": "bound", "solve_seconds": time.perf_counter() - t0,
            "message": (f"RAM budget {fmt_bytes(budget.ram_bytes)} is below {fmt_bytes(lower)} "
                        f"({lower} B), the largest node output plus all its inputs plus fixed RAM; "
                        f"no schedule of any strategy can fit"),
            "min_ram_bytes_lower_bound": lower,
        })
    from . import cache as disk
    entry = disk.entry_path(g, budget, strategy, opts) if opts.cache else None
    notes: list[str] = []
    if entry is not None and not opts.verbose:     # a verbose solve is asked for its log: it runs
        hit = disk.lookup(entry, g, budget, strategy, opts, notes)
        if hit is not None:
            hit.solver["solve_seconds"] = time.perf_counter() - t0
            return hit
    sched = STRATEGIES[strategy](g, budget, opts)
    if notes:
        sched.solver["cache_note"] = notes[0]
    sched.solver.setdefault("solve_seconds", time.perf_counter() - t0)
    if opts.stop is not None and opts.stop():
        sched.solver["stopped_early"] = True
        sched.solver["message"] = (sched.solver.get("message") or "") + "; stopped early on request" + (
            ": the best schedule found by then" if sched.steps else
            ", before the smallest feasible budgets were all found" if sched.status == INFEASIBLE else
            ", before a schedule was found")
    sched = checked(sched)
    if entry is not None and (sched.status in disk.PROVEN or not sched.solver.get("stopped_early")):
        # an answer cut short is only as good as the time it had, which no time limit records
        why = disk.store(entry, sched, opts)
        if why:
            sched.solver["cache_error"] = why
    return sched


def checked(s: Schedule) -> Schedule:
    """Replay through the validator; the schedule's totals are the validator's."""
    if not s.steps:
        return s
    try:
        totals = validate(s.graph, s.steps, s.budget)
    except ScheduleError as e:
        raise SolveError(f"strategy {s.strategy!r} produced an invalid schedule: {e}") from e
    s.totals = totals
    return s
