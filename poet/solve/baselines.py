"""Fixed-rule baselines: keep everything, and Chen et al.'s sqrt(n) checkpointing.

They build a schedule directly, replay it, and say ``infeasible`` honestly
when it does not fit the budgets.  (The MILP-based ``remat`` and ``paging``
baselines live in :mod:`poet.solve.milp`.)
"""
from __future__ import annotations

import math

from ..graph.core import FORWARD, CostedGraph
from ..schedule.core import HEURISTIC, INFEASIBLE, OPTIMAL, Budget, Schedule, Step
from ..schedule.validate import simulate
from ..units import fmt_bytes, fmt_seconds
from .api import register


def keep_all_steps(g: CostedGraph) -> list[Step]:
    """Compute in order; free each output right after its last reader."""
    last_use = [max(r, i) for i, r in enumerate(g.last_reader)]   # an unread output: freed at once
    steps: list[Step] = []
    for k in range(len(g.nodes)):
        steps.append(Step("compute", k, k))
        for i in (*g.preds[k], k):
            if last_use[i] == k:
                steps.append(Step("free", i, k))
    return steps


def keep_all_peak(g: CostedGraph) -> int:
    """RAM peak of plain backprop (fixed bytes included)."""
    return simulate(g, keep_all_steps(g)).totals.peak_ram_bytes


def judged(g: CostedGraph, budget: Budget, steps: list[Step], strategy: str, status_if_fits: str,
           info: dict) -> Schedule:
    """A fixed schedule against the budgets: itself if it fits, else an honest ``infeasible``."""
    totals = simulate(g, steps, Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)).totals
    problems = []
    if totals.peak_ram_bytes > budget.ram_bytes:
        problems.append(f"needs {fmt_bytes(totals.peak_ram_bytes)} of RAM, budget {fmt_bytes(budget.ram_bytes)}")
    if budget.runtime_s is not None and totals.runtime_s > budget.runtime_s * (1 + 1e-6):
        problems.append(f"needs {fmt_seconds(totals.runtime_s)}, budget {fmt_seconds(budget.runtime_s)}")
    solver = {"method": strategy, **info, "strategy_peak_ram_bytes": totals.peak_ram_bytes,
              "strategy_runtime_s": totals.runtime_s, "strategy_energy_j": totals.energy_j}
    if problems:
        solver["message"] = f"{strategy} schedule " + "; ".join(problems)
        if budget.runtime_s is None or totals.runtime_s <= budget.runtime_s * (1 + 1e-6):
            solver["min_ram_bytes"] = totals.peak_ram_bytes
        else:    # its runtime does not depend on the RAM budget: no RAM budget makes it meet this deadline
            solver["min_ram_note"] = (f"no RAM budget makes the {strategy} schedule meet this deadline: it needs "
                                      f"{fmt_seconds(totals.runtime_s)} (and {fmt_bytes(totals.peak_ram_bytes)} of "
                                      f"RAM); give --runtime {totals.runtime_s * (1 + 1e-6):.6g}s or more")
        return Schedule(graph=g, budget=budget, steps=(), status=INFEASIBLE, strategy=strategy, solver=solver)
    return Schedule(graph=g, budget=budget, steps=tuple(steps), status=status_if_fits, strategy=strategy,
                    solver=solver)


@register("keep-all", "plain backprop: every output kept until its last reader")
def solve_keep_all(g: CostedGraph, budget: Budget, opts) -> Schedule:
    # Every node computed once and nothing paged is the energy lower bound, so a
    # keep-all schedule that fits is provably optimal.
    return judged(g, budget, keep_all_steps(g), "keep-all", OPTIMAL,
                  {"message": "meets the energy lower bound (each node computed once, nothing paged)",
                   "gap": 0.0})


def chain_cut_points(g: CostedGraph) -> list[int]:
    """Forward nodes that no forward edge jumps over: safe segment boundaries.

    ``c`` is a cut point when every forward edge ``(u, v)`` with ``u < c`` has
    ``v <= c``: the forward nodes after ``c`` read nothing from before ``c``
    except through ``c`` itself, so keeping ``c`` is enough to recompute them.
    """
    fwd = g.forward_ids()
    fset = set(fwd)
    cuts, furthest = [], -1
    for c in fwd:
        if furthest <= c:
            cuts.append(c)
        for s in g.succs[c]:
            if s in fset:
                furthest = max(furthest, s)
    return cuts


def segment_steps(g: CostedGraph, checkpoints) -> list[Step]:
    """Chen et al.'s segmented recomputation as an instruction list.

    Forward pass: every forward output that is not a checkpoint and lies
    before the last checkpoint is dropped as soon as its last *forward*
    reader has run (even though the backward pass will want it); checkpoints
    and the tail after the last checkpoint are kept.  Backward pass: when a
    backward node needs a dropped tensor, the missing part of its segment is
    recomputed from the nearest resident ancestors (the checkpoint), and
    every recomputed tensor stays only while a later node still needs it
    (directly, or to recompute something that is missing).  The stage of a
    recompute is the backward node it serves, like the MILP's stages.
    """
    n = len(g.nodes)
    fset = set(g.forward_ids())
    cps = set(checkpoints)
    last_cp = max(cps) if cps else -1
    droppable = {i for i in fset if i not in cps and i < last_cp}
    max_fwd_reader = [max((s for s in g.succs[i] if s in fset), default=-1) for i in range(n)]
    resident: set[int] = set()
    steps: list[Step] = []

    def needed_after(k: int, forward_phase: bool):
        """Does a node after ``k`` still need i, directly or to recompute a missing tensor?

        In the forward phase a droppable tensor counts as missing even while
        resident, because the drop rule will remove it before the backward pass.
        """
        memo: dict[int, bool] = {}

        def missing(s: int) -> bool:
            return s not in resident or (forward_phase and s in droppable)

        def need(i: int) -> bool:
            if i not in memo:
                memo[i] = any(s > k or (missing(s) and need(s)) for s in g.succs[i])
            return memo[i]
        return need

    def ensure(x: int, stage: int):
        if x in resident:
            return
        for p in g.preds[x]:
            ensure(p, stage)
        steps.append(Step("compute", x, stage))
        resident.add(x)

    for k in range(n):
        for p in g.preds[k]:
            ensure(p, k)
        steps.append(Step("compute", k, k))
        resident.add(k)
        fwd_phase = g.nodes[k].kind == FORWARD
        need = needed_after(k, fwd_phase)
        for i in sorted(resident):
            if fwd_phase and i in droppable:
                drop = max_fwd_reader[i] <= k   # Chen: interiors are not kept for the backward pass
            else:
                drop = not need(i)
            if drop:
                resident.discard(i)
                steps.append(Step("free", i, k))
    return steps


def chen_plans(g: CostedGraph) -> dict[str, list[int]]:
    """Checkpoint sets: the sqrt(n) rule, and Chen's memory-greedy rule over a grid of budgets.

    sqrt(n): every ~sqrt(n)-th forward node, snapped forward to the next cut
    point.  Greedy (Chen et al. 2016, Sec. 4.3): walk the forward nodes adding
    up output sizes and close a segment at the first cut point once the sum
    exceeds ``B``; ``B`` is searched on a geometric grid, as in the paper.
    """
    cuts = chain_cut_points(g)
    fwd = g.forward_ids()
    plans: dict[str, list[int]] = {}
    if not fwd:
        return {"sqrt(n)": []}
    stride = max(1, round(math.sqrt(len(fwd))))
    chosen: list[int] = []
    for j in range(stride - 1, len(fwd), stride):
        c = next((c for c in cuts if c >= fwd[j]), None)
        if c is not None and c not in chosen:
            chosen.append(c)
    plans[f"sqrt(n): every ~{stride} forward nodes"] = chosen
    cutset = set(cuts)
    sizes = [g.nodes[i].ram_bytes for i in fwd]
    total, biggest = sum(sizes), max(sizes)
    if total > 0 and biggest > 0:
        lo, hi = math.log(max(biggest, 1)), math.log(total)
        for j in range(16):
            b = math.exp(lo + (hi - lo) * j / 15)
            cps, acc = [], 0
            for i, sz in zip(fwd, sizes):
                acc += sz
                if i in cutset and acc > b:
                    cps.append(i)
                    acc = 0
            if cps and cps not in plans.values():
                plans[f"greedy B={fmt_bytes(b)}"] = cps
    return plans


@register("chen", "Chen et al. 2016: segment checkpointing (sqrt(n) and memory-greedy plans), segments recomputed")
def solve_chen(g: CostedGraph, budget: Budget, opts) -> Schedule:
    """Among Chen's checkpoint plans, the least-energy one that meets the budgets.

    Every plan is a fixed rule (no optimisation), so the status is
    ``heuristic``; when no plan fits, ``infeasible`` with the smallest peak
    and runtime any plan needs.
    """
    nob = Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)
    tried = []
    for name, cps in chen_plans(g).items():
        steps = segment_steps(g, cps)
        t = simulate(g, steps, nob).totals
        tried.append((name, cps, steps, t))
    fits = [x for x in tried if x[3].peak_ram_bytes <= budget.ram_bytes
            and (budget.runtime_s is None or x[3].runtime_s <= budget.runtime_s * (1 + 1e-6))]
    if fits:
        name, cps, steps, t = min(fits, key=lambda x: (x[3].energy_j, x[3].peak_ram_bytes))
    else:
        name, cps, steps, t = min(tried, key=lambda x: (x[3].peak_ram_bytes, x[3].energy_j))
    info = {"checkpoints": cps, "plan": name, "plans_tried": len(tried),
            "message": f"{name}: {len(cps)} checkpoints",
            "min_plan_peak_ram_bytes": min(x[3].peak_ram_bytes for x in tried)}
    s = judged(g, budget, steps, "chen", HEURISTIC, info)
    if not s.steps and budget.runtime_s is not None:
        # the smallest RAM at which some plan also meets the deadline, if any plan does
        meets = [x[3].peak_ram_bytes for x in tried if x[3].runtime_s <= budget.runtime_s * (1 + 1e-6)]
        if meets:
            s.solver["min_ram_bytes"] = min(meets)
            s.solver.pop("min_ram_note", None)
        else:
            fastest = min(x[3].runtime_s for x in tried)
            s.solver.pop("min_ram_bytes", None)
            s.solver["min_ram_note"] = (f"no RAM budget helps: none of chen's {len(tried)} plans meets this "
                                        f"deadline (the fastest needs {fmt_seconds(fastest)}); give --runtime "
                                        f"{fastest * (1 + 1e-6):.6g}s or more")
    return s


from . import capuchin  # noqa: E402,F401  (registers the "capuchin" strategy)
