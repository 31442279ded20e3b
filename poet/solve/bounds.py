"""The eviction cover: an exact lower bound on the energy (or runtime) of any schedule, and its guide.

It is not a heuristic: a small covering ILP, solved by HiGHS, whose proven dual bound is a valid
lower bound on every schedule in the MILP's stage form (tested never to exceed the MILP's
optimum).  The evictions that attain it are the guide that the greedy rules follow first.  The
pipeline (:mod:`poet.solve.pipeline`) runs it before anything else: a schedule within the gap of
this bound is returned as proven without the MILP.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, bisect_right

import numpy as np

from ..graph.core import CostedGraph
from ..schedule.core import PAGING_SERIAL, Budget
from .lp.highs import solve_highs
from .lp.problem import MilpProblem
from .stage.plan import ram_cap


def lower_bound_energy(
    g: CostedGraph, budget: Budget | None = None, *, remat: bool = True, paging: bool = True, time_limit: float = 10.0
) -> float:
    """A valid lower bound on the energy of any schedule in the MILP's stage form (see `eviction_cover`)."""
    return eviction_cover(g, budget, remat=remat, paging=paging, time_limit=time_limit)[0]


# Chain links the cover follows from a recomputed tensor when following them all would exceed
# COVER_MAX_LINKS in all (the greedy's recomputations go 8 deep).  A backward pass's gradient
# chains run hundreds deep (560 links on 40 blocks): on 4,818 nodes they made 944k of the ILP's
# columns, 45k at depth 8.  Stopping a chain drops constraints, so the bound stays valid; it was
# the same at depth 8 on every zoo and aten case measured, but the optimal eviction set it
# returns, the guide, can differ, and the rules' plans with it (aten 40 blocks on m4: 1.1385 of
# plain against 1.1157), so chains are cut only where they are that many.
COVER_CHAIN_DEPTH = 8
COVER_MAX_LINKS = 100_000
# The cover stops within this much of the plain energy (or runtime) of optimal: its dual bound
# is still what is used, and proving the last 1e-5 took most of its time (HiGHS had the bound of
# the 4,818-node a72 case at its root, then branched for minutes).
COVER_ABS_GAP = 1e-5
# HiGHS does not check its time limit through presolve and the root LP: on a 3,000-node chain's cover
# (796,576 nonzeros) a 10-s limit stopped after 12.3 s, on a 1,000-node layered DAG's (270,297) after
# 10.5 s, both with no bound above the plain energy (and a 9.3-s one after 15 s on a loaded machine).  A
# cover whose setup would take over half of its time limit by this rate (the MILP's,
# SolvePolicy.milp_setup_s_per_nonzero) is not solved: the plain energy (runtime) is its bound.
COVER_SETUP_S_PER_NONZERO = 2.5e-5
# Building the ILP here takes about this long per nonzero on an idle machine (1.7e-6 measured: 4.0
# million nonzeros in 6.9 s on the tiled resnet18_cifar/m0); slower means a loaded machine, where
# HiGHS's setup is slower too, and the setup estimate above is scaled by as much.
COVER_BUILD_S_PER_NONZERO = 2e-6


def eviction_cover(
    g: CostedGraph,
    budget: Budget | None = None,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float = 10.0,
    objective: str = "energy",
    abs_gap: float = COVER_ABS_GAP,
    info: dict | None = None,
    chain_depth: int = COVER_CHAIN_DEPTH,
    max_links: int = COVER_MAX_LINKS,
    stop=None,
) -> tuple[float, dict[int, str]]:
    """A valid lower bound on the energy of any schedule in the MILP's stage form, and the
    evictions that attain it (tensor -> ``"page"`` or ``"remat"``), a guide for the greedy.

    Every node is computed at least once (the plain energy).  Take the moment node
    t is first computed: its inputs and output are in RAM, and every older tensor
    that a node after t reads is in RAM too or absent, to be restored in a later
    stage -- paged in (after one page-out) or recomputed.  The least restoration
    cost over eviction sets that make every such moment fit is a bound.

    Recomputation cascades are priced.  Restoring tensor i by recomputation needs
    its inputs.  An input p whose last reader is i (a BatchNorm output feeding a
    ReLU) is past its use by then: it comes back too (paged in or recomputed, and
    then its own such inputs, recursively; where the chains are very many, up to
    ``chain_depth`` links deep), or it stayed in RAM since before i was
    first computed -- and then it, or a later link of the chain, sits in RAM at
    every moment i is absent, cancelling (up to) i's bytes there.  Each restoring
    event is charged once: the chain's events for i happen after i's first
    computation and before i's last restoration, so chains of different tensors
    never share one.  A runtime budget caps the extra compute (and, with serial
    paging time, the paging) time.

    It is a small covering ILP (binaries per tensor and per chain link, one row per
    moment); its proven dual bound is used, so a time limit keeps it valid.  It stops once
    within ``abs_gap`` of the plain energy (or runtime) of optimal.  When HiGHS could not even set it
    up within half of ``time_limit`` (``COVER_SETUP_S_PER_NONZERO``) it is not solved: the bound is then
    the plain energy (runtime), and ``info`` gets ``skipped_nonzeros``.

    ``objective="time"`` bounds the runtime instead (the deadline is then not a
    constraint): above the budget's deadline, no schedule meets it.  ``info``, if
    given, receives ``slack_used``: the share of the deadline's slack over plain
    that the returned evictions' restorations take (energy objective, with a
    deadline and a solution).  ``stop``: polled during the solve; once true, the dual
    bound reached by then is used (still valid); true before the solve of a cover HiGHS needs over a
    second to set up, the plain bound is.  (HiGHS
    hears it only after its presolve: 36 s on a 1,000-node layered DAG's cover on a loaded machine.)
    """
    plain = g.plain_energy_j
    if budget is None or not (remat or paging):
        return plain, {}
    n, m, nd = len(g.nodes), g.ram, g.nodes
    cap = ram_cap(budget.ram_bytes) - g.fixed_ram_bytes
    last_read = g.last_reader
    # inputs past their last use when their last reader is recomputed
    dead_inputs = [[p for p in sorted(set(g.preds[i])) if last_read[p] == i and m[p] > 0] for i in range(n)]

    # per tensor: x absent at some moment, a paged back in, r recomputed back, o paged out
    X, A, R, O = 0, n, 2 * n, 3 * n
    cost = (
        [0.0] * n
        + [nd[i].pagein_energy_j for i in range(n)]
        + [nd[i].compute_energy_j for i in range(n)]
        + [nd[i].pageout_energy_j for i in range(n)]
    )
    time_of = {A + i: nd[i].pagein_time_s for i in range(n)}
    time_of.update({R + i: nd[i].compute_time_s for i in range(n)})
    time_of.update({O + i: nd[i].pageout_time_s for i in range(n)})
    kind = ["x"] * n + ["page"] * n + ["remat"] * n + ["page"] * n
    rows: list[tuple[dict[int, float], float, float]] = []  # (coefficients, lo, hi)

    def column(c: float, k: str, tm: float) -> int:
        cost.append(c)
        kind.append(k)
        time_of[len(cost) - 1] = tm
        return len(cost) - 1

    chain: dict[int, list[tuple[int, float]]] = {}  # root i -> [(kept column, RAM it cancels)]

    def link(root: int, consumer_rc: int, v: int, budget_bytes: float, depth: int = 1):
        # v must be in RAM when its last reader is recomputed: paged in, recomputed, or kept
        pi = column(nd[v].pagein_energy_j, "page", nd[v].pagein_time_s)
        rho = column(nd[v].compute_energy_j, "remat", nd[v].compute_time_s)
        keep = column(0.0, "keep", 0.0)
        rows.append(({consumer_rc: 1.0, pi: -1.0, rho: -1.0, keep: -1.0}, -math.inf, 0.0))
        rows.append(({pi: 1.0, O + v: -1.0}, -math.inf, 0.0))
        share = min(m[v], budget_bytes)
        chain[root].append((keep, share))
        kids = dead_inputs[v] if depth < max_depth else []
        for q in kids:
            link(root, rho, q, share / len(kids), depth + 1)

    # tight moments: node t's inputs, output and the tensors alive across it (m > 0, read after t)
    # exceed the budget by need; alive is kept incrementally (a tensor enters after its stage and
    # leaves at its last reader), so this is linear in the graph's size
    ends: dict[int, list[int]] = {}
    alive: set[int] = set()
    alive_bytes = 0
    tight: list[int] = []
    needs: list[float] = []
    for t in range(n):
        if t > 0 and m[t - 1] > 0 and last_read[t - 1] > t:
            alive.add(t - 1)
            alive_bytes += m[t - 1]
            ends.setdefault(last_read[t - 1], []).append(t - 1)
        for i in ends.pop(t, ()):
            alive.discard(i)
            alive_bytes -= m[i]
        inputs = set(g.preds[t])
        need = m[t] + sum(m[i] for i in inputs) + alive_bytes - sum(m[i] for i in inputs & alive) - cap
        if need > 0:
            tight.append(t)
            needs.append(need)
    if not needs:
        return (g.plain_runtime_s if objective == "time" else plain), {}
    # tensor i is alive across the tight moments tight[a_i:b_i]; it is credited (may be absent)
    # at those where it is not an input
    is_tight = set(tight)
    span: dict[int, tuple[int, int]] = {}
    for i in range(n):
        if m[i] <= 0 or last_read[i] <= i + 1:
            continue
        a, b = bisect_right(tight, i), bisect_left(tight, last_read[i])
        read_inside = sum(1 for s_ in set(g.succs[i]) if s_ in is_tight and s_ < last_read[i])
        if b - a > read_inside:
            span[i] = (a, b)
    credited = set(span)
    below = [0] * n  # links a chain from v has below v (each tensor has one last reader: a forest)
    for v in range(n):
        below[v] = sum(1 + below[q] for q in dead_inputs[v])
    max_depth = chain_depth if sum(below[i] for i in credited) > max_links else math.inf
    # The ILP's size, known before it is built (linear in the graph): one entry per tight moment a
    # credited tensor spans, and per chain link of it, plus each link's few rows.  A cover HiGHS could
    # not even set up in half of its time is not built (on a 20,000-node chain: 34 million nonzeros,
    # 74 s to build in Python): its bound is then the moment bound (moment_bound), not the ILP's.
    links = _links_within(dead_inputs, max_depth)
    nonzeros = sum((b - a) * (1 + links[i]) + 3 + 6 * links[i] for i, (a, b) in span.items())
    skip = (time_limit is not None and COVER_SETUP_S_PER_NONZERO * nonzeros > 0.5 * time_limit) or (
        COVER_SETUP_S_PER_NONZERO * nonzeros > 1.0 and stop is not None and stop()
    )
    if skip:
        if info is not None:
            info["skipped_nonzeros"] = nonzeros
        extra = _skipped_bound(g, tight, needs, span, remat, paging, objective, budget, time_limit)
        return (g.plain_runtime_s if objective == "time" else plain) + extra, {}
    built_at = time.perf_counter()
    for i in sorted(credited):
        rows.append(({X + i: 1.0, A + i: -1.0, R + i: -1.0}, -math.inf, 0.0))  # x_i <= a_i + r_i
        rows.append(({A + i: 1.0, O + i: -1.0}, -math.inf, 0.0))  # a page-in needs a page-out
        chain[i] = []
        kids = dead_inputs[i]
        for p in kids:
            link(i, R + i, p, m[i] / len(kids))
    # one row per tight moment: the bytes its alive tensors free (absent, less what their kept
    # chains hold) cover its need
    live_at: list[list[int]] = [[] for _ in tight]
    for i, (a, b) in span.items():
        for k in range(a, b):
            live_at[k].append(i)
    for k, (t, need) in enumerate(zip(tight, needs)):
        inputs = set(g.preds[t])
        live = [i for i in live_at[k] if i not in inputs]
        row = {X + i: m[i] / need for i in live}
        for i in live:
            for keep, share in chain[i]:
                row[keep] = -share / need
        rows.append((row, 1.0, math.inf))
    ncol = len(cost)
    hi = np.ones(ncol)
    kind_a = np.array(kind)
    if not paging:
        hi[kind_a == "page"] = 0
    if not remat:
        hi[kind_a == "remat"] = 0
    # with paging time hidden or overlapped only recomputation surely adds time
    counted = ("remat", "page") if budget.paging_time == PAGING_SERIAL else ("remat",)
    tr = {k: v for k, v in time_of.items() if v > 0 and kind[k] in counted}
    plain_obj = plain
    slack_row = None
    if objective == "time":
        plain_obj = g.plain_runtime_s
        cost = [0.0] * ncol
        for k, v in tr.items():
            cost[k] = v
    elif budget.runtime_s is not None:
        slack = budget.runtime_s * (1 + 1e-6) - g.plain_runtime_s
        if tr and slack > 0:
            scale = max(tr.values())
            rows.append(({k: v / scale for k, v in tr.items()}, -math.inf, slack / scale))
            slack_row = slack
        elif tr:
            for k in tr:
                hi[k] = 0
    starts, index, value = [0], [], []
    for coef, _, _ in rows:
        index += list(coef)
        value += list(coef.values())
        starts.append(len(index))
    unit = plain_obj or 1.0
    p = MilpProblem(
        c=np.array(cost) / unit,
        col_lo=np.zeros(ncol),
        col_hi=hi,
        integer=np.ones(ncol, bool),
        starts=np.array(starts),
        index=np.array(index, dtype=np.int64),
        value=np.array(value),
        row_lo=np.array([r[1] for r in rows]),
        row_hi=np.array([r[2] for r in rows]),
    )
    # On a loaded machine HiGHS's setup is slower by about as much as building the ILP here was
    built = time.perf_counter() - built_at
    slowdown = max(1.0, built / (COVER_BUILD_S_PER_NONZERO * p.num_nonzeros)) if built > 0.2 else 1.0
    setup = COVER_SETUP_S_PER_NONZERO * p.num_nonzeros * slowdown
    # asked to stop: a small cover still runs (it may prove the budgets infeasible at once), a large one not
    if (time_limit is not None and setup > 0.5 * max(0.0, time_limit - built)) or (
        setup > 1.0 and stop is not None and stop()
    ):
        if info is not None:
            info["skipped_nonzeros"] = p.num_nonzeros
        extra = _skipped_bound(g, tight, needs, span, remat, paging, objective, budget, time_limit)
        return plain_obj + extra, {}
    if time_limit is not None:
        time_limit = max(0.1, time_limit - built)
    r = solve_highs(p, time_limit=time_limit, gap=1e-6, options={"mip_abs_gap": abs_gap}, stop=stop)
    if r.status == "infeasible":
        return math.inf, {}  # no eviction set fits every moment (within the runtime budget)
    extra = r.bound if r.bound is not None and math.isfinite(r.bound) else 0.0
    extra -= 1e-6 * (1.0 + abs(extra))  # the solver's dual bound is exact only to its tolerances
    guide: dict[int, str] = {}
    if r.x is not None:
        if info is not None and slack_row is not None:
            info["slack_used"] = math.fsum(v * r.x[k] for k, v in tr.items()) / slack_row
        for i in credited:
            if r.x[X + i] > 0.5:
                guide[i] = "page" if r.x[A + i] > 0.5 else "remat"
    return plain_obj + max(0.0, extra) * unit, guide


def _links_within(dead_inputs: list[list[int]], max_depth: float) -> list[int]:
    """Per tensor, the chain links the cover follows below it (``link``), at most ``max_depth`` deep."""
    n = len(dead_inputs)
    if max_depth == math.inf:
        below = [0] * n
        for v in range(n):
            below[v] = sum(1 + below[q] for q in dead_inputs[v])
        return below
    depth = int(max_depth)
    # within[d][v]: links below v when v itself sits d links deep (none from depth max_depth on)
    within = [[0] * n for _ in range(depth + 1)]
    for d in range(depth - 1, 0, -1):
        row, deeper = within[d], within[d + 1]
        for v in range(n):
            if dead_inputs[v]:
                row[v] = sum(1 + deeper[q] for q in dead_inputs[v])
    top = within[1]  # a root's inputs are links at depth 1
    return [sum(1 + top[q] for q in dead_inputs[v]) for v in range(n)]


def _skipped_bound(g, tight, needs, span, remat, paging, objective, budget, time_limit) -> float:
    """Where the cover is too large to solve: the flow bound, or the moment bound if that does not solve."""
    kw = dict(remat=remat, paging=paging, objective=objective, budget=budget)
    moment = moment_bound(g, tight, needs, span, **kw)
    if not span:
        return moment
    flow = interval_bound(g, tight, needs, span, time_limit=None if time_limit is None else 0.5 * time_limit, **kw)
    return moment if flow is None else max(moment, flow)


def moment_bound(
    g: CostedGraph,
    tight: list[int],
    needs: list[float],
    span: dict[int, tuple[int, int]],
    *,
    remat: bool,
    paging: bool,
    objective: str,
    budget: Budget,
) -> float:
    """A lower bound on the extra energy (runtime) of any schedule, from one tight moment at a time,
    in O((n + edges) log n): the cover's ILP with every row but one dropped and its columns relaxed.

    At tight moment k some alive tensors (not inputs of the node computed) are absent, freeing at
    least ``need_k`` bytes; an absent tensor i costs at least ``c_i``, the cheaper of its page-out plus
    page-in and its recomputation.  So every schedule pays at least ``need_k * min c_i / bytes_i``
    over the tensors alive there, and the largest of these over the moments is a bound.  It is what
    the pipeline uses where the full cover is too large to solve in time.
    """
    nd, m = g.nodes, g.ram
    serial = budget.paging_time == PAGING_SERIAL
    ratio: dict[int, float] = {}
    for i in span:
        costs = []
        if paging:
            costs.append(
                (nd[i].pagein_time_s + nd[i].pageout_time_s if serial else 0.0)
                if objective == "time"
                else nd[i].pagein_energy_j + nd[i].pageout_energy_j
            )
        if remat:
            costs.append(nd[i].compute_time_s if objective == "time" else nd[i].compute_energy_j)
        if costs:
            ratio[i] = min(costs) / m[i]
    starting: dict[int, list[int]] = {}
    for i, (a, _b) in span.items():
        if i in ratio:
            starting.setdefault(a, []).append(i)
    heap: list[tuple[float, int]] = []
    best = 0.0
    for k, (t, need) in enumerate(zip(tight, needs)):
        for i in starting.get(k, ()):
            heapq.heappush(heap, (ratio[i], i))
        while heap and span[heap[0][1]][1] <= k:  # past its span
            heapq.heappop(heap)
        inputs = set(g.preds[t])
        held = []
        while heap and (heap[0][1] in inputs or span[heap[0][1]][1] <= k):
            top = heapq.heappop(heap)
            if span[top[1]][1] > k:
                held.append(top)  # an input of t here, alive at later moments
        if heap:
            best = max(best, need * heap[0][0])
        for top in held:
            heapq.heappush(heap, top)
    return best


def interval_bound(
    g: CostedGraph,
    tight: list[int],
    needs: list[float],
    span: dict[int, tuple[int, int]],
    *,
    remat: bool,
    paging: bool,
    objective: str,
    budget: Budget,
    time_limit: float | None = None,
) -> float | None:
    """The cover's LP relaxation without its chain links and deadline row, as a min-cost flow: a lower
    bound on the extra energy (runtime) at least as strong as :func:`moment_bound`, with O(n) nonzeros
    (None when HiGHS does not solve it in ``time_limit``).

    With y_i = bytes_i * x_i in [0, bytes_i] at cost c_i / bytes_i (c_i as in :func:`moment_bound`), the
    rows say: at every tight moment k, the y of the tensors alive across it (a contiguous run of moments
    per tensor, here taken whole: counting a tensor also where it is read only loosens a row) less a
    surplus s_k >= 0 equal need_k.  Subtracting each row from the next turns every column into one +1
    and one -1 (y_i at its first moment and after its last, s_k at k and k + 1): a network matrix, so
    the LP is a min-cost flow over the moments with one arc per tensor, solved here by HiGHS's simplex.
    """
    nd, m = g.nodes, g.ram
    serial = budget.paging_time == PAGING_SERIAL
    K = len(tight)
    cols_c, cols_hi, entries = [], [], []  # entries: (row, col, value)
    for i, (a, b) in span.items():
        costs = []
        if paging:
            costs.append(
                (nd[i].pagein_time_s + nd[i].pageout_time_s if serial else 0.0)
                if objective == "time"
                else nd[i].pagein_energy_j + nd[i].pageout_energy_j
            )
        if remat:
            costs.append(nd[i].compute_time_s if objective == "time" else nd[i].compute_energy_j)
        j = len(cols_c)
        cols_c.append(min(costs) / m[i])
        cols_hi.append(float(m[i]))
        entries += [(a, j, 1.0), (b, j, -1.0)]
    for k in range(K):  # the surplus at moment k
        j = len(cols_c)
        cols_c.append(0.0)
        cols_hi.append(math.inf)
        entries += [(k, j, -1.0), (k + 1, j, 1.0)]
    rhs = [needs[0]] + [needs[k] - needs[k - 1] for k in range(1, K)] + [-needs[K - 1]]
    entries.sort()
    starts = np.searchsorted(np.array([r for r, _, _ in entries], dtype=np.int64), np.arange(K + 2))
    scale = max(cols_c) or 1.0
    p = MilpProblem(
        c=np.array(cols_c) / scale,
        col_lo=np.zeros(len(cols_c)),
        col_hi=np.array(cols_hi),
        integer=np.zeros(len(cols_c), bool),
        starts=starts,
        index=np.array([c for _, c, _ in entries], dtype=np.int64),
        value=np.array([v for _, _, v in entries]),
        row_lo=np.array(rhs, dtype=float),
        row_hi=np.array(rhs, dtype=float),
    )
    r = solve_highs(p, time_limit=time_limit, gap=1e-9)
    if r.detail != "Optimal" or r.objective is None:
        return None
    value = r.objective * scale
    return max(0.0, value - 1e-7 * abs(value))  # the simplex's optimum is exact only to its tolerances
