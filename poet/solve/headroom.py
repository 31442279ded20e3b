"""Tiles planned for less RAM than the budget: the time a tiled solve has left, spent on other tilings.

Auto tiling splits each layer as coarsely as fits the budget (:func:`~poet.graph.tiling_plan.plan_tiling`),
so the largest working sets nearly fill it and whatever else a later node reads must be paged around
them.  A graph tiled for a share of the budget, solved at the whole budget, has smaller tiles and RAM
left beside its working sets for tensors to stay resident: it does the same FLOPs but may page much less.
On bert at 256 KiB on the ``m4`` (where every byte of the SD card costs 40 FLOPs' energy) the one-pass
schedule of the graph tiled for 200 KiB costs 682.9 J against 737.2 J for the graph tiled for 256 KiB
(docs/tiling.md, "Headroom").  Which share is best is not monotone (7/8: 689 J, 3/4: 687 J, 5/8: 731 J),
so the search tries 7/8 and 3/4 of the budget and then halves the step around the best share found,
while the time left allows (:data:`SolvePolicy.headroom_shares`, ``headroom_min_seconds``).

Each candidate is planned and priced like the first graph, solved by the same strategy at the same
budget (the deadline is the untiled graph's, as for the first), and its schedule validated like every
schedule; the cheapest validated answer wins, so the search can only lower the energy.  It runs only
with time left after the first answer (a solve that used its whole limit is unchanged), only on auto
tiling of a zoo model with its parameters in flash (a placement re-prices the graph: not searched).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..graph.tiling_plan import TILE_AUTO, plan_tiling
from ..hardware.cost import linear_cost_model
from ..schedule.core import OPTIMAL, Schedule
from .options import SolveOptions
from .policy import SolvePolicy
from .problem import TiledProblem


@dataclasses.dataclass(frozen=True)
class Headroom:
    """The search's answer: the problem and schedule kept, the RAM its tiles were planned for (the budget
    itself when the first tiling stayed the cheapest), and every other tiling solved."""

    problem: TiledProblem
    schedule: Schedule
    planned_ram_bytes: int
    tried: tuple[Tried, ...]


@dataclasses.dataclass(frozen=True)
class Tried:
    """One tiling the search solved: the RAM its tiles were planned for, and its answer's energy."""

    planned_ram_bytes: int
    nodes: int
    energy_j: float | None  # None: no schedule within its time


def search_headroom(
    problem: TiledProblem,
    first: Schedule,
    source: str,
    solve: Callable[[TiledProblem, SolveOptions], Schedule],
    opts: SolveOptions,
    *,
    deadline: float,
    policy: SolvePolicy,
    device,
    batch_size: int,
    max_tile_nodes: int | None,
    progress: Callable[[str], None] | None = None,
) -> Headroom:
    """The cheapest answer among ``first`` and the graphs of ``source`` tiled for shares of the budget,
    each solved at the whole budget, until ``deadline`` (``time.perf_counter()``)."""
    budget = problem.budget.ram_bytes
    fixed = problem.graph.fixed_ram_bytes
    best_p, best_s = problem, first
    tried: list[Tried] = []
    seen = {budget}

    def left() -> float:
        return deadline - time.perf_counter()

    def energy(s: Schedule) -> float:
        return s.totals.energy_j if s.steps else float("inf")

    shares = list(policy.headroom_shares)
    step = abs(shares[0] - shares[1]) / 2 if len(shares) > 1 else 0.0
    best_share, best_planned = 1.0, budget
    plans_seen = {_key(problem.plan.counts)}
    while len(tried) < policy.headroom_max_plans:
        if not shares:
            if step < policy.headroom_finest_step:
                break
            # halve the step around the best share so far (1.0: the first tiling)
            shares = [x for x in (best_share - step, best_share + step) if 0 < x < 1]
            step /= 2
            continue
        if left() < policy.headroom_min_seconds or (opts.stop is not None and opts.stop()):
            break
        share = shares.pop(0)
        planned = int(budget * share)
        if planned in seen or planned <= fixed:
            continue
        seen.add(planned)
        if progress is not None:
            progress(f"tiling with headroom: tiles planned for {planned:,} B of {budget:,}")
        plan = plan_tiling(
            source,
            planned,
            batch_size=batch_size,
            fixed_ram_bytes=fixed,
            tile=TILE_AUTO,
            max_nodes=max_tile_nodes,
            max_seconds=max(1.0, left() / 4),
        )
        if not plan.tiled or plan.tiled_min_bytes > budget or _key(plan.counts) in plans_seen:
            # no tiling within the caps that fits the budget (fitting the share itself is not needed: the
            # planner stops where a layer cannot be split further), or one already solved
            continue
        plans_seen.add(_key(plan.counts))
        per_plan = left() / max(1, policy.headroom_max_plans - len(tried))
        if per_plan < policy.headroom_min_seconds / 2:
            break
        g = linear_cost_model(plan.graph, device, fixed)
        # the plan is reported against the budget it is solved at (it fits it; the share was the means)
        plan = dataclasses.replace(plan, budget_bytes=budget)
        candidate = TiledProblem(g, problem.budget, problem.untiled, plan, problem.device)
        s = solve(candidate, dataclasses.replace(opts, time_limit_s=per_plan, progress=None))
        tried.append(Tried(planned, plan.nodes_after, s.totals.energy_j if s.steps else None))
        if energy(s) < energy(best_s):
            best_p, best_s, best_share, best_planned = candidate, s, share, planned
    return Headroom(best_p, best_s, best_planned, tuple(tried))


def _key(counts) -> tuple:
    return tuple(sorted(counts.items()))


def skip_reason(problem: TiledProblem, first: Schedule, source, policy: SolvePolicy) -> str | None:
    """Why the search does not run on this answer (None: it does): it needs auto tiling of a zoo model
    (by name) with its parameters in flash, and a first answer whose proven gap is over
    ``policy.headroom_min_gap`` (on the ``m0`` and ``a72`` tiled graphs are proven within 0.3%: their
    answers, and the time they take, stay as they were)."""
    if not problem.tiled or problem.plan is None or problem.plan.mode != TILE_AUTO:
        return "not auto tiling"
    if not isinstance(source, str) or problem.graph.placement != "flash":
        return "not a zoo model with its parameters in flash"
    if first.status == OPTIMAL or (first.report.gap is not None and first.report.gap <= policy.headroom_min_gap):
        return "the first tiling's answer is proven within policy.headroom_min_gap"
    return None
