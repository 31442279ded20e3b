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
calibration (:func:`run_paging_schedule`, :func:`calibrate_paging`) runs a paging schedule and fits what page-ins and
page-outs cost when executed beyond the storage sweep's figures and the keep-everything computes.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ..schedule.core import Op


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
    from ..hardware.cost import costed_program
    from ..hardware.device import load_device
    from .reference import reference_schedule

    return reference_schedule(costed_program(program, load_device("m4")), "keep")


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
            if rec.op == Op.COMPUTE:
                busy[rec.node].append(rec.busy_seconds)
                wall[rec.node].append(rec.seconds)
            elif rec.op == Op.FREE:
                frees.append(rec.busy_seconds)
        it_busy.append(res.busy_seconds["total"])
        it_wall.append(res.seconds["total"])
        if progress and (done % 5 == 0 or done == runs):
            progress(f"{program.name}: run {done}/{runs}")
        if max_seconds is not None and done >= 3 and time.perf_counter() - t_start > max_seconds:
            break
    return _timing(busy, [statistics.median(x) for x in wall], frees, it_busy, it_wall, done)


def paging_sample(records, keep: ProgramTiming, device, graph):
    """The :class:`~poet.hardware.profile.PagingSample` of one executed paging schedule (``records``,
    the ``InstructionRecord``s of a run of a schedule on ``graph``) next to the keep-everything timing
    ``keep``: each page-in/out's busy seconds beyond ``device``'s storage fit for the node's bytes, and
    the computes' and frees' busy seconds beyond the same nodes' in ``keep``."""
    from ..hardware.profile import PagingSample

    dev = device
    d_in = d_out = other = 0.0
    n_in = n_out = 0
    nbytes = [nd.ram_bytes for nd in graph.nodes]
    for rec in records:
        if rec.op == Op.PAGE_IN:
            d_in += rec.busy_seconds - (dev.read_latency_s + nbytes[rec.node] / dev.read_bytes_per_s)
            n_in += 1
        elif rec.op == Op.PAGE_OUT:
            d_out += rec.busy_seconds - (dev.write_latency_s + nbytes[rec.node] / dev.write_bytes_per_s)
            n_out += 1
        elif rec.op == Op.COMPUTE:
            other += rec.busy_seconds - keep.node_busy_s[rec.node]
        elif rec.op == Op.FREE:
            other += rec.busy_seconds - keep.free_busy_s
    return PagingSample(d_in, d_out, other, n_in, n_out)


@dataclass(frozen=True)
class PagingRuns:
    """The executed runs of a paging calibration schedule, kept until the keep-everything timing they
    are measured against is final."""

    device: object  # the Device whose storage fit prices the page-ins and page-outs
    graph: object  # the calibration schedule's graph
    records: tuple  # per measured run, its InstructionRecords
    busy_s: tuple[float, ...]  # per measured run, its busy seconds


@dataclass(frozen=True)
class PagingCalibration:
    """What the paging calibration measured and fitted."""

    fit: object  # poet.hardware.profile.PagingOverheadFit
    page_ins: int
    page_outs: int
    measured_s: float  # median busy seconds of one calibration run
    predicted_s: float  # its prediction from the storage fit and the keep-everything timing, no overhead


def run_paging_schedule(
    program,
    device,
    *,
    runs: int = 10,
    warmup: int = 1,
    block: int = 5,
    until: float | None = None,
    between=None,
    paging_dir=None,
    every: int = 3,
    progress=None,
) -> PagingRuns:
    """Run a rule-based paging schedule of ``program`` (every ``every``-th forward output kept, the rest
    paged out and back in), paging as a profiled device pages (fsync'd, dropped from the page cache).

    Runs go in blocks of ``block`` back-to-back runs after ``warmup`` unmeasured ones, as training runs
    its steps; ``between()`` is called after each block (``poet profile`` measures keep-everything
    runs there).  At least ``runs`` runs are measured, and more blocks while ``time.perf_counter()``
    is before ``until``: blocks spread over the profile average the machine's drift in speed."""
    from ..hardware.cost import costed_program
    from ..hardware.device import load_device
    from .executor import Executor
    from .reference import reference_schedule

    dev = load_device(device)
    sched = reference_schedule(costed_program(program, dev), "paging", every=every)
    pager = Executor(program, paging_dir=paging_dir, fsync=True, drop_cache=True)
    records, totals = [], []
    said = time.perf_counter()
    while len(totals) < runs or (until is not None and time.perf_counter() < until):
        for i in range(warmup + block):
            res = pager.run(sched, apply=False)
            if i >= warmup:
                records.append(tuple(res.records))
                totals.append(res.busy_seconds["total"])
        if progress and (time.perf_counter() - said > 2.0 or len(totals) == runs):
            said = time.perf_counter()
            left = f", {until - said:.0f} s left" if until is not None and until > said else ""
            progress(f"{program.name}: paging calibration, {len(totals)} runs{left}")
        if between is not None:
            between()
    return PagingRuns(dev, sched.graph, tuple(records), tuple(totals))


def calibrate_paging(runs: PagingRuns, keep: ProgramTiming) -> PagingCalibration:
    """Fit what each page-in and page-out costs when executed beyond the storage sweep's figures and
    ``keep``'s computes (:func:`poet.hardware.profile.fit_paging_overhead`): the executor's own work
    for a page, and the slower computes after a storage wait (the CPU idled, its caches went cold),
    which neither a file-level storage sweep nor back-to-back keep-everything runs see.  ``keep`` is
    the timing the profile prices computes with, so the two together price the calibration runs as
    measured."""
    from ..hardware.profile import fit_paging_overhead

    samples = [paging_sample(r, keep, runs.device, runs.graph) for r in runs.records]
    preds = [t - s.page_in_excess_s - s.page_out_excess_s - s.other_excess_s for t, s in zip(runs.busy_s, samples)]
    return PagingCalibration(
        fit_paging_overhead(samples),
        samples[0].page_ins,
        samples[0].page_outs,
        statistics.median(runs.busy_s),
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
    "PagingRuns",
    "ProgramTiming",
    "calibrate_paging",
    "keep_schedule",
    "run_paging_schedule",
    "merge_timings",
    "paging_sample",
    "measure_program",
    "measured_costs",
]
