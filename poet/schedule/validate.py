"""Independent validator: replays a schedule step by step and prices it.

It shares nothing with the solvers but the costed graph, so a solver bug shows
up here as a refused schedule instead of a wrong report.  Bytes are integers and
compared exactly; times and energies are summed with ``math.fsum``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

from ..graph.core import CostedGraph
from .core import OPS, PAGING_HIDDEN, PAGING_MODES, PAGING_OVERLAP, Budget, Op, Step, Totals

# Runtime is a modelled float quantity: allow one part per million of rounding.
RUNTIME_RTOL = 1e-6


class ScheduleError(ValueError):
    """A schedule that cannot run as written, with the step at fault."""

    def __init__(self, message: str, step_index: int | None = None):
        super().__init__(message)
        self.step_index = step_index


@dataclass
class Replay:
    totals: Totals
    ram_after_step: list[int] = field(default_factory=list)


def _node_label(g: CostedGraph, v: int) -> str:
    return f"node {v} ({g.nodes[v].name})"


def _repeated(values, counts) -> Iterator[float]:
    """Each ``values[v]`` ``counts[v]`` times: the per-step costs of a replay, summed by ``math.fsum``
    without a list as long as the schedule (fsum is exactly rounded, so the order does not matter)."""
    for x, c in zip(values, counts, strict=True):
        for _ in range(c):
            yield x


def simulate(g: CostedGraph, steps, budget: Budget | None = None, trace: bool = True) -> Replay:
    """Replay ``steps`` (any iterable: they are read once, in order); raise :class:`ScheduleError` at the
    first invalid one.

    With a budget, RAM is checked after every step and runtime at the end.  Memory is linear in the
    graph, not in the steps, unless ``trace`` asks for the RAM in use after every step.
    """
    n = len(g.nodes)
    ram = g.ram
    in_ram: set[int] = set()
    on_storage: set[int] = set()
    computed = [0] * n
    paged_in = [0] * n
    paged_out = [0] * n
    used = g.fixed_ram_bytes
    peak = used
    ram_trace: list[int] = []
    # overlap: each stage's compute and paging times, folded into its time when the next stage starts
    stage_compute: list[float] = []
    stage_page: list[float] = []
    stage_times: list[float] = []
    if budget is not None:
        check_budget(budget)
    ram_limit = budget.ram_bytes if budget is not None else None
    overlap = budget is not None and budget.paging_time == PAGING_OVERLAP
    last_stage = 0
    idx = -1

    for idx, s in enumerate(steps):
        if not isinstance(s, Step):
            s = Step(**s) if isinstance(s, dict) else Step(*s)
        op, v = s.op, s.node

        def fail(msg: str):
            raise ScheduleError(f"step {idx} ({op} {_node_label(g, v) if 0 <= v < n else v}): {msg}", idx)

        if op not in OPS:
            raise ScheduleError(f"step {idx}: unknown op {op!r}; expected one of {', '.join(OPS)}", idx)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
            raise ScheduleError(f"step {idx}: node {v!r} is not a node id 0..{n - 1}", idx)
        if s.stage is not None and (not isinstance(s.stage, int) or isinstance(s.stage, bool) or not 0 <= s.stage < n):
            raise ScheduleError(f"step {idx}: stage {str(s.stage)[:40]} is not a stage 0..{n - 1} (an integer)", idx)
        if overlap:
            # Paging overlaps the compute of its own stage only, so the runtime claimed depends on each
            # step's stage: they must be the stages the steps run in, in order, each stage t starting
            # node t's first computation (as every POET strategy emits them).
            if s.stage is None:
                fail(
                    'the overlap paging model needs every step to carry its "stage" '
                    "(the stage it runs in); re-solve with --paging-time overlap"
                )
            if s.stage < last_stage:
                fail(
                    f"stage {s.stage} comes after a step of stage {last_stage}: stages must not decrease "
                    f"along the steps, because paging overlaps only the compute of the stage it runs in"
                )
            if op == Op.COMPUTE and computed[v] == 0 and s.stage != v:
                fail(
                    f"first computation of node {v} is in stage {s.stage}; stage t is where node t is first "
                    f"computed, so it must be in stage {v}"
                )
            if s.stage != last_stage and (stage_compute or stage_page):
                stage_times.append(max(math.fsum(stage_compute), math.fsum(stage_page)))
                stage_compute, stage_page = [], []
            last_stage = s.stage
        nd = g.nodes[v]
        if op == Op.COMPUTE:
            missing = [p for p in g.preds[v] if p not in in_ram]
            if missing:
                fail("input " + ", ".join(_node_label(g, p) for p in missing) + " not in RAM")
            if v in in_ram:
                fail("output already in RAM (free it before recomputing)")
            in_ram.add(v)
            used += ram[v]
            computed[v] += 1
            if overlap:
                stage_compute.append(nd.compute_time_s)
        elif op == Op.PAGE_OUT:
            if v not in in_ram:
                fail("output not in RAM, nothing to page out")
            on_storage.add(v)
            paged_out[v] += 1
            if overlap:
                stage_page.append(nd.pageout_time_s)
        elif op == Op.PAGE_IN:
            if v not in on_storage:
                fail("output was never paged out, nothing to page in")
            if v in in_ram:
                fail("output already in RAM")
            in_ram.add(v)
            used += ram[v]
            paged_in[v] += 1
            if overlap:
                stage_page.append(nd.pagein_time_s)
        else:  # free
            if v not in in_ram:
                fail("output not in RAM, nothing to free")
            in_ram.discard(v)
            used -= ram[v]
        peak = max(peak, used)
        if trace:
            ram_trace.append(used)
        if ram_limit is not None and used > ram_limit:
            fail(f"RAM in use {used} B exceeds the budget {ram_limit} B")
    n_steps = idx + 1

    never = [v for v in range(n) if computed[v] == 0]
    if never:
        raise ScheduleError(f"{len(never)} node(s) never computed, first {_node_label(g, never[0])}", n_steps)

    nodes = g.nodes
    tc = math.fsum(_repeated([nd.compute_time_s for nd in nodes], computed))
    tp = math.fsum(
        chain(
            _repeated([nd.pageout_time_s for nd in nodes], paged_out),
            _repeated([nd.pagein_time_s for nd in nodes], paged_in),
        )
    )
    mode = budget.paging_time if budget is not None else "serial"
    if mode == PAGING_HIDDEN:
        runtime = tc
    elif mode == PAGING_OVERLAP:
        if stage_compute or stage_page:
            stage_times.append(max(math.fsum(stage_compute), math.fsum(stage_page)))
        runtime = math.fsum(stage_times)
    else:
        runtime = tc + tp
    if budget is not None and budget.runtime_s is not None:
        if runtime > budget.runtime_s * (1 + RUNTIME_RTOL):
            raise ScheduleError(
                f"runtime {runtime:.6g} s exceeds the budget {budget.runtime_s:.6g} s "
                f"(paging time counted as {mode!r})",
                n_steps,
            )

    ec = math.fsum(_repeated([nd.compute_energy_j for nd in nodes], computed))
    ep = math.fsum(
        chain(
            _repeated([nd.pageout_energy_j for nd in nodes], paged_out),
            _repeated([nd.pagein_energy_j for nd in nodes], paged_in),
        )
    )
    totals = Totals(
        energy_j=ec + ep,
        compute_energy_j=ec,
        paging_energy_j=ep,
        runtime_s=runtime,
        compute_time_s=tc,
        paging_time_s=tp,
        peak_ram_bytes=peak,
        computes=sum(computed),
        recomputes=sum(computed) - n,
        page_ins=sum(paged_in),
        page_outs=sum(paged_out),
        bytes_paged_in=sum(c * b for c, b in zip(paged_in, ram, strict=True)),
        bytes_paged_out=sum(c * b for c, b in zip(paged_out, ram, strict=True)),
    )
    return Replay(totals=totals, ram_after_step=ram_trace)


def check_budget(budget: Budget) -> None:
    """:class:`ScheduleError` unless the RAM budget is a whole number of bytes, the deadline a finite
    positive time (or None) and the paging model one of PAGING_MODES: NaN would let any runtime pass."""
    ram, rt = budget.ram_bytes, budget.runtime_s
    if isinstance(ram, bool) or not isinstance(ram, int) or ram < 0:
        raise ScheduleError(f"budget ram_bytes must be a whole number of bytes >= 0, got {str(ram)[:40]}")
    if rt is not None and (
        isinstance(rt, bool) or not isinstance(rt, (int, float)) or not (math.isfinite(rt) and rt > 0)
    ):
        raise ScheduleError(
            f"budget runtime_s must be a finite number of seconds above 0, or null for no deadline; got {str(rt)[:40]}"
        )
    if budget.paging_time not in PAGING_MODES:
        raise ScheduleError(f"unknown paging_time {str(budget.paging_time)[:40]}; use one of {', '.join(PAGING_MODES)}")


def validate(g: CostedGraph, steps, budget: Budget) -> Totals:
    """Totals of a valid schedule; :class:`ScheduleError` for an invalid one (steps read once, in order)."""
    return simulate(g, steps, budget, trace=False).totals
