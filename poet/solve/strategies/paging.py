"""The ``paging`` strategy: the portfolio with rematerialization disabled."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ..phases import solve_portfolio

DESCRIPTION = "MILP with paging only (rematerialization disabled)"


def solve_paging(g: CostedGraph, budget: Budget, opts) -> Schedule:
    return solve_portfolio(g, budget, opts, remat=False, paging=True, strategy="paging")
