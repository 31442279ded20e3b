"""Energy of a schedule file by step kind: plain compute, recomputes, page-ins, page-outs.

Issue 33's rows on the ``m4`` spend their energy above plain backprop on page traffic; this prints where
it goes (and how often each paged tensor is read back), from a schedule ``poet solve --out`` wrote,
after the validator replays it::

    PYTHONPATH=. python bench/energy_by_kind.py s.json [more.json ...]
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

from poet.schedule import load_schedule, validate
from poet.schedule.core import Op


def by_kind(path: str) -> str:
    s = load_schedule(path)
    g, nodes = s.graph, s.graph.nodes
    totals = validate(g, s.steps, s.budget)  # the validator's replay: raises on an invalid schedule
    ops: Counter = Counter()
    energy: dict[str, list[float]] = {op.value: [] for op in Op}
    seen: set[int] = set()
    outs_of: Counter = Counter()
    ins_of: Counter = Counter()
    for st in s.steps:
        nd = nodes[st.node]
        if st.op == Op.COMPUTE:
            kind = "recompute" if st.node in seen else "compute"
            seen.add(st.node)
            ops[kind] += 1
            energy.setdefault(kind, []).append(nd.compute_energy_j)
        elif st.op == Op.PAGE_IN:
            ops["page_in"] += 1
            ins_of[st.node] += 1
            energy["page_in"].append(nd.pagein_energy_j)
        elif st.op == Op.PAGE_OUT:
            ops["page_out"] += 1
            outs_of[st.node] += 1
            energy["page_out"].append(nd.pageout_energy_j)
    rows = [f"{path}: {totals.energy_j:.4f} J ({s.report.method}, gap {s.report.gap}), {len(nodes):,} nodes"]
    for kind in ("compute", "recompute", "page_in", "page_out"):
        rows.append(f"  {kind:9s} {math.fsum(energy.get(kind, [])):10.4f} J over {ops[kind]:,} steps")
    if outs_of:
        rows.append(f"  page-ins per paged-out tensor: {sum(ins_of.values()) / len(outs_of):.2f}")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    for f in ap.parse_args().files:
        print(by_kind(f))


if __name__ == "__main__":
    main()
