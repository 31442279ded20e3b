"""Exhaustive search over instruction sequences: the test oracle for the MILPs.

Knows nothing of stages or matrices: it explores every sequence of compute /
page_out / page_in / free from the empty state and returns the least energy of
any sequence that computes every node, never exceeds the RAM budget and meets
the deadline.  Dijkstra on energy, with (energy, runtime) Pareto labels per state.
"""

from __future__ import annotations

import heapq
import itertools

from poet.graph.core import CostedGraph


def brute_force_energy(
    g: CostedGraph,
    ram_bytes: int,
    runtime_s: float | None = None,
    *,
    paging: bool = True,
    remat: bool = True,
    count_paging_time: bool = True,
    pageable=None,
) -> float | None:
    """``pageable``: the nodes whose outputs may be paged (default: every node)."""
    n = len(g.nodes)
    full = (1 << n) - 1
    ram = g.ram
    preds = [sum(1 << p for p in g.preds[v]) for v in range(n)]
    nd = g.nodes
    tie = itertools.count()
    start = (0, 0, 0)  # resident, stored, computed (bitmasks)
    heap = [(0.0, 0.0, next(tie), start)]
    labels: dict[tuple, list[tuple[float, float]]] = {start: [(0.0, 0.0)]}
    limit = float("inf") if runtime_s is None else runtime_s * (1 + 1e-9)
    may_page = [paging and (pageable is None or v in pageable) for v in range(n)]

    def used(res):
        return g.fixed_ram_bytes + sum(ram[v] for v in range(n) if res >> v & 1)

    def push(state, e, r):
        if r > limit:
            return
        lab = labels.setdefault(state, [])
        if any(e2 <= e + 1e-15 and r2 <= r + 1e-15 for e2, r2 in lab):
            return
        lab[:] = [(e2, r2) for e2, r2 in lab if not (e <= e2 and r <= r2)] + [(e, r)]
        heapq.heappush(heap, (e, r, next(tie), state))

    while heap:
        e, r, _, state = heapq.heappop(heap)
        res, sto, comp = state
        if (e, r) not in labels.get(state, []):
            continue
        if comp == full:
            return e
        mem = used(res)
        for v in range(n):
            bit = 1 << v
            if res & bit:
                push((res & ~bit, sto, comp), e, r)  # free
                if may_page[v] and not sto & bit:
                    t = nd[v].pageout_time_s if count_paging_time else 0.0
                    push((res, sto | bit, comp), e + nd[v].pageout_energy_j, r + t)
            else:
                if mem + ram[v] > ram_bytes:
                    continue
                if preds[v] & res == preds[v] and (remat or not comp & bit):
                    push((res | bit, sto, comp | bit), e + nd[v].compute_energy_j, r + nd[v].compute_time_s)
                if may_page[v] and sto & bit:
                    t = nd[v].pagein_time_s if count_paging_time else 0.0
                    push((res | bit, sto, comp), e + nd[v].pagein_energy_j, r + t)
    return None
