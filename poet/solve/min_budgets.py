"""The smallest feasible budgets, when the asked ones have no schedule: two MILPs.

One minimises peak RAM at the deadline, the other the runtime at the RAM budget; each gets
``policy.min_budget_seconds`` without a time limit, or what is left of it.
"""

from __future__ import annotations

import math

from ..graph.core import CostedGraph
from ..schedule.core import INFEASIBLE, OPTIMAL, PAGING_HIDDEN, Budget
from ..schedule.report import MinBudgets
from ..units import fmt_bytes, fmt_seconds
from .baselines.keep_all import keep_all_peak
from .lp.highs import get_backend
from .milp.formulation import Formulation, build
from .policy import TimeBudget


def min_budgets(
    g: CostedGraph, budget: Budget, opts, *, remat: bool, paging: bool, time_budget: TimeBudget | None = None
) -> MinBudgets:
    """Smallest feasible RAM (at the deadline) and runtime (at the RAM budget), computed by MILP:
    each gets ``policy.min_budget_seconds`` without a time limit, or what is left of ``time_budget``
    (by default, the options' time limit, starting now)."""
    out: dict = {}
    backend = get_backend(opts.backend)
    policy = opts.policy
    clock = time_budget if time_budget is not None else TimeBudget(opts.time_limit_s, opts.clock)

    def seconds(f: Formulation, share: float, what: str) -> tuple[float, str | None]:
        """The MILP's time limit, and why it is not started (None: it is): like the solve's MILP,
        not when HiGHS could not even set it up in the time left (policy.milp_setup_seconds).  The
        first gets ``share`` of what is left, or all of it when a share is too little."""
        if clock.limit_s is None:
            return policy.min_budget_seconds, None
        rest = clock.left()
        need = policy.milp_setup_seconds(f.problem.num_nonzeros)
        if rest < need:
            return 0.0, (
                f"the smallest feasible {what} was not computed: {max(rest, 0.0):.1f} s of the time "
                f"limit were left, and HiGHS needs about {need:.0f} s to set up its MILP (a longer "
                f"--time-limit computes it)"
            )
        return (share * rest if share * rest >= need else rest), None

    kw = {"stop": opts.stop} if opts.stop is not None else {}
    stopped = opts.stop or (lambda: False)

    def unbuilt(what: str) -> str | None:
        """Why the MILP is not even built: under half of what HiGHS would need to set it up is left, by
        the estimate of its size (building a 1,000-node one alone takes longer than many limits)."""
        if clock.limit_s is None:
            return None
        rest = clock.left()
        need = policy.milp_setup_seconds(policy.estimated_milp_nonzeros(len(g.nodes)))
        if rest >= 0.5 * need:
            return None
        return (
            f"the smallest feasible {what} was not computed: {max(rest, 0.0):.1f} s of the time limit were "
            f"left, and HiGHS needs about {need:.0f} s to set up its MILP (a longer --time-limit computes it)"
        )

    def searched(limit: float) -> str:
        return "before the stop" if stopped() else f"in {limit:.0f} s"

    lower = g.min_ram_bytes()
    if paging and (budget.runtime_s is None or budget.paging_time == PAGING_HIDDEN):
        out["min_ram_bytes"] = lower
        out["min_ram_note"] = "with paging and no binding deadline the node-plus-inputs bound is achievable"
    else:
        hi = max(keep_all_peak(g), lower)
        why = unbuilt("RAM budget")
        f = None if why else build(g, budget, remat=remat, paging=paging, objective="peak_ram", ram_cap_bytes=hi)
        limit, why = (0.0, why) if why else seconds(f, 0.5 if budget.runtime_s is not None else 1.0, "RAM budget")
        res = None if why else backend(f.problem, time_limit=limit, threads=opts.threads, gap=1e-6, **kw)
        scale = hi  # the formulation's memory unit
        if why:
            out["min_ram_note"] = why
        elif res.status == INFEASIBLE:
            out["min_ram_note"] = (
                f"no RAM budget makes the deadline {fmt_seconds(budget.runtime_s)} reachable; "
                f"the deadline itself is too short"
            )
        elif res.x is not None:
            best = int(math.ceil(res.objective * scale - 1e-6))
            lb = int(math.ceil(res.bound * scale - 1e-6)) if res.bound is not None else lower
            out["min_ram_bytes"] = best
            out["min_ram_bytes_lower_bound"] = max(lb, lower)
            out["min_ram_note"] = (
                "proven"
                if res.status == OPTIMAL
                else f"best found {searched(limit)}; proven lower bound {fmt_bytes(max(lb, lower))}"
            )
    if budget.runtime_s is not None and not stopped():
        nob = Budget(budget.ram_bytes, None, budget.paging_time)
        why = unbuilt("deadline")
        f = None if why else build(g, nob, remat=remat, paging=paging, objective="runtime")
        limit, why = (0.0, why) if why else seconds(f, 1.0, "deadline")
        res = None if why else backend(f.problem, time_limit=limit, threads=opts.threads, gap=1e-6, **kw)
        if why:
            out["min_runtime_note"] = why
        elif res.status == INFEASIBLE:
            out["min_runtime_note"] = f"the RAM budget {fmt_bytes(budget.ram_bytes)} is infeasible at any deadline"
        elif res.x is not None:
            out["min_runtime_s"] = res.objective * (g.plain_runtime_s or 1.0)
            out["min_runtime_note"] = "proven" if res.status == OPTIMAL else f"best found {searched(limit)}"
    return MinBudgets(
        ram_bytes=out.get("min_ram_bytes"),
        ram_bytes_lower_bound=out.get("min_ram_bytes_lower_bound"),
        ram_note=out.get("min_ram_note"),
        runtime_s=out.get("min_runtime_s"),
        runtime_note=out.get("min_runtime_note"),
    )
