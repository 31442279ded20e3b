"""Making the arena fit the budget: solve again with the budget reduced by the overshoot.

A schedule's RAM budget bounds the sum of live bytes; once every buffer has an address, holes can
push the arena past it.  The budget is never exceeded silently: when the arena plan of a schedule
needs more than the budget leaves after fixed RAM, the schedule is solved again (same graph,
strategy, deadline and paging model) with the RAM budget lowered by the overshoot, and the new
schedule's arena is planned, until one fits or the time limit is spent.  Every schedule tried is
validated against the original budget before its arena is planned.
"""

from __future__ import annotations

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
            out.append(f"  solved for {a.ram_budget:,} B: {got} ({a.seconds:.1f} s)")
        return out


def _solve(schedule: Schedule, ram: int, time_limit: float, solve_options: dict) -> Schedule:
    from ..solve.api import solve

    b = schedule.budget
    return solve(
        schedule.graph,
        memory=ram,
        runtime=b.runtime_s,
        strategy=schedule.strategy,
        paging_time=b.paging_time,
        time_limit=time_limit,
        find_min_budgets=False,
        **solve_options,
    )


def fit_arena(
    schedule: Schedule,
    *,
    time_limit_s: float = 120.0,
    arena_time_limit_s: float = 30.0,
    solve_options: dict | None = None,
    progress: Callable[[str], None] | None = None,
    solver: Callable[[Schedule, int, float], Schedule] | None = None,
) -> ArenaFit:
    """``schedule`` if its arena fits its budget, else a re-solved one whose arena does (or the last
    tried, when none did within ``time_limit_s``: check :attr:`ArenaFit.fits`)."""
    t_end = time.monotonic() + time_limit_s
    g, budget = schedule.graph, schedule.budget
    avail = budget.ram_bytes - g.fixed_ram_bytes
    solve_options = dict(solve_options or {})
    run = solver or (lambda s, ram, left: _solve(s, ram, left, solve_options))
    t0 = time.monotonic()
    plan = plan_arena(schedule, time_limit_s=arena_time_limit_s)
    peak = schedule.totals.peak_ram_bytes - g.fixed_ram_bytes
    attempts = [FitAttempt(budget.ram_bytes, schedule.status, peak, plan.arena_bytes, time.monotonic() - t0)]
    best = (schedule, plan)
    ram = budget.ram_bytes
    while plan.arena_bytes > avail and schedule.strategy in REFIT_STRATEGIES:
        left = t_end - time.monotonic()
        if left <= 1.0:
            break
        ram -= plan.arena_bytes - avail
        if ram <= g.fixed_ram_bytes:
            break
        if progress:
            progress(f"arena {plan.arena_bytes:,} B > {avail:,} B available: solving again for {ram:,} B RAM")
        t0 = time.monotonic()
        s2 = run(schedule, ram, left)
        if not s2.feasible:
            attempts.append(FitAttempt(ram, s2.status, None, None, time.monotonic() - t0))
            break
        totals = validate(g, s2.steps, budget)  # valid under the tighter budget, so under the real one
        s2 = s2.with_(budget=budget, totals=totals)
        plan = plan_arena(s2, time_limit_s=arena_time_limit_s)
        attempts.append(
            FitAttempt(
                ram, s2.status, totals.peak_ram_bytes - g.fixed_ram_bytes, plan.arena_bytes, time.monotonic() - t0
            )
        )
        if plan.arena_bytes < best[1].arena_bytes:
            best = (s2, plan)
        schedule = s2
    return ArenaFit(best[0], best[1], avail, tuple(attempts))
