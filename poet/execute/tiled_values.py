"""The values a tiled rewrite works with: how a tensor is split (:class:`Layout`), a tensor held as tiles
(:class:`Tiled`), a tuple-valued op's parts (:class:`TupleVal`), and the error a rewrite raises.

Shared by the rewriter (:mod:`poet.execute.tiled`) and its per-op rules (:mod:`poet.execute.tiled_rules`),
which both import it, so neither imports the other's module to reach them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """How a tensor is split: along ``dim``, tile ``i`` holding indices ``bounds[i]:bounds[i+1]``."""

    dim: int
    bounds: tuple[int, ...]
    axis: str = "rows"

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    def rows(self, i: int) -> tuple[int, int]:
        return self.bounds[i], self.bounds[i + 1]


def even_bounds(size: int, count: int) -> tuple[int, ...]:
    count = max(1, min(count, size))
    return tuple(round(i * size / count) for i in range(count + 1))


@dataclass
class Tiled:
    """A tensor of the original graph held as tiles (new FX nodes, one per tile)."""

    layout: Layout
    tiles: list
    shape: tuple
    dtype: object
    val: object = None  # the original FX value (fake tensor), for an assembled node's meta


@dataclass
class TupleVal:
    """A tuple-valued op of the original graph rewritten into several values (tiled or whole)."""

    items: dict


class TilingError(ValueError):
    """A program that could not be tiled as asked."""
