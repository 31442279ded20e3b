"""Measure a traced program's own nodes on this machine, as the executor runs them.

The program's keep-everything schedule is executed repeatedly (after warm-up runs) by the real
:class:`~poet.execute.executor.Executor`, so each node's time includes what executing it costs
beyond the kernels (fetching arguments, re-deriving views, bookkeeping).  Per node: the median
CPU seconds (``time.process_time``; not stretched by other processes on a shared machine) and
wall seconds of its ``compute`` instruction, and the spread of the CPU figure; per program: the
median CPU seconds of one ``free``.

Two users: ``poet profile`` fits operator families to the per-op times of a model's aten-level
program (:func:`poet.hardware.profile.fit_families`); ``--costs measured`` prices a program's nodes
from these times directly (:func:`poet.hardware.profile_model.price_measured`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgramTiming:
    """Per-node medians over ``runs`` executions of the keep-everything schedule."""

    node_busy_s: tuple[float, ...]  # compute instruction, busy seconds (mean)
    node_wall_s: tuple[float, ...]  # compute instruction, wall seconds (median)
    node_spread: tuple[float, ...]  # (p75 - p25) / median of the busy seconds
    free_busy_s: float  # one free instruction, busy seconds (mean over all)
    runs: int
    iteration_busy_s: float  # median busy seconds of one whole run
    iteration_wall_s: float  # median wall seconds of one whole run


def _quartile_spread(xs: list[float]) -> float:
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    med = statistics.median(xs)
    return (q[2] - q[0]) / med if med > 0 else 0.0


def keep_schedule(program):
    """The keep-everything schedule of ``program`` (its prices, from ``m4``, are not used)."""
    from ..hardware.device import load_device
    from .reference import reference_schedule

    return reference_schedule(program.costed(load_device("m4")), "keep")


def measure_program(
    program,
    *,
    runs: int = 20,
    warmup: int = 3,
    max_seconds: float | None = None,
    progress=None,
    executor=None,
    schedule=None,
) -> ProgramTiming:
    """Execute ``program``'s keep-everything schedule ``warmup + runs`` times and take per-node means.

    ``max_seconds`` stops the measured runs early (at least 3) once exceeded.  ``executor`` and
    ``schedule`` (from :func:`keep_schedule`): reuse them, to measure a run at a time between other work.
    """
    from .executor import Executor

    sched = schedule if schedule is not None else keep_schedule(program)
    ex = executor if executor is not None else Executor(program)
    n = len(program.groups)
    busy: list[list[float]] = [[] for _ in range(n)]
    wall: list[list[float]] = [[] for _ in range(n)]
    frees: list[float] = []
    it_busy, it_wall = [], []
    t_start = time.perf_counter()
    done = 0
    for i in range(warmup + runs):
        res = ex.run(sched, apply=False)
        if i < warmup:
            continue
        done += 1
        for rec in res.records:
            if rec.op == "compute":
                busy[rec.node].append(rec.busy_seconds)
                wall[rec.node].append(rec.seconds)
            elif rec.op == "free":
                frees.append(rec.busy_seconds)
        it_busy.append(res.busy_seconds["total"])
        it_wall.append(res.seconds["total"])
        if progress and (done % 5 == 0 or done == runs):
            progress(f"{program.name}: run {done}/{runs}")
        if max_seconds is not None and done >= 3 and time.perf_counter() - t_start > max_seconds:
            break
    return ProgramTiming(
        node_busy_s=tuple(statistics.fmean(x) for x in busy),
        node_wall_s=tuple(statistics.median(x) for x in wall),
        node_spread=tuple(_quartile_spread(x) for x in busy),
        free_busy_s=statistics.fmean(frees) if frees else 0.0,
        runs=done,
        iteration_busy_s=statistics.median(it_busy),
        iteration_wall_s=statistics.median(it_wall),
    )


@dataclass(frozen=True)
class PagingOverhead:
    """What executing page-ins and page-outs costs beyond the storage fit, per paging instruction."""

    seconds: float  # per page-in or page-out (>= 0), to add to both
    predicted_s: float  # the calibration schedule's predicted busy seconds without the overhead
    measured_s: float  # its mean measured busy seconds
    page_ops: int


def measure_paging_overhead(program, device, *, runs: int = 5, paging_dir=None, every: int = 3) -> PagingOverhead:
    """Run a rule-based paging schedule (every ``every``-th forward output kept, the rest paged out and
    back in) as a profiled device pages (fsync'd, dropped from the page cache) and attribute the busy
    seconds beyond its prediction to its paging instructions: cold caches after every storage wait and
    the executor's own work for a page, which a file-level storage sweep does not see."""
    from ..hardware.device import load_device
    from .executor import Executor
    from .reference import reference_schedule

    dev = load_device(device)
    g = program.costed(dev)
    sched = reference_schedule(g, "paging", every=every)
    n_ops = sched.totals.page_ins + sched.totals.page_outs
    ex = Executor(program, paging_dir=paging_dir, fsync=True, drop_cache=True)
    ex.run(sched, apply=False)  # warm-up
    busy = [ex.run(sched, apply=False).busy_seconds["total"] for _ in range(runs)]
    measured = statistics.fmean(busy)
    pred = sched.totals.runtime_s
    per = max(0.0, (measured - pred) / n_ops) if n_ops else 0.0
    return PagingOverhead(per, pred, measured, n_ops)


def measured_costs(
    program, device, *, runs: int = 20, warmup: int = 3, fixed_ram_bytes: int | None = None, progress=None
):
    """The costed graph of ``program`` priced from measurements of its own nodes (compute) and
    ``device``'s storage fit (paging): ``--costs measured``."""
    from ..hardware.device import load_device
    from ..hardware.profile_model import price_measured

    timing = measure_program(program, runs=runs, warmup=warmup, progress=progress)
    fixed = program.fixed_ram_bytes if fixed_ram_bytes is None else int(fixed_ram_bytes)
    return price_measured(program.graph, load_device(device), timing.node_busy_s, timing.free_busy_s, fixed)


__all__ = [
    "PagingOverhead",
    "ProgramTiming",
    "keep_schedule",
    "measure_paging_overhead",
    "measure_program",
    "measured_costs",
]
