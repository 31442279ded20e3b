"""The MILP (:mod:`poet.solve.milp`), warm-started from the plan held, on HiGHS: the last phase, run only
when no schedule is yet within the gap of the bound (``fast``; always with ``warm`` and ``faithful``,
never with ``heuristic``).

HiGHS does not check its time limit through presolve, its MIP setup and, on large models, the root LP
(docs/pipeline.md, "MILP and backend"): with a schedule already held the MILP is not started when less
than ``policy.milp_setup_s_per_nonzero`` per nonzero of the time limit is left, and not even built when
what is left is under half of that by the size estimate.  What HiGHS answers is read in
:func:`poet.solve.phases.answer.milp_answer`.

On a small tiled graph (``policy.tiled_cpsat_max_nodes``) CP-SAT runs first on the same MILP, when
OR-Tools is installed (:func:`cpsat_skip_reason` says why not, in the phase's facts): on the ``m4``'s
tiny tiles a page is mostly the SD card's latency, the optimum recomputes instead, and CP-SAT's search
finds such schedules where HiGHS, warm-started from the rules' paging-side plans, does not.  HiGHS then
starts from the cheaper of CP-SAT's schedule and the plan held, in the time CP-SAT leaves; the cheaper
answer and the larger bound of the two are kept (:func:`better_of`), so the pass can only help.  From a
warm start CP-SAT runs only its neighbourhood search (``policy.tiled_cpsat_lns_only``, measured there),
and on graphs of at most ``policy.tiled_cpsat_small_nodes`` nodes it alternates with a neighbourhood search
on the MILP's own columns (:func:`cpsat_rounds`, :mod:`~poet.solve.milp.neighbourhoods`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

from ...schedule.core import FEASIBLE, INFEASIBLE, OPTIMAL
from ...schedule.report import PhaseRecord
from ..lp.cpsat import available, solve_cpsat
from ..lp.highs import get_backend
from ..lp.problem import MilpProblem, MilpResult, max_violation
from ..milp.formulation import Formulation, build
from ..milp.neighbourhoods import improve_by_neighbourhoods
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
        progress = None if opts.progress is None else MilpProgress(state, f)
        first, why_not, search = None, cpsat_skip_reason(state), {}
        if why_not is None:
            share = policy.tiled_cpsat_share * state.time.left() if limited else policy.tiled_cpsat_seconds
            lns_only = policy.tiled_cpsat_lns_only and kw.get("start") is not None and small_for_cpsat(state)
            search = {"cpsat_search": "LNS only" if lns_only else "default"}
            first = cpsat_rounds(state, f, kw, share, lns_only, progress, search)
            rest = state.time.left()
            if (
                first.status in (OPTIMAL, INFEASIBLE)
                or state.stopped()
                or (limited and rest < policy.milp_setup_seconds(f.problem.num_nonzeros))
            ):
                state.milp_result = first = replace(first, extra={"found_by": "CP-SAT", **first.extra})
                facts = {**first.extra, **search}
                return state.phase_record(
                    self.name, since, status=first.status, detail=f"CP-SAT: {first.detail}", **facts
                )
        res = get_backend(opts.backend)(
            f.problem,
            time_limit=max(0.1, state.time.left()) if limited else None,
            threads=opts.threads,
            gap=opts.gap,
            progress=progress,
            verbose=opts.verbose,
            **kw,
        )
        if first is not None:
            res = better_of(first, res, opts.gap)
        state.milp_result = res
        facts = {**res.extra, **search} if first is not None else {**res.extra, "cpsat_first": f"skipped: {why_not}"}
        return state.phase_record(self.name, since, status=res.status, detail=res.detail, **facts)

    def not_started(self, state: SolveState, skip: MilpSkip) -> PhaseRecord:
        state.milp_skip = skip
        why = f"{skip.rest_s:.1f} s left, too few to start the MILP (about {skip.need_s:.0f} s)"
        return PhaseRecord(self.name, 0.0, state.plan_e, MappingProxyType({"skipped": why}))


def cpsat_rounds(
    state: SolveState, f: Formulation, kw: dict, share: float, lns_only: bool, progress, search: dict
) -> MilpResult:
    """CP-SAT on the MILP for ``share`` seconds, from ``kw["start"]`` if any (updated to the best found).

    On a small graph (:func:`small_for_cpsat`) the time goes in rounds of ``policy.tiled_neighbourhood_round_s``:
    CP-SAT's search, then the neighbourhood search on the MILP's columns
    (:mod:`~poet.solve.milp.neighbourhoods`) for ``policy.tiled_neighbourhood_share`` of the round, each
    from the other's best: each stops in local optima the other leaves.  The answer is the cheapest
    schedule found (``found_by`` names who), with the largest bound CP-SAT proved."""
    policy, opts, p = state.policy, state.opts, f.problem
    hoods = policy.tiled_neighbourhood_share if small_for_cpsat(state) else 0.0
    began = state.time.elapsed()
    ends, rounds = began + share, 0
    best: MilpResult | None = None
    bounds: list[float] = []
    tried = improved = 0
    while True:
        left = ends - state.time.elapsed()
        cp_s = min(left, policy.tiled_neighbourhood_round_s * (1.0 - hoods)) if hoods > 0 else share
        options = {"use_lns_only": lns_only, "random_seed": 1 + rounds}  # 1: CP-SAT's default
        r = usable(
            p,
            solve_cpsat(
                p,
                time_limit=max(0.1, cp_s),
                threads=opts.threads,
                gap=opts.gap,
                progress=progress,
                options=options,
                **kw,
            ),
        )
        rounds += 1
        bounds += [r.bound] if r.bound is not None and math.isfinite(r.bound) else []
        if best is None or (r.x is not None and (best.x is None or r.objective < best.objective)):
            best = replace(r, extra={**r.extra, "found_by": "CP-SAT"})
        if r.x is not None and (kw.get("start") is None or r.objective < p.c @ kw["start"]):
            kw["start"] = r.x
        left = ends - state.time.elapsed()
        if hoods <= 0 or r.status in (OPTIMAL, INFEASIBLE) or kw.get("start") is None or left <= 0.1 or state.stopped():
            break
        state.progress("MILP neighbourhoods", objective=state.plan_e, bound=state.lb)
        run = improve_by_neighbourhoods(
            f,
            state.g,
            kw["start"],
            time_limit=min(left, policy.tiled_neighbourhood_round_s * hoods),
            seed=rounds,
            threads=opts.threads,
            stop=opts.stop,
        )
        tried, improved = tried + run.tried, improved + run.improved
        if run.improved:
            kw["start"] = run.x
            best = replace(
                best,
                status=FEASIBLE,
                x=run.x,
                objective=run.objective,
                extra={**best.extra, "found_by": "neighbourhoods"},
            )
        if ends - state.time.elapsed() <= 0.1:
            break
    if hoods > 0:
        search["neighbourhoods"] = f"{rounds} rounds; {improved} of {tried} neighbourhoods improved"
    if best.x is None or not bounds:
        return replace(best, seconds=state.time.elapsed() - began)
    bound = min(max(bounds), best.objective)
    gap = relative_gap(best.objective, bound)
    status = OPTIMAL if gap <= opts.gap else FEASIBLE
    return replace(best, status=status, bound=bound, gap=gap, seconds=state.time.elapsed() - began)


def cpsat_skip_reason(state: SolveState) -> str | None:
    """Why CP-SAT does not run before HiGHS (None: it does): it does on a tiled graph of at most
    ``policy.tiled_cpsat_max_nodes`` nodes, HiGHS asked for, OR-Tools installed."""
    g, policy = state.g, state.policy
    if state.opts.backend != "highs":
        return f"the {state.opts.backend} backend was asked for"
    if not (state.opts.tiled or any(nd.tile is not None for nd in g.nodes)):
        return "not a tiled graph"
    if len(g.nodes) > policy.tiled_cpsat_max_nodes:
        return f"{len(g.nodes)} nodes, past policy.tiled_cpsat_max_nodes ({policy.tiled_cpsat_max_nodes})"
    if not available():
        return "OR-Tools is not installed (pip install 'poet-edge[cp]')"
    return None


def small_for_cpsat(state: SolveState) -> bool:
    """A graph small enough (``policy.tiled_cpsat_small_nodes``) for the CP-SAT pass to search only
    neighbourhoods and to take the guide search's time."""
    return len(state.g.nodes) <= state.policy.tiled_cpsat_small_nodes


def usable(p: MilpProblem, r: MilpResult) -> MilpResult:
    """CP-SAT's answer with its schedule only when that satisfies the MILP itself, not only CP-SAT's
    relaxation of it (the deadline row is rounded outwards there); its bound stays a bound either way."""
    if r.x is None or max_violation(p, r.x) <= 1e-7:
        return r
    status = FEASIBLE if r.status == OPTIMAL else r.status
    return replace(r, status=status, x=None, objective=None, gap=None, detail=f"{r.detail}; its schedule broke a row")


def better_of(first: MilpResult, then: MilpResult, gap: float) -> MilpResult:
    """One answer from CP-SAT's and HiGHS's on the same MILP: the cheaper incumbent, the larger proven
    bound (each solver's bound is a bound of the MILP), either's proof of infeasibility."""
    if INFEASIBLE in (first.status, then.status):
        return first if first.status == INFEASIBLE else then
    found = [r for r in (first, then) if r.x is not None]
    best = min(found, key=lambda r: r.objective) if found else then
    bounds = [r.bound for r in (first, then) if r.bound is not None and math.isfinite(r.bound)]
    bound = max(bounds) if bounds else None
    detail = f"CP-SAT: {first.detail}; HiGHS: {then.detail}"
    extra = {
        **then.extra,
        "cpsat_seconds": first.seconds,
        "found_by": first.extra.get("found_by", "CP-SAT") if best is first else "HiGHS",
    }
    if best.x is None:
        return replace(then, bound=bound, seconds=first.seconds + then.seconds, detail=detail, extra=extra)
    if bound is not None:
        bound = min(bound, best.objective)
    rel = relative_gap(best.objective, bound) if bound is not None else None
    status = OPTIMAL if rel is not None and rel <= gap else FEASIBLE
    return MilpResult(status, best.x, best.objective, bound, rel, first.seconds + then.seconds, detail, extra)


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
