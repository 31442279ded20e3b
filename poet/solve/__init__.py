"""Solvers behind one interface: the POET MILP and the baselines."""
from . import baselines, milp  # noqa: F401  (register strategies)
from .api import DESCRIPTIONS, STRATEGIES, SolveError, SolveOptions, costed_graph, make_budget, register, solve, solve_costed

__all__ = ["DESCRIPTIONS", "STRATEGIES", "SolveError", "SolveOptions", "costed_graph", "make_budget", "register",
           "solve", "solve_costed"]
