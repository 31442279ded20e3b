"""The ``poet`` strategy: the joint MILP's portfolio, with rematerialization and paging both allowed.

Its phases (:data:`poet.solve.phases.PHASES`) start with the Capuchin-style schedule, which only this
strategy runs: a freely ordered schedule the stage form cannot express, kept when it is cheaper.
"""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ..phases import solve_portfolio

DESCRIPTION = "POET MILP: rematerialization and paging chosen jointly for minimum energy"


def solve_poet(g: CostedGraph, budget: Budget, opts) -> Schedule:
    return solve_portfolio(g, budget, opts, remat=True, paging=True, strategy="poet")
