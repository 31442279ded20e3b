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
from ..graph.weight_traffic import derive_traffic
from ..graph.weights import NO_TRAFFIC, RAM, Traffic
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
    traffic = checked_weights(g)
    moved = NO_TRAFFIC
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
            if traffic is not None:
                moved = moved + traffic[v]
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
        **_weight_totals(g, moved),
    )
    return Replay(totals=totals, ram_after_step=ram_trace)


def checked_weights(g: CostedGraph) -> tuple[Traffic, ...] | None:
    """Each node's weight traffic, derived again from the graph, when the weights are streamed.

    Refuses (:class:`ScheduleError`) a graph whose placement is not what its fixed RAM holds, a node
    whose recorded traffic is not the derived one (a left-out traffic included), and a node whose
    compute cost is below the storage price of its traffic (a cost that leaves the traffic out)."""
    w = g.weights
    if w is None or not w.streamed:
        carrying = next((v for v, nd in enumerate(g.nodes) if not nd.weight_traffic.empty), None)
        if carrying is not None:
            raise ScheduleError(
                f"{_node_label(g, carrying)} records weight traffic, but the graph's weights are "
                f"{g.placement}, not streamed: its traffic cannot be checked; re-price the graph with --weights"
            )
    if w is None:
        return None
    if w.placement == RAM and g.fixed_ram_bytes < w.param_bytes:
        raise ScheduleError(
            f"weights in RAM: the fixed RAM {g.fixed_ram_bytes} B does not hold the {w.param_bytes} B of parameters"
        )
    if not w.streamed:
        return None
    if g.fixed_ram_bytes < w.staging_bytes:
        raise ScheduleError(
            f"streamed weights: the fixed RAM {g.fixed_ram_bytes} B does not hold the {w.staging_bytes} B "
            f"staging buffer"
        )
    derived = derive_traffic([(nd.name, nd.kind, nd.tile, nd.ram_bytes) for nd in g.nodes], w)
    for v, (nd, t) in enumerate(zip(g.nodes, derived)):
        if nd.weight_traffic != t:
            raise ScheduleError(
                f"{_node_label(g, v)}: streamed weights: it records weight traffic {nd.weight_traffic.to_list()} "
                f"[read B, written B, reads, writes] but its layer's parameters make it {t.to_list()}; "
                f"re-price the graph with --weights stream"
            )
        slack = 1 - 1e-9
        if nd.compute_time_s < w.seconds(t) * slack or nd.compute_energy_j < w.joules(t) * slack:
            raise ScheduleError(
                f"{_node_label(g, v)}: streamed weights: its compute cost ({nd.compute_time_s:.6g} s, "
                f"{nd.compute_energy_j:.6g} J) leaves out its weight traffic ({w.seconds(t):.6g} s, "
                f"{w.joules(t):.6g} J); re-price the graph with --weights stream"
            )
    return derived


def _weight_totals(g: CostedGraph, moved: Traffic) -> dict:
    w = g.weights
    if w is None or not w.streamed:
        return {}
    return {
        "weight_energy_j": w.joules(moved),
        "weight_time_s": w.seconds(moved),
        "weight_read_bytes": moved.read_bytes,
        "weight_write_bytes": moved.write_bytes,
        "weight_reads": moved.reads,
        "weight_writes": moved.writes,
    }


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
