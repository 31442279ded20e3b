"""Solvers behind one interface: ``solve()``, the strategies, the POET MILP and the baselines.

Layers, lowest first (each imports only from the ones before it; tests/test_architecture.py checks):

* ``errors``, ``policy``, ``options``, ``progress``, ``result`` -- the shared vocabulary;
* ``stage`` -- the stage plan and the one emitter (the free rule lives here);
* ``lp`` -- matrix-form problems and the HiGHS backend;
* ``milp`` -- the POET MILP's formulation and its warm start; ``bounds`` -- the eviction cover;
* ``baselines`` -- plain backprop, Chen's checkpointing, the Capuchin-style heuristic; ``problem`` -- the
  costed graph, the budget and, where the budget needs it, the tiled graph;
* ``search`` -- the greedy rules, the guide search, the interval search, the worker pool;
* ``min_budgets``; ``phases`` -- what ``poet solve`` runs, in order (``phases.PHASES``, docs/pipeline.md);
* ``strategies`` -- one module per strategy, in one table; ``cache``; ``api`` -- ``solve()``, the front
  door ``poet solve`` takes too; ``tiled`` -- the names callers wrote against before it.

The strategy table (and with it numpy and HiGHS) is imported when first used, so that commands
that never solve start fast.
"""

from __future__ import annotations

import importlib

from .api import costed_graph, make_budget, solve, solve_costed
from .errors import SolveError
from .options import METHODS, SolveOptions
from .policy import SolvePolicy

__all__ = [
    "DESCRIPTIONS",
    "METHODS",
    "STRATEGIES",
    "SolveError",
    "SolveOptions",
    "SolvePolicy",
    "costed_graph",
    "make_budget",
    "register",
    "solve",
    "solve_costed",
]


def __getattr__(name):
    if name in ("STRATEGIES", "DESCRIPTIONS", "register"):
        return getattr(importlib.import_module(".strategies", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
