"""Plain-text report of one schedule: what it costs, against plain backprop, and how sure we are."""

from __future__ import annotations

from ..schedule.core import FEASIBLE, HEURISTIC, INFEASIBLE, NO_SOLUTION, OPTIMAL, Schedule
from ..schedule.report import SolveReport
from ..units import fmt_bytes, fmt_energy, fmt_seconds


def cache_note(report: SolveReport) -> str:
    """Where a schedule answered from the solve cache came from ("" for a fresh solve)."""
    cached = report.cache
    if cached is None:
        return ""
    took = cached.solve_seconds
    return (
        "from the cache (solved"
        + (f" in {took:.1f} s" if took is not None else "")
        + (f" on {cached.solved_at[:40]}" if cached.solved_at else "")
        + "; --no-cache, or cache=False from Python, solves again)"
    )


def _bound_note(r: SolveReport) -> str:
    """Where a schedule read from a file got its bound (see poet.schedule.io.checked_claims)."""
    return "" if r.bound_checked else " (claimed by the file, not re-checked)"


def _claims_note(r: SolveReport) -> str:
    """What a file claimed that its replay did not support."""
    notes = []
    if r.claimed_status:
        notes.append(f"the file said {r.claimed_status}")
    if r.claimed_gap is not None and r.claimed_status == OPTIMAL:
        notes.append(f"with gap {r.claimed_gap:.2e}")
    if r.claimed_bound_energy_j is not None:
        notes.append(f"its lower bound {r.claimed_bound_energy_j:.6g} J is above the replayed energy")
    return f"; NOT as claimed: {' '.join(notes)}, which the replay does not support" if notes else ""


def status_line(s: Schedule) -> str:
    r = s.report
    how = []
    if r.method:
        how.append(f"method {r.method}")
    if r.stopped_early:
        how.append("stopped early on request")
    if r.cache is not None:
        how.append(cache_note(r))
    elif r.solve_seconds:
        how.append(f"{r.solve_seconds:.1f} s")
    if r.milp is not None:
        how.append(f"{r.milp.variables:,} variables, {r.milp.constraints:,} constraints")
    tail = f" [{'; '.join(how)}]" if how else ""
    if s.status == OPTIMAL:
        extra = ""
        if r.gap is not None:
            extra = f", {'proven ' if r.bound_checked else ''}relative gap {r.gap:.2e}"
        if r.bound_energy_j is not None:
            extra += f", lower bound {fmt_energy(r.bound_energy_j)}{_bound_note(r)}"
        return f"optimal{extra}{tail}{_claims_note(r)}"
    if s.status == FEASIBLE:
        g = f"{r.gap:.2%}" if r.gap is not None else "unknown"
        detail = f"; {r.status_detail}" if r.status_detail else ""
        return f"feasible, NOT proven optimal (gap {g}{_bound_note(r)}{detail}){tail}{_claims_note(r)}"
    if s.status == HEURISTIC:
        return f"heuristic schedule (no optimality claim){tail}"
    if s.status == INFEASIBLE:
        return f"infeasible{tail}"
    if s.status == NO_SOLUTION:
        return f"no schedule found before the solver stopped{tail}"
    return s.status


def infeasibility_text(s: Schedule) -> str:
    r, mb = s.report, s.report.min_budgets
    lines = [f"No {s.strategy} schedule fits: {r.message or 'budgets cannot be met'}."]
    if mb.ram_bytes is not None:
        note = mb.ram_note or ""
        lines.append(
            f"  Smallest feasible RAM budget{' at this deadline' if s.budget.runtime_s else ''}: "
            f"{fmt_bytes(mb.ram_bytes)} ({mb.ram_bytes} B){f' - {note}' if note else ''}"
        )
    elif mb.ram_bytes_lower_bound is not None:
        lines.append(
            f"  Any schedule needs at least {fmt_bytes(mb.ram_bytes_lower_bound)} "
            f"({mb.ram_bytes_lower_bound} B); try --memory {mb.ram_bytes_lower_bound} or more."
        )
    elif mb.ram_note:
        lines.append(f"  {mb.ram_note}")
    if mb.runtime_s is not None:
        plain = s.graph.plain_runtime_s
        x = f" ({mb.runtime_s / plain:.3g}x plain)" if plain else ""
        lines.append(
            f"  Shortest feasible deadline at this RAM budget: {fmt_seconds(mb.runtime_s)}{x} - {mb.runtime_note or ''}"
        )
    elif mb.runtime_s_lower_bound is not None:
        t = mb.runtime_s_lower_bound
        plain = s.graph.plain_runtime_s
        x = f" ({t / plain:.4g}x plain)" if plain else ""
        lines.append(
            f"  Any schedule within this RAM budget needs at least {fmt_seconds(t)}{x} (a proven bound, "
            f"not necessarily reachable); try a longer --runtime or more --memory."
        )
    elif mb.runtime_note:
        lines.append(f"  {mb.runtime_note}")
    return "\n".join(lines)


def weights_lines(s: Schedule) -> list[str]:
    """Where the parameters live and what that costs this schedule (``--weights``)."""
    g, t = s.graph, s.totals
    w = g.weights
    params = int(w.param_bytes if w is not None else g.meta.get("param_bytes") or 0)
    if not params:
        return []
    if w is None or w.placement == "flash":
        return [
            f"Weights: flash (the paper's setting): {fmt_bytes(params)} of parameters read from flash, not "
            f"counted in RAM, energy or time; the device's flash must hold them (--weights ram|stream counts them)"
        ]
    if w.placement == "ram":
        return [f"Weights: ram: the {fmt_bytes(params)} of parameters are held in the RAM budget (fixed RAM)"]
    share = t.weight_energy_j / t.energy_j if t.energy_j else 0.0
    return [
        f"Weights: stream: {fmt_bytes(params)} of parameters and {fmt_bytes(params)} of gradients in storage "
        f"({fmt_bytes(2 * params)}), a {fmt_bytes(w.staging_bytes)} staging buffer in RAM (fixed RAM). "
        f"Weight traffic {fmt_energy(t.weight_energy_j)} ({share:.1%} of the energy), {fmt_seconds(t.weight_time_s)}: "
        f"read {fmt_bytes(t.weight_read_bytes)} in {t.weight_reads:,} transfers, wrote "
        f"{fmt_bytes(t.weight_write_bytes)} in {t.weight_writes:,} (every use reads its weights, no reuse "
        f"across tiles; the SGD update included)."
    ]


def summary_text(s: Schedule) -> str:
    g, b = s.graph, s.budget
    plain_rt = g.plain_runtime_s
    rt = (
        "none"
        if b.runtime_s is None
        else (f"{fmt_seconds(b.runtime_s)}" + (f" ({b.runtime_s / plain_rt:.3g}x plain)" if plain_rt else ""))
    )
    head = [
        f"POET {s.strategy} schedule for {g.name}"
        + (f" on {g.meta['device']}" if g.meta.get("device") else "")
        + f" ({len(g)} nodes)",
        f"Budgets: RAM {fmt_bytes(b.ram_bytes)} ({b.ram_bytes} B, fixed {fmt_bytes(g.fixed_ram_bytes)}), "
        f"runtime {rt}, paging time {b.paging_time}",
        f"Status:  {status_line(s)}",
    ]
    if not s.feasible:
        return "\n".join(head + [infeasibility_text(s)])
    t = s.totals
    from ..solve.baselines import keep_all_peak

    rows = [
        ("energy", fmt_energy(t.energy_j), fmt_energy(g.plain_energy_j)),
        ("  compute", fmt_energy(t.compute_energy_j), fmt_energy(g.plain_energy_j)),
        ("  paging", fmt_energy(t.paging_energy_j), fmt_energy(0.0)),
        ("runtime", fmt_seconds(t.runtime_s), fmt_seconds(plain_rt)),
        ("  compute time", fmt_seconds(t.compute_time_s), fmt_seconds(plain_rt)),
    ]
    if g.weights is not None and g.weights.streamed:  # the weight traffic is inside compute: split it out
        pw_j, pw_s = g.plain_weight_traffic
        rows = [
            rows[0],
            ("  compute (arithmetic)", fmt_energy(t.arithmetic_energy_j), fmt_energy(g.plain_energy_j - pw_j)),
            ("  weight traffic", fmt_energy(t.weight_energy_j), fmt_energy(pw_j)),
            rows[2],
            rows[3],
            ("  compute time (arithmetic)", fmt_seconds(t.arithmetic_time_s), fmt_seconds(plain_rt - pw_s)),
            ("  weight traffic time", fmt_seconds(t.weight_time_s), fmt_seconds(pw_s)),
        ]
    rows += [
        (
            "  paging time",
            fmt_seconds(t.paging_time_s) + ("" if b.paging_time == "serial" else f" ({b.paging_time})"),
            fmt_seconds(0.0),
        ),
        ("peak RAM", fmt_bytes(t.peak_ram_bytes), fmt_bytes(keep_all_peak(g))),
        ("recomputes", f"{t.recomputes}", "0"),
        ("page-ins / page-outs", f"{t.page_ins} / {t.page_outs}", "0 / 0"),
        ("bytes paged in / out", f"{fmt_bytes(t.bytes_paged_in)} / {fmt_bytes(t.bytes_paged_out)}", "0 / 0"),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows + [("", "schedule", "")])
    table = [f"  {'':<{w0}}  {'schedule':>{w1}}  {'plain backprop':>14}"]
    table += [f"  {a:<{w0}}  {b_:>{w1}}  {c:>14}" for a, b_, c in rows]
    over = (t.energy_j / g.plain_energy_j - 1) if g.plain_energy_j else 0.0
    foot = weights_lines(s) + [
        f"Energy overhead over plain backprop: {over:+.2%}. "
        f"Validated: an independent replay of all {len(s.steps)} steps stays within both budgets."
    ]
    return "\n".join(head + table + foot)
