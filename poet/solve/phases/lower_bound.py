"""The eviction cover (:mod:`poet.solve.bounds`): the proven bound every gap is measured against, and
the guide the greedy rules follow first.  When no eviction set meets the deadline the answer is
``infeasible`` at once, with the shortest runtime any schedule needs (the runtime cover).  On a tiled
graph the reader-gap cover (:mod:`poet.solve.reader_gaps`, which charges a restoration per absence
between two readers of a tile) follows, and on a small one the residency bound
(:mod:`poet.solve.residency_bound`, which sees paging forced by the RAM a restoration needs); the largest
bound is the one held.  A residency ILP past ``policy.residency_max_nonzeros`` is left to the
residency-bound phase (:mod:`poet.solve.phases.residency`), after the rules hold a schedule."""

from __future__ import annotations

import math
from dataclasses import replace

from ...schedule.report import PhaseRecord
from ..bounds import eviction_cover
from ..policy import SolvePolicy
from ..reader_gaps import reader_gap_bound
from ..residency_bound import residency_bound
from .state import SolveState


class LowerBound:
    name = "lower bound"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        return state.size_rule

    def run(self, state: SolveState) -> PhaseRecord:
        state.progress("lower bound")
        since = state.time.elapsed()
        state.cover = cover = eviction_cover(
            state.g,
            state.budget,
            remat=state.remat,
            paging=state.paging,
            time_limit=state.cover_seconds(0.5),
            stop=state.opts.stop,
            policy=state.policy,
        )
        facts = {"evictions": len(cover.guide), **cover.facts()}
        if math.isfinite(cover.bound) and tiled(state) and state.policy.reader_gap_share > 0 and not state.stopped():
            gaps = reader_gap_bound(
                state.g,
                state.budget,
                remat=state.remat,
                paging=state.paging,
                time_limit=min(state.cover_seconds(state.policy.reader_gap_share), state.policy.reader_gap_max_seconds),
                stop=state.opts.stop,
                policy=state.policy,
            )
            facts.update(cover_bound_energy_j=cover.bound, reader_gap_bound_energy_j=gaps.bound)
            if gaps.reason:
                facts["reader_gap_skipped"] = gaps.reason
            if gaps.bound is not None and math.isfinite(gaps.bound) and gaps.bound > cover.bound:
                state.cover = cover = replace(cover, bound=gaps.bound)
        if math.isfinite(cover.bound) and residency_applies(state):
            most = state.policy.residency_max_nonzeros
            res = residency_bound(
                state.g,
                state.budget,
                remat=state.remat,
                paging=state.paging,
                time_limit=state.cover_seconds(state.policy.residency_share),
                max_nodes=state.policy.residency_max_nodes,
                max_nonzeros=most,
                stop=state.opts.stop,
            )
            facts.setdefault("cover_bound_energy_j", cover.bound)
            facts["residency_bound_energy_j"] = res.bound
            if res.reason:
                facts["residency_skipped"] = res.reason
            if res.bound is None and res.nonzeros > most:
                state.residency_large = True  # the residency-bound phase tries it, once a schedule is held
            # a finite bound only: the cover's answer on whether the deadline is reachable stands
            if res.bound is not None and math.isfinite(res.bound) and res.bound > cover.bound:
                state.cover = cover = replace(cover, bound=res.bound)
        rec = state.phase_record(self.name, since, bound_energy_j=cover.bound, **facts)
        if math.isfinite(cover.bound):
            state.note(structural_bound_energy_j=cover.bound)
        else:
            state.runtime_cover()  # the answer says how short a deadline any schedule needs
        return rec


def tiled(state: SolveState) -> bool:
    """The planner's graph, or any whose nodes are tiles: where the tighter bounds run."""
    return state.opts.tiled or any(nd.tile is not None for nd in state.g.nodes)


def residency_applies(state: SolveState) -> bool:
    """The residency bound runs on tiled graphs small enough for it (``policy.residency_max_nodes``)."""
    return tiled(state) and len(state.g.nodes) <= state.policy.residency_max_nodes and not state.stopped()
