"""The solver's own error: a strategy produced something it should not have.

It sits at the bottom of ``poet.solve`` so that every layer (the HiGHS backend, the stage
emitter, the strategies) can raise it without importing anything above it.
"""

from __future__ import annotations


class SolveError(RuntimeError):
    """A strategy produced something it should not have (a bug, reported clearly)."""
