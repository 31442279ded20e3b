"""The one-pass paging schedule, first on large graphs: a schedule held from the start.

:func:`~poet.solve.search.stream.stream_schedule` is linear in the graph (1 s on 20,000 nodes, 11-38 s
on the 37,376-node tiled bert under load), so on graphs of ``policy.stream_min_nodes`` or more it runs
before anything else: the time limit or a stop then always has a validated schedule to return, whatever
the phases after it can or cannot finish.  On a tiled graph too large for the portfolio it is the
answer (``state.size_rule``: the streaming page rule).

Beside it runs the same pass with recomputation
(:func:`~poet.solve.search.stream_remat.stream_remat_schedule`: a tensor cheaper to recompute than to page
is dropped and recomputed), and that pass again in another topological order
(:func:`~poet.solve.search.order.stream_remat_reordered`: readers of the same tensors placed together)
and in a depth-first order (:func:`~poet.solve.search.order.stream_remat_recency`: each tile carried
through the layers that read it), on graphs of at most ``policy.stream_remat_max_nodes``.  Their schedules
go through the validator here, and the cheapest of the four is held, so they can only help.

On a tiled graph it runs whatever its size (``policy.stream_small_tiled``): there the one-pass rule in
another order, searched by the order-search phase, beats every stage-form schedule known on some small
instances (bench/tiled_truth.py's resnet-t2: 1.264 mJ against 1.457 mJ; docs/tiling.md, "Searching the
one-pass rule's order").
"""

from __future__ import annotations

from ...schedule.report import PhaseRecord
from ...schedule.validate import ScheduleError, validate
from ..policy import SolvePolicy
from ..search.order import stream_remat_recency, stream_remat_reordered
from ..search.stream import StreamResult, stream_schedule
from ..search.stream_remat import stream_remat_schedule
from .lower_bound import tiled
from .state import SolveState

# the one-pass rule's variants run beside it: what the phase's ``held`` fact calls each, its energy's fact
VARIANTS = (
    ("recompute", "recompute_energy_j", stream_remat_schedule),
    ("recompute, reordered", "reordered_energy_j", stream_remat_reordered),
    ("recompute, depth-first", "depth_first_energy_j", stream_remat_recency),
)


class OnePassPaging:
    name = "one-pass paging"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        n = len(state.g.nodes)
        if state.size_rule:
            return None  # the only phase that runs
        if not state.paging:
            return "no paging in the remat strategy"
        if state.method == "faithful":
            return "the faithful method runs the MILP alone"
        if n < policy.stream_min_nodes and not (policy.stream_small_tiled and tiled(state)):
            return f"{n:,} nodes, fewer than policy.stream_min_nodes"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        """The plain pass may take the whole time left and the grace promised on top
        (docs/reliability.md), since what follows holds no schedule on a graph that size; the variants
        only improve on it, so they get the time left and no grace (the phase as a whole stays within
        the limit plus one grace), and none starts once the limit is past.  A stop ends it at once."""
        state.progress("one-pass paging schedule")
        since, limit = state.time.elapsed(), state.time.limit_s

        def seconds(grace: float) -> float | None:
            left = state.time.left()
            return None if left is None else max(0.0, left) + grace

        g, budget, stop, clock = state.g, state.budget, state.opts.stop, state.opts.clock
        grace = 0.0 if limit is None else 0.05 * limit + 2.0
        found = stream_schedule(g, budget, time_limit=seconds(grace), stop=stop, clock=clock)
        facts = {"found": found.found, "energy_j": found.energy_j}
        if found.resident_pairs is not None:
            facts["resident_pairs"] = found.resident_pairs
        if len(g.nodes) <= state.policy.stream_remat_max_nodes:
            for held, fact, rule in VARIANTS:
                left = seconds(0.0)
                if left is not None and left <= 0.0:
                    facts[fact] = None
                    facts.setdefault("variants_skipped", "the time limit was reached")
                    continue
                other = rule(g, budget, time_limit=left, stop=stop, clock=clock)
                other, facts[fact] = validated(state, other)
                if other.found and (not found.found or other.energy_j < found.energy_j):
                    found = other
                    facts["held"] = held
        if found.found:
            state.stream = found
        elif found.over_deadline:  # the nearest miss so far
            state.note(nearest_runtime_s=found.runtime_s)
            facts["runtime_s"] = found.runtime_s
        return state.phase_record(self.name, since, **facts)


def validated(state: SolveState, found: StreamResult) -> tuple[StreamResult, float | None]:
    """The recomputing pass's schedule as the validator prices it, or nothing if the validator refuses it
    (a defect, recorded in the phase's facts by its missing energy)."""
    if not found.found:
        return found, None
    try:
        totals = validate(state.g, found.steps, state.budget)
    except ScheduleError:
        return StreamResult((), None, None, None), None
    return StreamResult(found.steps, totals.energy_j, totals.runtime_s, found.resident_pairs), totals.energy_j
