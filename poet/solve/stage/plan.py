"""The stage plan: the MILP's decisions written sparsely, shared by every solver of the stage form.

Stages t = 0..n-1; stage t computes node t for the first time (Checkmate's frontier-advancing
order).  A :class:`Plan` says, per stage, which nodes are computed, which tensors are kept from
the previous stage, which are paged in (and before which computation) and which are paged out.
The MILP's solution, the greedy rules' runs and the interval search's solutions are all plans,
so one emitter (:mod:`poet.solve.stage.emit`) turns any of them into instructions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN

# RAM slack kept below the budget so solver tolerances (1e-9 of the budget) can
# never round a schedule over it: 0 bytes below 500 MB, 2 bytes per GB above.
# The MILP and the greedy both charge RAM against this cap.
RAM_MARGIN = 2e-9


class GuideKind(StrEnum):
    """What a guide (tensor -> kind: the eviction cover's choice, followed by the greedy rules) says of a
    tensor: evict it first and page it (``PAGE``) or recompute it (``REMAT``) when it is needed again,
    or evict it last (``KEEP``)."""

    PAGE = "page"
    REMAT = "remat"
    KEEP = "keep"


def ram_cap(budget_bytes: int) -> int:
    """The bytes a plan may use under a RAM budget (the budget less :data:`RAM_MARGIN`)."""
    return int(budget_bytes - math.floor(RAM_MARGIN * budget_bytes))


@dataclass
class Plan:
    """Stage decisions.  ``keep[t]``: in RAM at the start of stage t (``keep[0]`` empty);
    ``comp[t]``: computed in stage t (ascending, ends with t); ``ins[t][k]``: paged in right
    before computing k; ``outs[t]``: paged out during stage t."""

    n: int
    comp: list = field(default_factory=list)
    keep: list = field(default_factory=list)
    ins: list = field(default_factory=list)
    outs: list = field(default_factory=list)
    rule: tuple | None = None  # (prefer, guide, budget, guide_once) of the greedy run that made it

    @classmethod
    def empty(cls, n: int) -> Plan:
        return cls(
            n, [[] for _ in range(n)], [set() for _ in range(n + 1)], [{} for _ in range(n)], [set() for _ in range(n)]
        )


def plan_costs(g: CostedGraph, plan: Plan, paging_time: str) -> tuple[float, float]:
    """(energy, runtime) of a plan, runtime as the validator counts it except overlap (counted serial)."""
    nd = g.nodes
    e = math.fsum(nd[k].compute_energy_j for c in plan.comp for k in c)
    rt_c = math.fsum(nd[k].compute_time_s for c in plan.comp for k in c)
    e_p, t_p = [], []
    for t in range(plan.n):
        for lst in plan.ins[t].values():
            for i in lst:
                e_p.append(nd[i].pagein_energy_j)
                t_p.append(nd[i].pagein_time_s)
        for i in plan.outs[t]:
            e_p.append(nd[i].pageout_energy_j)
            t_p.append(nd[i].pageout_time_s)
    return e + math.fsum(e_p), rt_c + (0.0 if paging_time == PAGING_HIDDEN else math.fsum(t_p))


def drop_unread_pageouts(plan: Plan) -> Plan:
    """Remove page-outs that no later page-in reads (in place).

    The greedy pages a tensor out when it evicts it, before knowing whether it
    will be recomputed instead; such a copy costs write energy and time and
    changes nothing else, since a page-out does not free RAM.
    """
    read_after: dict[int, int] = {}  # tensor -> last stage that pages it in
    for t in range(plan.n):
        for lst in plan.ins[t].values():
            for i in lst:
                read_after[i] = t
    for t in range(plan.n):
        plan.outs[t] = {i for i in plan.outs[t] if read_after.get(i, -1) >= t}
    return plan


def live_pairs(g: CostedGraph) -> int:
    """(tensor, stage) pairs of keeping every tensor from its computation to its last reader: what a plan
    that drops little holds in its ``keep`` sets, and what the eviction cover's rows and the idle-gap
    plan grow with.  Linear to compute; on a 20,000-node chain it is about 100 million."""
    last, m = g.last_reader, g.ram
    return sum(last[x] - x - 1 for x in range(len(g.nodes)) if last[x] > x + 1 and m[x] > 0)
