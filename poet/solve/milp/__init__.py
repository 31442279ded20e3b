"""The POET MILP: its formulation (:mod:`.formulation`) and its warm start from a stage plan (:mod:`.warm_start`)."""

from .formulation import Formulation, build
from .warm_start import decode, plan_to_start

__all__ = ["Formulation", "build", "decode", "plan_to_start"]
