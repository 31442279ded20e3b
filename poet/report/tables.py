"""Markdown and CSV tables of schedules and sweeps."""

from __future__ import annotations

import csv
import io
import math

from ..schedule.core import Op
from ..units import fmt_bytes, fmt_energy, fmt_seconds

STRATEGY_ORDER = ("poet", "remat", "paging", "capuchin", "chen", "keep-all")


def _num(x):
    return None if x in (None, "") else float(x)


def _strategies(rows):
    seen = {r["strategy"] for r in rows}
    return [s for s in STRATEGY_ORDER if s in seen] + sorted(seen - set(STRATEGY_ORDER))


def _cell(r: dict | None, plain: float) -> str:
    if r is None:
        return "not run"
    e = _num(r.get("energy_j"))
    st = r.get("status", "")
    if e is None:
        return {"infeasible": "infeas.", "no_solution": "timeout", "error": "error"}.get(st, st)
    mark = {"optimal": "", "feasible": "*", "heuristic": "", "error": "!"}.get(st, "?")
    ov = (e / plain - 1.0) * 100.0
    return ("0" if abs(ov) < 5e-7 else f"+{ov:.2g}%") + mark


def sweep_markdown(doc: dict) -> str:
    """One table per runtime budget: rows RAM budgets, columns strategies, energy / plain pass."""
    rows = doc["points"]
    c = doc["context"]
    ident = doc["identity"]
    plain = c["plain_energy_j"]
    lines = [
        f"# Sweep: {ident['model']} on {ident['device']} (paging time: {ident['paging_time']})",
        "",
        f"Plain forward+backward: {fmt_energy(plain)}, {fmt_seconds(c['plain_runtime_s'])}; "
        f"keep-all peak {fmt_bytes(c['keep_all_peak_bytes'])}; no schedule fits below "
        f"{fmt_bytes(c['min_ram_bytes'])}.",
        "",
        "Cells: energy above one plain pass, in percent of it (0 = nothing recomputed or paged); "
        "`*` feasible but not proven optimal, `infeas.` no schedule of that strategy fits, "
        "`timeout` the solver found none within the time limit.",
        "",
    ]
    if any(r.get("tiled_nodes") for r in rows):
        lines += [
            f"Budgets marked *tiled* were solved on a tiled graph (--tile {ident.get('tile', 'auto')}, "
            f"docs/tiling.md); the node count is the tiled graph's ({c['nodes']} untiled).",
            "",
        ]
    strategies = _strategies(rows)
    runtimes = list(dict.fromkeys(r["runtime"] for r in rows))
    by = {(r["strategy"], r["memory"], r["runtime"]): r for r in rows}
    for rt in runtimes:
        mems = sorted({(int(r["ram_budget_bytes"]), r["memory"]) for r in rows if r["runtime"] == rt})
        lines.append(f"## Deadline {rt}")
        lines.append("")
        lines.append("| RAM budget | " + " | ".join(strategies) + " | POET saving vs best single |")
        lines.append("|---|" + "---|" * len(strategies) + "---|")
        for ram, mem in mems:
            cells = [_cell(by.get((s, mem, rt)), plain) for s in strategies]
            sav = saving(by, mem, rt)
            here = [r for r in rows if r["memory"] == mem and r["runtime"] == rt]
            nodes = {r["tiled_nodes"] for r in here if r.get("tiled_nodes")}
            tiled = f"; tiled, {'/'.join(str(n) for n in sorted(nodes))} nodes" if nodes else ""
            lines.append(f"| {mem} ({fmt_bytes(ram)}{tiled}) | " + " | ".join(cells) + f" | {sav} |")
        lines.append("")
    return "\n".join(lines)


def saving(by: dict, mem: str, rt: str) -> str:
    p = by.get(("poet", mem, rt))
    singles = [by.get((s, mem, rt)) for s in ("remat", "paging")]
    singles = [_num(r.get("energy_j")) for r in singles if r is not None and _num(r.get("energy_j")) is not None]
    pe = _num(p.get("energy_j")) if p else None
    if pe is None:
        return ""
    if not singles:
        return "only POET fits" if p and any(by.get((s, mem, rt)) for s in ("remat", "paging")) else ""
    best = min(singles)
    return f"{(best - pe) / best:.1%}"


def schedule_markdown(s, source: str = "") -> str:
    from .text import status_line

    g = s.graph
    b = s.budget
    lines = [
        f"# Schedule report{': ' + source if source else ''}",
        "",
        f"* graph: {g.name} ({len(g.nodes)} nodes)" + (f", device {g.meta['device']}" if g.meta.get("device") else ""),
        f"* strategy: {s.strategy}; status: {status_line(s)}",
        f"* budget: RAM {fmt_bytes(b.ram_bytes)} ({b.ram_bytes} B), deadline "
        f"{fmt_seconds(b.runtime_s) if b.runtime_s else 'none'}, paging time {b.paging_time}",
        "",
    ]
    if not s.steps or s.totals is None:
        lines.append(f"No schedule: {s.report.message}")
        return "\n".join(lines) + "\n"
    t = s.totals
    plain_e, plain_t = g.plain_energy_j, g.plain_runtime_s
    lines += [
        "| quantity | value | vs plain pass |",
        "|---|---|---|",
        f"| energy | {fmt_energy(t.energy_j)} | {t.energy_j / plain_e:.4f}x |"
        if plain_e
        else f"| energy | {fmt_energy(t.energy_j)} | |",
        f"| compute energy | {fmt_energy(t.compute_energy_j)} | |",
        f"| paging energy | {fmt_energy(t.paging_energy_j)} | |",
        f"| runtime | {fmt_seconds(t.runtime_s)} | {t.runtime_s / plain_t:.4f}x |"
        if plain_t
        else f"| runtime | {fmt_seconds(t.runtime_s)} | |",
        f"| peak RAM | {fmt_bytes(t.peak_ram_bytes)} ({t.peak_ram_bytes} B) | "
        f"{t.peak_ram_bytes / b.ram_bytes:.1%} of budget |",
        f"| computes (recomputes) | {t.computes} ({t.recomputes}) | |",
        f"| page-outs / page-ins | {t.page_outs} / {t.page_ins} | "
        f"{fmt_bytes(t.bytes_paged_out)} out, {fmt_bytes(t.bytes_paged_in)} in |",
        f"| steps | {len(s.steps)} | |",
        "",
    ]
    busy = [r for r in node_rows(s) if r["recomputes"] or r["page_outs"] or r["page_ins"]]
    if busy:
        lines += [
            "## Nodes recomputed or paged",
            "",
            "| id | name | kind | bytes | recomputes | page-outs | page-ins |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in busy:
            lines.append(
                f"| {r['id']} | {r['name']} | {r['kind']} | {fmt_bytes(r['ram_bytes'])} | "
                f"{r['recomputes']} | {r['page_outs']} | {r['page_ins']} |"
            )
        lines.append("")
    return "\n".join(lines)


def node_rows(s) -> list[dict]:
    g = s.graph
    n = len(g.nodes)
    comp, pin, pout = [0] * n, [0] * n, [0] * n
    for st in s.steps:
        if st.op == Op.COMPUTE:
            comp[st.node] += 1
        elif st.op == Op.PAGE_IN:
            pin[st.node] += 1
        elif st.op == Op.PAGE_OUT:
            pout[st.node] += 1
    return [
        {
            "id": i,
            "name": nd.name,
            "kind": nd.kind,
            "ram_bytes": nd.ram_bytes,
            "computes": comp[i],
            "recomputes": max(0, comp[i] - 1),
            "page_outs": pout[i],
            "page_ins": pin[i],
            "compute_energy_j": nd.compute_energy_j * comp[i],
            "paging_energy_j": nd.pagein_energy_j * pin[i] + nd.pageout_energy_j * pout[i],
        }
        for i, nd in enumerate(g.nodes)
    ]


def nodes_csv(s) -> str:
    rows = node_rows(s)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["id"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def fmt_ratio(x: float) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.4f}"
