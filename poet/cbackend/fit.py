"""Making the arena fit the budget: solve again with the budget reduced by the overshoot.

A schedule's RAM budget bounds the sum of live bytes; once every buffer has an address, holes can
push the arena past it.  The budget is never exceeded silently: when the arena plan of a schedule
needs more than the budget leaves after fixed RAM, the schedule is solved again (same graph,
strategy, deadline and paging model) with the RAM budget lowered by the overshoot, and the new
schedule's arena is planned, until one fits or the time limit is spent.  Every schedule tried is
validated against the original budget before its arena is planned.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..schedule.core import Schedule
from ..schedule.validate import validate
from .arena import ArenaPlan, plan_arena

__all__ = ["REFIT_STRATEGIES", "ArenaFit", "FitAttempt", "fit_arena"]

REFIT_STRATEGIES = ("poet", "remat", "paging", "capuchin")  # strategies a RAM budget steers


@dataclass(frozen=True)
class FitAttempt:
    """One schedule tried: the RAM budget it was solved for, its peak and its arena."""

    ram_budget: int
    status: str
    peak_bytes: int | None  # activations: the schedule's peak minus fixed RAM (None: no schedule)
    arena_bytes: int | None
    seconds: float
    nodes: int = 0  # the schedule's graph's nodes (another count than the first's: tiled again)


@dataclass(frozen=True)
class ArenaFit:
    """The schedule whose arena fits (or the last one tried), its plan and the attempts."""

    schedule: Schedule
    plan: ArenaPlan
    available: int  # arena bytes the budget leaves after fixed RAM
    attempts: tuple[FitAttempt, ...]

    @property
    def fits(self) -> bool:
        return self.plan.arena_bytes <= self.available

    def lines(self) -> list[str]:
        out = []
        for a in self.attempts:
            got = (
                f"peak {a.peak_bytes:,} B, arena {a.arena_bytes:,} B"
                if a.arena_bytes is not None
                else f"no schedule ({a.status})"
            )
            tiled = f", a graph of {a.nodes:,} nodes" if a.nodes and a.nodes != self.attempts[0].nodes else ""
            out.append(f"  solved for {a.ram_budget:,} B: {got}{tiled} ({a.seconds:.1f} s)")
        return out


def refit_policy(policy=None):
    """``policy`` (None: the default) for a re-solve towards a smaller arena: without the one-pass rule on
    small tiled graphs, whose schedules in searched orders pack into arenas worse than stage-form ones."""
    from ..solve.policy import SolvePolicy

    return dataclasses.replace(policy or SolvePolicy(), stream_small_tiled=False)


def _solve(schedule: Schedule, ram: int, time_limit: float, solve_options: dict) -> Schedule:
    from ..solve.api import solve

    b = schedule.budget
    options = dict(solve_options)
    options["policy"] = refit_policy(options.get("policy"))
    return solve(
        schedule.graph,
        memory=ram,
        runtime=b.runtime_s,
        strategy=schedule.strategy,
        paging_time=b.paging_time,
        time_limit=time_limit,
        find_min_budgets=False,
        **options,
    )


def _next_budget(ram: int, overshoot: int, too_big: int, infeasible: int | None, step: int) -> int | None:
    """The next RAM budget to solve for: the last one less the overshoot, or halfway between the
    largest infeasible budget and the smallest whose arena was too big; None when nothing is left."""
    nxt = ram - overshoot
    if infeasible is not None and nxt <= infeasible:
        nxt = (infeasible + too_big) // 2
    if nxt >= too_big or (infeasible is not None and (nxt <= infeasible or too_big - infeasible <= step)):
        return None
    return nxt


def fit_arena(
    schedule: Schedule,
    *,
    time_limit_s: float = 120.0,
    arena_time_limit_s: float = 30.0,
    solve_options: dict | None = None,
    progress: Callable[[str], None] | None = None,
    solver: Callable[[Schedule, int, float], Schedule] | None = None,
    arena_limit: int | None = None,
    plan: ArenaPlan | None = None,
) -> ArenaFit:
    """``schedule`` if its arena fits its budget, else a re-solved one whose arena does (or the one
    with the smallest arena, when none did within ``time_limit_s``: check :attr:`ArenaFit.fits`).

    ``solver(schedule, ram_bytes, seconds_left)`` solves again (default: the same graph, strategy,
    deadline and paging model with ``ram_bytes``); it may return a schedule of another graph of the
    same model (a finer tiling), which is validated against the real budget like any other.  When a
    budget is infeasible, the next one is halfway back towards the last that gave a schedule.
    ``arena_limit``: the most the arena may take when the target holds more than fixed RAM beside it
    (a RAM region that also holds the stack, data and bss); ``plan``: ``schedule``'s arena, if planned.
    """
    t_end = time.monotonic() + time_limit_s
    budget = schedule.budget
    solve_options = dict(solve_options or {})
    run = solver or (lambda s, ram, left: _solve(s, ram, left, solve_options))

    def avail_of(s: Schedule) -> int:
        left = budget.ram_bytes - s.graph.fixed_ram_bytes
        return left if arena_limit is None else min(left, arena_limit)

    t0 = time.monotonic()
    plan = plan if plan is not None else plan_arena(schedule, time_limit_s=arena_time_limit_s)
    peak = schedule.totals.peak_ram_bytes - schedule.graph.fixed_ram_bytes
    n0 = len(schedule.graph.nodes)
    attempts = [FitAttempt(budget.ram_bytes, schedule.status, peak, plan.arena_bytes, time.monotonic() - t0, n0)]
    best = (schedule, plan)
    too_big, infeasible = budget.ram_bytes, None
    step = max(8, budget.ram_bytes // 200)  # stop halving below half a percent of the budget
    overshoot = plan.arena_bytes - avail_of(schedule)
    # the first re-solve asks for the budget less the overshoot, or at once for what the arena limit leaves
    ram = min(budget.ram_bytes, avail_of(schedule) + schedule.graph.fixed_ram_bytes + max(0, overshoot))
    while best[1].arena_bytes > avail_of(best[0]) and schedule.strategy in REFIT_STRATEGIES:
        left = t_end - time.monotonic()
        nxt = _next_budget(ram, overshoot, too_big, infeasible, step)
        if left <= 1.0 or nxt is None or nxt <= schedule.graph.fixed_ram_bytes:
            break
        ram = nxt
        if progress:
            progress(
                f"arena {best[1].arena_bytes:,} B > {avail_of(best[0]):,} B available: solving again for {ram:,} B RAM"
            )
        t0 = time.monotonic()
        s2 = run(schedule, ram, max(1.0, left / 2))  # leave time for one more after this one
        if not s2.feasible:
            attempts.append(FitAttempt(ram, s2.status, None, None, time.monotonic() - t0, len(s2.graph.nodes)))
            infeasible = ram if infeasible is None else max(infeasible, ram)
            continue
        totals = validate(s2.graph, s2.steps, budget)  # valid under the tighter budget, so under the real one
        s2 = s2.with_(budget=budget, totals=totals)
        plan = plan_arena(s2, time_limit_s=arena_time_limit_s)
        fixed = s2.graph.fixed_ram_bytes
        attempts.append(
            FitAttempt(
                ram,
                s2.status,
                totals.peak_ram_bytes - fixed,
                plan.arena_bytes,
                time.monotonic() - t0,
                len(s2.graph.nodes),
            )
        )
        overshoot = plan.arena_bytes - avail_of(s2)
        if overshoot > 0:
            too_big = min(too_big, ram)
        if plan.arena_bytes - avail_of(s2) < best[1].arena_bytes - avail_of(best[0]):
            best = (s2, plan)
    return ArenaFit(best[0], best[1], avail_of(best[0]), tuple(attempts))
