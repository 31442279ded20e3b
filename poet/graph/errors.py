"""The error of graph building and loading (its own module so that every graph module can raise it)."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph that cannot be scheduled as given (cycle, bad id, bad number)."""
