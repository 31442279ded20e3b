"""The residency bound (:mod:`poet.solve.residency_bound`) on an ILP too large for the lower-bound phase.

Past ``policy.residency_max_nonzeros`` the ILP needs minutes before HiGHS reports a first bound
(vgg16_cifar at 32 KiB on the ``m4``: 4.2M nonzeros, presolve 53 s, a first bound at 83 s), so it runs
here, once the rules hold a schedule: a stop or the time limit meanwhile answers with that schedule, not
with nothing.  It is built only if its nonzeros, at ``policy.residency_nonzeros_per_second``, fit in
``policy.residency_share`` of the time left, and then gets that share (it returns sooner when it proves
its optimum): its bound keeps rising for minutes, and on 2 busy cores resnet18_cifar at 256 KiB reached
7.08 J in 150 s, where alone it reaches 7.287 J in 120 s.  It is solved in a child process whose last dual
bound is read at the limit or on a stop (:mod:`poet.solve.lp.bound_process`).  The larger of it and the
bound held is kept.

On a tiled graph past ``policy.residency_max_nodes`` (up to ``policy.residency_stretch_max_nodes``), or
when the whole ILP does not fit its time, the bound is taken stretch by stretch instead
(:mod:`poet.solve.residency_stretches`: ``policy.residency_stretch_moments`` moments each, solved on as
many cores as the solve may use, in ``policy.residency_stretch_share`` of the time left), where the plan
held is more than ``policy.residency_stretch_min_gap`` above the bound.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..residency_bound import residency_bound
from ..residency_stretches import stretched_residency_bound
from ..search.pool import worker_count
from .lower_bound import tiled
from .state import SolveState


class LargeResidencyBound:
    name = "residency bound"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if not state.residency_large and not stretched_applies(state, policy):
            most = policy.residency_max_nonzeros
            return f"the lower-bound phase solved the residency ILP (at most {most:,} nonzeros), or none applies"
        if state.stopped():
            return "asked to stop"
        gap = state.gap()
        if gap is not None and gap <= state.opts.gap:
            return "the plan held is within the gap of the bound"
        if not state.residency_large and gap is not None and gap <= policy.residency_stretch_min_gap:
            least = policy.residency_stretch_min_gap
            return f"the plan held is within {least:.0%} of the bound (policy.residency_stretch_min_gap)"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        state.progress("residency bound")
        since, policy = state.time.elapsed(), state.policy
        left = state.time.left()
        longest = policy.cover_time(None) if left is None else max(0.5, policy.residency_share * left)
        rate = policy.residency_nonzeros_per_second
        facts: dict = {"seconds_at_most": longest}
        bound = None
        if state.residency_large:
            res = residency_bound(
                state.g,
                state.budget,
                remat=state.remat,
                paging=state.paging,
                max_nodes=policy.residency_max_nodes,
                max_nonzeros=max(policy.residency_max_nonzeros, int(rate * longest)),
                time_limit=longest,
                stop=state.opts.stop,
                child_past=policy.residency_max_nonzeros,
            )
            bound = res.bound
            facts.update(residency_bound_energy_j=res.bound, nonzeros=res.nonzeros)
            if res.reason:
                facts["residency_skipped"] = res.reason
        if bound is None and not state.stopped():  # past the whole ILP's reach: stretch by stretch
            left = state.time.left()
            share = policy.residency_stretch_share
            seconds = policy.cover_time(None) if left is None else max(0.5, share * left)
            part = stretched_residency_bound(
                state.g,
                state.budget,
                remat=state.remat,
                paging=state.paging,
                time_limit=seconds,
                size=policy.residency_stretch_moments,
                stop=state.opts.stop,
                workers=worker_count(state.opts.threads),
                child_past=policy.residency_max_nonzeros,
                progress=state.progress,
            )
            bound = part.bound
            facts.update(
                seconds_at_most=seconds,
                stretched_bound_energy_j=part.bound,
                stretches=part.stretches,
                stretches_solved=part.solved,
                stretch_nonzeros_at_most=part.max_nonzeros,
                stretches_ended=part.ended,
            )
        if bound is not None and math.isfinite(bound) and state.cover is not None and bound > state.lb:
            state.cover = replace(state.cover, bound=bound)
            state.note(structural_bound_energy_j=bound)
        return state.phase_record(self.name, since, bound_energy_j=state.lb, **facts)


def stretched_applies(state: SolveState, policy: SolvePolicy) -> bool:
    """A tiled graph too large for the whole residency ILP, small enough to cut into stretches."""
    n = len(state.g.nodes)
    return tiled(state) and policy.residency_max_nodes < n <= policy.residency_stretch_max_nodes
