"""The names callers wrote against before the front door (:mod:`poet.solve.api`) took tiling in.

The problem (the tiled graph, its budget, what tiling cost) is :mod:`poet.solve.problem`'s; the rules for
tiled graphs (the size rule, the streaming fallback) are phases of the portfolio
(:mod:`poet.solve.phases`); :func:`solve_tiled` is :func:`poet.solve.api.solve_problem`.
"""

from __future__ import annotations

from .api import solve_problem as solve_tiled
from .problem import TiledProblem, TilingCosts, tiled_problem, tiling_costs

__all__ = ["TiledProblem", "TilingCosts", "solve_tiled", "tiled_problem", "tiling_costs"]
