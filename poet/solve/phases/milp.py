"""The MILP (:mod:`poet.solve.milp`), warm-started from the plan held, on HiGHS: the last phase, run only
when no schedule is yet within the gap of the bound (``fast``; always with ``warm`` and ``faithful``,
never with ``heuristic``).

HiGHS does not check its time limit through presolve, its MIP setup and, on large models, the root LP
(docs/pipeline.md, "MILP and backend"): with a schedule already held the MILP is not started when less
than ``policy.milp_setup_s_per_nonzero`` per nonzero of the time limit is left, and not even built when
what is left is under half of that by the size estimate.  What HiGHS answers is read in
:func:`poet.solve.phases.answer.milp_answer`.
"""

from __future__ import annotations

from types import MappingProxyType

from ...schedule.report import PhaseRecord
from ..lp.highs import get_backend
from ..milp.formulation import Formulation, build
from ..milp.warm_start import plan_to_start
from ..policy import SolvePolicy
from ..result import relative_gap
from .state import MilpSkip, SolveState


class Milp:
    name = "MILP"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.size_rule:
            return state.size_rule
        if state.infeasible:
            return "the eviction cover proved the deadline out of reach"
        if state.method == "heuristic":
            return "the heuristic method runs no MILP"
        if state.method == "fast" and state.capuchin_proven():
            return "the Capuchin-style schedule is within the gap of the bound"
        if state.method == "fast" and state.plan_proven():
            return "the plan held is within the gap of the bound"
        if state.stopped():
            return "asked to stop"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        """Warm-started from the plan held, unless HiGHS could not set it up in the time left."""
        g, opts, policy = state.g, state.opts, state.policy
        plan, limited = state.plan, opts.time_limit_s is not None
        if state.milp is None and plan is not None and limited:
            # not built yet (after the interval search, which leaves a tenth of the time): when what is
            # left is under half of what HiGHS would need by the estimate (which the zoo and aten graphs'
            # MILPs reach to within 25%), it could not start either, and is not even built (up to 1 s)
            rest, nonzeros = state.time.left(), policy.estimated_milp_nonzeros(len(g.nodes))
            need = policy.milp_setup_seconds(nonzeros)
            if rest < 0.5 * need:
                return self.not_started(state, MilpSkip(max(rest, 0.0), need, nonzeros, True))
        if state.milp is None:
            state.milp = build_milp(state)
        f = state.milp
        if plan is not None and limited:
            rest, need = state.time.left(), policy.milp_setup_seconds(f.problem.num_nonzeros)
            if rest < need:
                # it would stop at its time limit no sooner than `need` from now, with nothing new
                return self.not_started(state, MilpSkip(max(rest, 0.0), need, f.problem.num_nonzeros, False))
        kw = {}
        if plan is not None:
            start, why = plan_to_start(f, g, plan)
            state.note(warm_start=state.origin.value if start is not None else f"none ({why})")
            if start is not None:
                kw["start"] = start
        if opts.stop is not None:
            kw["stop"] = opts.stop
        since = state.time.elapsed()
        res = get_backend(opts.backend)(
            f.problem,
            time_limit=max(0.1, state.time.left()) if limited else None,
            threads=opts.threads,
            gap=opts.gap,
            progress=None if opts.progress is None else MilpProgress(state, f),
            verbose=opts.verbose,
            **kw,
        )
        state.milp_result = res
        return state.phase_record(self.name, since, status=res.status, detail=res.detail, **res.extra)

    def not_started(self, state: SolveState, skip: MilpSkip) -> PhaseRecord:
        state.milp_skip = skip
        why = f"{skip.rest_s:.1f} s left, too few to start the MILP (about {skip.need_s:.0f} s)"
        return PhaseRecord(self.name, 0.0, state.plan_e, MappingProxyType({"skipped": why}))


def build_milp(state: SolveState) -> Formulation:
    """The MILP of the state's problem (tightened under ``fast``), its build recorded."""
    since = state.time.elapsed()
    state.progress("building the MILP", objective=state.plan_e, bound=state.lb)
    built = build(state.g, state.budget, remat=state.remat, paging=state.paging, tighten=(state.method == "fast"))
    state.record("MILP build", since, nonzeros=built.problem.num_nonzeros)
    return built


class MilpProgress:
    """HiGHS's progress in joules, against the better of the solver's bound and the structural one.  With
    a warm start the best is the schedule held: HiGHS 1.16 reports objectives in its presolved space,
    where it priced the resnet18_cifar/m4 start 0.3% of plain below its value."""

    def __init__(self, state: SolveState, f: Formulation):
        self.state, self.f, self.plan_e, self.lb = state, f, state.plan_e, state.lb

    def __call__(self, d: dict) -> None:
        unit, obj = self.f.energy_unit, self.plan_e
        if obj is None and d.get("objective") is not None:
            obj = d["objective"] * unit
        bnd = max(self.lb, (d.get("bound") or 0.0) * unit)
        gap = None if obj is None else relative_gap(obj, bnd)
        self.state.progress("MILP", objective=obj, bound=bnd, nodes=d.get("nodes"), gap=gap)
