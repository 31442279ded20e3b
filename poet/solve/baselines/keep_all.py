"""Plain backprop as a schedule, and judging a fixed schedule against the budgets.

:func:`keep_all_steps` computes every node once and frees each output after its last
reader; its peak (:func:`keep_all_peak`) is what a percentage RAM budget is a share of.
:func:`judged` turns any fixed-rule schedule into an honest result: itself when it fits the
budgets, else ``infeasible`` with what it would need.
"""

from __future__ import annotations

from types import MappingProxyType

from ...graph.core import CostedGraph
from ...schedule.core import INFEASIBLE, Budget, Op, Schedule, Step
from ...schedule.report import MinBudgets, SolveReport
from ...schedule.validate import simulate
from ...units import fmt_bytes, fmt_seconds


def keep_all_steps(g: CostedGraph) -> list[Step]:
    """Compute in order; free each output right after its last reader."""
    last_use = [max(r, i) for i, r in enumerate(g.last_reader)]  # an unread output: freed at once
    steps: list[Step] = []
    for k in range(len(g.nodes)):
        steps.append(Step(Op.COMPUTE, k, k))
        for i in (*g.preds[k], k):
            if last_use[i] == k:
                steps.append(Step(Op.FREE, i, k))
    return steps


def keep_all_peak(g: CostedGraph) -> int:
    """RAM peak of plain backprop (fixed bytes included)."""
    return simulate(g, keep_all_steps(g)).totals.peak_ram_bytes


def judged(
    g: CostedGraph, budget: Budget, steps: list[Step], strategy: str, status_if_fits: str, info: dict
) -> Schedule:
    """A fixed schedule against the budgets: itself if it fits, else an honest ``infeasible``."""
    totals = simulate(g, steps, Budget(ram_bytes=10**30, runtime_s=None, paging_time=budget.paging_time)).totals
    problems = []
    if totals.peak_ram_bytes > budget.ram_bytes:
        problems.append(f"needs {fmt_bytes(totals.peak_ram_bytes)} of RAM, budget {fmt_bytes(budget.ram_bytes)}")
    if budget.runtime_s is not None and totals.runtime_s > budget.runtime_s * (1 + 1e-6):
        problems.append(f"needs {fmt_seconds(totals.runtime_s)}, budget {fmt_seconds(budget.runtime_s)}")
    info = dict(info)
    facts = {k: v for k, v in info.items() if k not in ("message", "gap")}
    facts.update(
        strategy_peak_ram_bytes=totals.peak_ram_bytes,
        strategy_runtime_s=totals.runtime_s,
        strategy_energy_j=totals.energy_j,
    )
    report = SolveReport(
        method=strategy, message=info.get("message", ""), gap=info.get("gap"), strategy_facts=MappingProxyType(facts)
    )
    if problems:
        if budget.runtime_s is None or totals.runtime_s <= budget.runtime_s * (1 + 1e-6):
            smallest = MinBudgets(ram_bytes=totals.peak_ram_bytes)
        else:  # its runtime does not depend on the RAM budget: no RAM budget makes it meet this deadline
            smallest = MinBudgets(
                ram_note=(
                    f"no RAM budget makes the {strategy} schedule meet this deadline: it needs "
                    f"{fmt_seconds(totals.runtime_s)} (and {fmt_bytes(totals.peak_ram_bytes)} of RAM); give --runtime "
                    f"{totals.runtime_s * (1 + 1e-6):.6g}s or more"
                )
            )
        report = report.with_(message=f"{strategy} schedule " + "; ".join(problems), min_budgets=smallest)
        return Schedule(graph=g, budget=budget, steps=(), status=INFEASIBLE, strategy=strategy, report=report)
    return Schedule(graph=g, budget=budget, steps=tuple(steps), status=status_if_fits, strategy=strategy, report=report)
