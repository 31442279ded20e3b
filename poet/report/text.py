"""Plain-text report of one schedule: what it costs, against plain backprop, and how sure we are."""
from __future__ import annotations

from ..schedule.core import FEASIBLE, HEURISTIC, INFEASIBLE, NO_SOLUTION, OPTIMAL, Schedule
from ..units import fmt_bytes, fmt_energy, fmt_seconds


def cache_note(solver: dict) -> str:
    """Where a schedule answered from the solve cache came from ("" for a fresh solve)."""
    cached = solver.get("cache")
    if not cached or not isinstance(cached, dict):
        return ""
    took = cached.get("solve_seconds")
    took = took if isinstance(took, (int, float)) and not isinstance(took, bool) else None
    return ("from the cache (solved" + (f" in {took:.1f} s" if took is not None else "")
            + (f" on {str(cached['solved_at'])[:40]}" if cached.get("solved_at") else "") + "; --no-cache, or cache=False from Python, solves again)")


def _bound_note(sv: dict) -> str:
    """Where a schedule read from a file got its bound (see poet.schedule.io.checked_claims)."""
    if sv.get("bound_checked") is False:
        return " (claimed by the file, not re-checked)"
    return ""


def _claims_note(sv: dict) -> str:
    """What a file claimed that its replay did not support."""
    notes = []
    if sv.get("claimed_status"):
        notes.append(f"the file said {sv['claimed_status']}")
    if isinstance(sv.get("claimed_gap"), float) and sv.get("claimed_status") == OPTIMAL:
        notes.append(f"with gap {sv['claimed_gap']:.2e}")
    if sv.get("claimed_bound_energy_j") is not None:
        notes.append(f"its lower bound {sv['claimed_bound_energy_j']:.6g} J is above the replayed energy")
    return f"; NOT as claimed: {' '.join(notes)}, which the replay does not support" if notes else ""


def status_line(s: Schedule) -> str:
    sv = s.solver
    how = []
    if sv.get("method"):
        how.append(f"method {sv['method']}")
    if sv.get("stopped_early"):
        how.append("stopped early on request")
    if sv.get("cache"):
        how.append(cache_note(sv))
    elif sv.get("solve_seconds") is not None:
        how.append(f"{sv['solve_seconds']:.1f} s")
    if isinstance(sv.get("variables"), int) and isinstance(sv.get("constraints"), int):
        how.append(f"{sv['variables']:,} variables, {sv['constraints']:,} constraints")
    tail = f" [{'; '.join(how)}]" if how else ""
    if s.status == OPTIMAL:
        gap = sv.get("gap")
        bound = sv.get("bound_energy_j")
        extra = ""
        if gap is not None:
            extra = f", {'proven ' if sv.get('bound_checked') is not False else ''}relative gap {gap:.2e}"
        if bound is not None:
            extra += f", lower bound {fmt_energy(bound)}{_bound_note(sv)}"
        return f"optimal{extra}{tail}{_claims_note(sv)}"
    if s.status == FEASIBLE:
        gap = sv.get("gap")
        g = f"{gap:.2%}" if isinstance(gap, (int, float)) else "unknown"
        detail = f"; {sv['status_detail']}" if sv.get("status_detail") else ""
        return f"feasible, NOT proven optimal (gap {g}{_bound_note(sv)}{detail}){tail}{_claims_note(sv)}"
    if s.status == HEURISTIC:
        return f"heuristic schedule (no optimality claim){tail}"
    if s.status == INFEASIBLE:
        return f"infeasible{tail}"
    if s.status == NO_SOLUTION:
        return f"no schedule found before the solver stopped{tail}"
    return s.status


def infeasibility_text(s: Schedule) -> str:
    sv = s.solver
    lines = [f"No {s.strategy} schedule fits: {sv.get('message', 'budgets cannot be met')}."]
    if "min_ram_bytes" in sv:
        note = sv.get("min_ram_note", "")
        lines.append(f"  Smallest feasible RAM budget{' at this deadline' if s.budget.runtime_s else ''}: "
                     f"{fmt_bytes(sv['min_ram_bytes'])} ({sv['min_ram_bytes']} B){f' - {note}' if note else ''}")
    elif "min_ram_bytes_lower_bound" in sv:
        lines.append(f"  Any schedule needs at least {fmt_bytes(sv['min_ram_bytes_lower_bound'])} "
                     f"({sv['min_ram_bytes_lower_bound']} B); try --memory {sv['min_ram_bytes_lower_bound']} or more.")
    elif sv.get("min_ram_note"):
        lines.append(f"  {sv['min_ram_note']}")
    if "min_runtime_s" in sv:
        plain = s.graph.plain_runtime_s
        x = f" ({sv['min_runtime_s'] / plain:.3g}x plain)" if plain else ""
        lines.append(f"  Shortest feasible deadline at this RAM budget: {fmt_seconds(sv['min_runtime_s'])}{x}"
                     f" - {sv.get('min_runtime_note', '')}")
    elif "min_runtime_s_lower_bound" in sv:
        t = sv["min_runtime_s_lower_bound"]
        plain = s.graph.plain_runtime_s
        x = f" ({t / plain:.4g}x plain)" if plain else ""
        lines.append(f"  Any schedule within this RAM budget needs at least {fmt_seconds(t)}{x} (a proven bound, "
                     f"not necessarily reachable); try a longer --runtime or more --memory.")
    elif sv.get("min_runtime_note"):
        lines.append(f"  {sv['min_runtime_note']}")
    return "\n".join(lines)


def summary_text(s: Schedule) -> str:
    g, b = s.graph, s.budget
    plain_rt = g.plain_runtime_s
    rt = "none" if b.runtime_s is None else (
        f"{fmt_seconds(b.runtime_s)}" + (f" ({b.runtime_s / plain_rt:.3g}x plain)" if plain_rt else ""))
    head = [
        f"POET {s.strategy} schedule for {g.name}"
        + (f" on {g.meta['device']}" if g.meta.get("device") else "") + f" ({len(g)} nodes)",
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
        ("  paging time", fmt_seconds(t.paging_time_s) + ("" if b.paging_time == "serial" else f" ({b.paging_time})"),
         fmt_seconds(0.0)),
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
    foot = [f"Energy overhead over plain backprop: {over:+.2%}. "
            f"Validated: an independent replay of all {len(s.steps)} steps stays within both budgets."]
    return "\n".join(head + table + foot)
