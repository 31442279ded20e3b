"""The eviction cover (:mod:`poet.solve.bounds`): the proven bound every gap is measured against, and
the guide the greedy rules follow first.  When no eviction set meets the deadline the answer is
``infeasible`` at once, with the shortest runtime any schedule needs (the runtime cover).  On a tiled
graph the reader-gap cover (:mod:`poet.solve.reader_gaps`, which charges a restoration per absence
between two readers of a tile) follows, and on a small one the residency bound
(:mod:`poet.solve.residency_bound`, which sees paging forced by the RAM a restoration needs); the largest
bound is the one held."""

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
            policy, short = state.policy, state.cover_seconds(state.policy.residency_share)
            longest, rate = residency_longest(state), state.policy.residency_nonzeros_per_second
            res = residency_bound(
                state.g,
                state.budget,
                remat=state.remat,
                paging=state.paging,
                max_nodes=policy.residency_max_nodes,
                max_nonzeros=max(policy.residency_max_nonzeros, int(rate * longest)),
                stop=state.opts.stop,
                seconds_for=lambda nonzeros: max(short, min(longest, 2 * nonzeros / rate)),
                child_past=policy.residency_max_nonzeros,
            )
            facts.setdefault("cover_bound_energy_j", cover.bound)
            facts["residency_bound_energy_j"] = res.bound
            if res.reason:
                facts["residency_skipped"] = res.reason
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


def residency_longest(state: SolveState) -> float:
    """The most the residency bound's ILP may get: ``policy.residency_share`` of the time left (the
    cover's time without a limit).  An ILP is built only if its nonzeros, at
    ``policy.residency_nonzeros_per_second``, fit in it; it gets twice that estimate, at least the cover's
    share, at most this."""
    left = state.time.left()
    return state.policy.cover_time(None) if left is None else max(0.5, state.policy.residency_share * left)


def residency_applies(state: SolveState) -> bool:
    """The residency bound runs on tiled graphs small enough for it (``policy.residency_max_nodes``)."""
    return tiled(state) and len(state.g.nodes) <= state.policy.residency_max_nodes and not state.stopped()
