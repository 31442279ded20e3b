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
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..residency_bound import residency_bound
from .state import SolveState


class LargeResidencyBound:
    name = "residency bound"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if not state.residency_large:
            most = policy.residency_max_nonzeros
            return f"the lower-bound phase solved the residency ILP (at most {most:,} nonzeros), or none applies"
        if state.stopped():
            return "asked to stop"
        gap = state.gap()
        if gap is not None and gap <= state.opts.gap:
            return "the plan held is within the gap of the bound"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        state.progress("residency bound")
        since, policy = state.time.elapsed(), state.policy
        left = state.time.left()
        longest = policy.cover_time(None) if left is None else max(0.5, policy.residency_share * left)
        rate = policy.residency_nonzeros_per_second
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
        facts = {"residency_bound_energy_j": res.bound, "nonzeros": res.nonzeros, "seconds_at_most": longest}
        if res.reason:
            facts["residency_skipped"] = res.reason
        if res.bound is not None and math.isfinite(res.bound) and state.cover is not None and res.bound > state.lb:
            state.cover = replace(state.cover, bound=res.bound)
            state.note(structural_bound_energy_j=res.bound)
        return state.phase_record(self.name, since, bound_energy_j=state.lb, **facts)
