"""What a caller may ask of a solve: :class:`SolveOptions`, and the MILP methods it may name."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..units import BudgetError
from .policy import DEFAULT_POLICY, SolvePolicy

METHODS = {
    "faithful": "the POET MILP as formulated, solved cold (the reference)",
    "warm": "the POET MILP warm-started from the best greedy schedule",
    "fast": "greedy schedule; proven optimal by the structural lower bound when it meets it, "
    "else the tightened MILP warm-started from it",
    "heuristic": "greedy schedule only, gap against the structural lower bound",
    "auto": "fast up to 200 nodes, heuristic beyond",
}


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float | None = None
    threads: int | None = None
    gap: float = 1e-3  # relative MIP gap at which a solution counts as optimal
    backend: str = "highs"
    method: str = "auto"  # formulation variant, see METHODS
    progress: Callable[[dict], None] | None = None
    verbose: bool = False
    find_min_budgets: bool = True  # on infeasibility, compute the smallest feasible budgets
    cache: bool = False  # reuse and keep answers on disk (poet.solve.cache)
    # polled while the poet strategy solves: once it returns true, the solve ends its current step
    # as soon as it can and returns the best validated schedule found so far (Ctrl-C in the CLI)
    stop: Callable[[], bool] | None = None
    policy: SolvePolicy = DEFAULT_POLICY  # the portfolio's tuning (poet.solve.policy)
    # the graph is the tiling planner's rewrite of a zoo model (set by poet.solve.api.solve, the front
    # door): the poet strategy's rules for tiled graphs apply (policy.tiled_portfolio_max_nodes, the
    # streaming fallback)
    tiled: bool = False
    clock: Callable[[], float] = time.perf_counter  # the clock time limits are measured by

    def __post_init__(self):
        t = self.time_limit_s
        if t is not None and not (t > 0 and t != float("inf")):
            raise BudgetError(f"time limit {t} s is not a positive number of seconds; omit it to solve without a limit")
        if self.threads is not None and self.threads < 1:
            raise BudgetError(f"threads must be 1 or more (got {self.threads}); omit it to use every core")
        if self.method not in METHODS:
            raise BudgetError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not 0 <= self.gap < 1:
            raise BudgetError(f"gap {self.gap} must be a relative gap in [0, 1), e.g. 0.01 for 1%")
