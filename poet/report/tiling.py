"""Plain-text lines on tiling: what was split, the minimum RAM with and without, what it cost, what counts."""

from __future__ import annotations

from ..graph.tiling_plan import split_items
from ..schedule.core import Schedule
from ..solve.tiled import TiledProblem, TilingCosts
from ..units import fmt_bytes, fmt_energy, fmt_seconds

SHOW_LAYERS = 6


def _pct(x: float, of: float) -> str:
    return f"{100 * x / of:+.1f}%" if of else "n/a"


def tiling_text(p: TiledProblem, s: Schedule, costs: TilingCosts | None) -> str:
    """What tiling did for this solve, or "" when the source cannot be tiled and needed nothing."""
    plan = p.plan
    lines: list[str] = []
    if plan is not None:
        if plan.tiled:
            items = sorted(split_items(plan.counts), key=lambda i: -i[1])  # "conv1 x32x2ch": 2 channel groups
            shown = ", ".join(f"{k} {text}" for k, _, text in items[:SHOW_LAYERS])
            more = f" and {len(items) - SHOW_LAYERS} more" if len(items) > SHOW_LAYERS else ""
            goal = (
                f"to fit {fmt_bytes(plan.budget_bytes)}"
                if plan.fits
                else f"as far as the planner went toward {fmt_bytes(plan.budget_bytes)}"
            )
            lines.append(f"Tiling (--tile {plan.mode}): {len(items)} layers split {goal}: {shown}{more}")
            lines.append(
                f"  minimum RAM of any schedule: untiled {fmt_bytes(plan.untiled_min_bytes)} "
                f"({plan.untiled_min_bytes} B), tiled {fmt_bytes(plan.tiled_min_bytes)} "
                f"({plan.tiled_min_bytes} B); nodes {plan.nodes_before} -> {plan.nodes_after}"
            )
            tried = (s.report.tiling or {}).get("headroom") or ()
            if tried:
                each = ", ".join(
                    f"{fmt_bytes(t['planned_ram_bytes'])}: "
                    + (fmt_energy(t["energy_j"]) if t["energy_j"] is not None else "no schedule in its time")
                    for t in tried
                )
                planned = (s.report.tiling or {}).get("planned_ram_bytes", plan.budget_bytes)
                lines.append(
                    f"  tiles planned for {fmt_bytes(planned)} of the {fmt_bytes(s.budget.ram_bytes)} budget: the "
                    f"cheapest of the tiling for the budget and those for less ({each}), each solved at the "
                    f"whole budget (headroom, docs/tiling.md)"
                )
            if not plan.fits:
                lines.append(
                    f"  the budget is below the tiled minimum, set by {plan.limit}; give --memory "
                    f"{plan.tiled_min_bytes} or more"
                )
        elif plan.mode == "off" and plan.budget_bytes < plan.untiled_min_bytes:
            lines.append(
                f"Tiling is off (--tile off): the untiled minimum is {fmt_bytes(plan.untiled_min_bytes)} "
                f"({plan.untiled_min_bytes} B); --tile auto splits layers to go below it"
            )
        elif plan.budget_bytes < plan.untiled_min_bytes:
            lines.append(f"Tiling cannot help: {plan.limit}")
    elif p.graph.min_ram_bytes() > s.budget.ram_bytes:
        lines.append("Tiling needs a built-in model (--model): a graph file has no layer shapes to split")
    if costs is not None and plan is not None and plan.tiled:
        c = costs
        lines.append(
            f"  cost against plain untiled backprop ({fmt_energy(c.plain_energy_j)}, "
            f"{fmt_seconds(c.plain_runtime_s)}): compute {fmt_energy(c.extra_compute_energy_j)} "
            f"({_pct(c.extra_compute_energy_j, c.plain_energy_j)}: the tiled graph's own extra work -- statistics "
            f"passes, partial sums, attention's and fused GELU's recomputation -- {c.graph_extra_flops:.4g} FLOP, "
            f"plus the schedule's recomputes), paging {fmt_energy(c.paging_energy_j)} "
            f"and {fmt_seconds(c.paging_time_s)} over {c.page_ops} page operations, of which "
            f"per-operation latency {fmt_energy(c.latency_energy_j)} and {fmt_seconds(c.latency_time_s)}"
        )
    lines += accounting_lines(p, s)
    return "\n".join(lines)


def accounting_lines(p: TiledProblem, s: Schedule) -> list[str]:
    """Say what the RAM figure counts; plainly, when the weights could never fit the budget."""
    params = int(p.untiled.meta.get("param_bytes") or 0)
    fixed = p.graph.fixed_ram_bytes
    budget = s.budget.ram_bytes
    if not params:
        return []
    w = p.graph.weights
    if w is not None and w.placement != "flash":
        what = "the parameters" if w.placement == "ram" else "the staging buffer of the streamed weights"
        return [f"RAM counts {fmt_bytes(fixed)} held all iteration ({what}) plus activations"]
    if fixed == 0:
        line = (
            f"RAM counts activations only (the paper's setting): the {fmt_bytes(params)} of parameters stay "
            f"in flash, uncounted; --fixed-ram params|sgd|adam counts them"
        )
        if params > budget > 0:
            line += f" (the parameters alone are {params / budget:.0f}x this budget)"
        elif params > budget:
            line += " (the budget is 0 B: no parameter fits it)"
        return [line]
    line = f"RAM counts {fmt_bytes(fixed)} held all iteration (parameters and optimizer state) plus activations"
    if fixed >= budget:
        line += (
            f"; that alone exceeds the {fmt_bytes(budget)} budget: the weights do not fit this device "
            f"unless they are streamed from flash too, which these schedules do not model"
        )
    return [line]
