"""The ``remat`` strategy: the portfolio with paging disabled (Checkmate's setting)."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ..phases import solve_portfolio

DESCRIPTION = "Checkmate-style MILP: rematerialization only (paging disabled)"


def solve_remat(g: CostedGraph, budget: Budget, opts) -> Schedule:
    return solve_portfolio(g, budget, opts, remat=True, paging=False, strategy="remat")
