"""The ``paging`` strategy: the pipeline with rematerialization disabled."""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ..pipeline import solve_milp

DESCRIPTION = "MILP with paging only (rematerialization disabled)"


def solve_paging(g: CostedGraph, budget: Budget, opts) -> Schedule:
    return solve_milp(g, budget, opts, remat=False, paging=True, strategy="paging")
