"""The ``--tile`` option and its one parser, shared by both tiling stacks.

``poet solve`` and ``poet sweep`` tile zoo layer graphs (:mod:`poet.graph.tiling_plan`: costing tiled
nodes); ``poet plan``, ``poet train`` and :func:`poet.plan` tile traced PyTorch programs
(:mod:`poet.execute.tiled`: slicing tensors).  Both take the same values with the same rule, defined
here once: ``auto``, ``off`` or a tile count of at least 2 (one tile is no tiling: ``off`` says so).
"""

from __future__ import annotations

from ..units import SECONDS, number_option
from .core import GraphError

__all__ = [
    "MAX_NODES",
    "MAX_PLAN_SECONDS",
    "TILE_AUTO",
    "TILE_HELP",
    "TILE_OFF",
    "add_tile_option",
    "parse_tile_option",
    "tile_count",
]

TILE_OFF = "off"
TILE_AUTO = "auto"
MIN_TILES = 2
MAX_NODES = 60_000  # auto tiling stops refining past this many nodes: no solver answers in minutes beyond it
MAX_PLAN_SECONDS = 60.0  # ... or after this long

TILE_HELP = (
    "operator tiling when no layer fits the RAM budget whole: auto (default: split only the layers that "
    "must be split, as coarsely as fits), off (never; today's untiled answer), or N >= 2 (split every layer "
    "that can be split into N tiles); see docs/tiling.md"
)


def add_tile_option(group, caps: bool = False) -> None:
    """The ``--tile`` option of solve / sweep / plan / train (an argparse parser or group); with
    ``caps``, also ``--max-tile-nodes`` and ``--max-tile-seconds`` (auto tiling's caps)."""
    group.add_argument("--tile", default=TILE_AUTO, metavar="auto|off|N", help=TILE_HELP)
    if caps:
        group.add_argument(
            "--max-tile-nodes",
            type=number_option("int", "a whole number of nodes, 1 or more", "3000000", minimum=1),
            default=None,
            metavar="N",
            help="auto tiling stops refining past N nodes (default: as many as this machine's available RAM "
            "holds by the estimate of a tiled solve's memory; docs/tiling.md)",
        )
        group.add_argument(
            "--max-tile-seconds",
            type=SECONDS,
            default=None,
            metavar="S",
            help="auto tiling stops refining after S seconds (default: 3/4 of --time-limit, which planning is "
            "part of; 1200 without one), never past what --time-limit leaves the solve",
        )


def parse_tile_option(value) -> str:
    """``"off"``, ``"auto"`` or a tile count of at least 2 (as a string); ``None`` is auto and
    ``False`` off (the Python API's spellings).  Raises GraphError (a ValueError) otherwise."""
    if value is None:
        return TILE_AUTO
    if value is False:
        return TILE_OFF
    v = str(value).strip().lower()
    if v in (TILE_OFF, TILE_AUTO):
        return v
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < MIN_TILES or str(n) != v:
        raise GraphError(
            f"--tile {value!r}: give off (never tile), auto (tile only what the RAM budget needs; "
            f"the default) or a tile count such as 4 (at least {MIN_TILES}: one tile is no tiling, say off)"
        )
    return str(n)


def tile_count(value) -> int | None:
    """The parsed option as a count: None for auto (tile when needed), 0 for off, else the count."""
    mode = parse_tile_option(value)
    if mode == TILE_AUTO:
        return None
    return 0 if mode == TILE_OFF else int(mode)
