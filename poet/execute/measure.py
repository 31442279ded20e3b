"""Measure a traced program's own nodes on this machine, as the executor runs them.

The program's keep-everything schedule is executed repeatedly (after warm-up runs) by the real
:class:`~poet.execute.executor.Executor`, so each node's time includes what executing it costs
beyond the kernels (fetching arguments, re-deriving views, bookkeeping).  Per node: the mean busy
seconds (wall minus waits for a CPU, :mod:`poet.hardware.profile_clock`) and median wall seconds of
its ``compute`` instruction, and the spread of the busy figure; per program: the mean busy seconds
of one ``free``.

Three users: ``poet profile`` fits operator families to the per-op times of a model's aten-level
program (:func:`poet.hardware.profile.fit_families`); ``--costs measured`` prices a program's nodes
from these times directly (:func:`poet.hardware.profile_model.price_measured`); the paging
calibration (:func:`measure_paging_overhead`) alternates keep-everything runs with a paging schedule
and fits what page-ins and page-outs cost when executed beyond the storage sweep's figures.
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
    node_runs_busy: tuple[tuple[float, ...], ...] = ()  # per node, the busy seconds of every run
    frees_busy: tuple[float, ...] = ()  # every free's busy seconds
    iterations_busy: tuple[float, ...] = ()  # every run's busy seconds
    iterations_wall: tuple[float, ...] = ()


def merge_timings(timings) -> ProgramTiming:
    """One timing of the same program from several (runs taken at different moments): means, medians
    and spreads over all their runs."""
    ts = [t for t in timings if t.runs]
    if not ts:
        raise ValueError("no timings to merge")
    n = len(ts[0].node_runs_busy)
    busy = [[x for t in ts for x in t.node_runs_busy[v]] for v in range(n)]
    wall_by_t = [t.node_wall_s for t in ts]
    frees = [x for t in ts for x in t.frees_busy]
    its = [x for t in ts for x in t.iterations_busy]
    itw = [x for t in ts for x in t.iterations_wall]
    node_wall = [statistics.median(w[v] for w in wall_by_t) for v in range(n)]
    return _timing(busy, node_wall, frees, its, itw, sum(t.runs for t in ts))


def _timing(busy, node_wall, frees, it_busy, it_wall, runs: int) -> ProgramTiming:
    """The timing of ``runs`` runs from their raw samples: per node every run's busy seconds (``busy``)
    and its wall seconds already reduced (``node_wall``), every free's and every run's seconds."""
    return ProgramTiming(
        node_busy_s=tuple(statistics.fmean(x) for x in busy),
        node_wall_s=tuple(node_wall),
        node_spread=tuple(_quartile_spread(x) for x in busy),
        free_busy_s=statistics.fmean(frees) if frees else 0.0,
        runs=runs,
        iteration_busy_s=statistics.median(it_busy),
        iteration_wall_s=statistics.median(it_wall),
        node_runs_busy=tuple(tuple(x) for x in busy),
        frees_busy=tuple(frees),
        iterations_busy=tuple(it_busy),
        iterations_wall=tuple(it_wall),
    )


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
    return _timing(busy, [statistics.median(x) for x in wall], frees, it_busy, it_wall, done)


def paging_sample(result, keep: ProgramTiming, device, graph):
    """The :class:`~poet.hardware.profile.PagingSample` of one executed paging schedule (``result``, a
    ``RunResult`` of a schedule on ``graph``) next to the keep-everything timing ``keep`` (one run,
    measured beside it): each page-in/out's busy seconds beyond ``device``'s storage fit for the node's
    bytes, and the computes' and frees' busy seconds beyond the same nodes' in ``keep``."""
    from ..hardware.profile import PagingSample

    dev = device
    d_in = d_out = other = 0.0
    n_in = n_out = 0
    nbytes = [nd.ram_bytes for nd in graph.nodes]
    for rec in result.records:
        if rec.op == "page_in":
            d_in += rec.busy_seconds - (dev.read_latency_s + nbytes[rec.node] / dev.read_bytes_per_s)
            n_in += 1
        elif rec.op == "page_out":
            d_out += rec.busy_seconds - (dev.write_latency_s + nbytes[rec.node] / dev.write_bytes_per_s)
            n_out += 1
        elif rec.op == "compute":
            other += rec.busy_seconds - keep.node_busy_s[rec.node]
        elif rec.op == "free":
            other += rec.busy_seconds - keep.free_busy_s
    return PagingSample(d_in, d_out, other, n_in, n_out)


@dataclass(frozen=True)
class PagingCalibration:
    """What ``measure_paging_overhead`` measured: the fit and the keep-everything runs beside it."""

    fit: object  # poet.hardware.profile.PagingOverheadFit
    keep: ProgramTiming  # the alternated keep-everything runs (more samples for the family fits)
    page_ins: int
    page_outs: int
    measured_s: float  # median busy seconds of one calibration run
    predicted_s: float  # its prediction from the storage fit and the keep-everything runs, no overhead


def measure_paging_overhead(
    program, device, *, runs: int = 10, paging_dir=None, every: int = 3, progress=None
) -> PagingCalibration:
    """Alternate a keep-everything run with a rule-based paging schedule (every ``every``-th forward
    output kept, the rest paged out and back in), paging as a profiled device pages (fsync'd, dropped
    from the page cache), and fit each paging instruction kind's busy seconds beyond ``device``'s
    storage fit (:func:`poet.hardware.profile.fit_paging_overhead`): the executor's own work for a page
    and the caches a storage wait leaves cold, which a file-level storage sweep does not see.
    Alternating makes both runs of a pair see the same load on a shared machine."""
    from ..hardware.device import load_device
    from ..hardware.profile import fit_paging_overhead
    from .executor import Executor
    from .reference import reference_schedule

    dev = load_device(device)
    sched = reference_schedule(program.costed(dev), "paging", every=every)
    pager = Executor(program, paging_dir=paging_dir, fsync=True, drop_cache=True)
    meter = Executor(program)
    keep = keep_schedule(program)
    measure_program(program, runs=1, warmup=1, executor=meter, schedule=keep)
    pager.run(sched, apply=False)  # warm-up
    samples, keeps, totals, preds = [], [], [], []
    for i in range(runs):
        t = measure_program(program, runs=1, warmup=0, executor=meter, schedule=keep)
        res = pager.run(sched, apply=False)
        s = paging_sample(res, t, dev, sched.graph)
        samples.append(s)
        keeps.append(t)
        totals.append(res.busy_seconds["total"])
        preds.append(res.busy_seconds["total"] - s.page_in_excess_s - s.page_out_excess_s - s.other_excess_s)
        if progress and ((i + 1) % 5 == 0 or i + 1 == runs):
            progress(f"{program.name}: paging calibration {i + 1}/{runs}")
    return PagingCalibration(
        fit_paging_overhead(samples),
        merge_timings(keeps),
        samples[0].page_ins,
        samples[0].page_outs,
        statistics.median(totals),
        statistics.median(preds),
    )


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
    "PagingCalibration",
    "ProgramTiming",
    "keep_schedule",
    "measure_paging_overhead",
    "merge_timings",
    "paging_sample",
    "measure_program",
    "measured_costs",
]
