"""Linear programs: the matrix-form problem (shared by the MILP and the eviction cover) and HiGHS."""

from .highs import BACKENDS, get_backend, new_highs, solve_highs
from .problem import MatrixBuilder, MilpProblem, MilpResult, max_violation, row_activities

__all__ = [
    "BACKENDS",
    "MatrixBuilder",
    "MilpProblem",
    "MilpResult",
    "get_backend",
    "max_violation",
    "new_highs",
    "row_activities",
    "solve_highs",
]
