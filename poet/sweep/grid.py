"""The grid of one sweep: what is asked (SweepSpec), how it is read from the command line, and its order.

Everything here is checked before a solve starts or a directory is made: an empty list, an unknown
strategy or a grid too large to finish is refused with a message that says what would work.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..schedule.core import PAGING_SERIAL
from ..units import BudgetError

SWEEP_FORMAT = "poet-sweep/1"
MILP_STRATEGIES = ("poet", "remat", "paging")
DEFAULT_STRATEGIES = ("poet", "remat", "paging", "keep-all", "chen", "capuchin")

# Points of one sweep at most.  Each point may take up to the time limit (a minute by default), so
# 10,000 points is already days of solving on one machine; beyond it a typo (--steps 100000) is far
# likelier than a plan.
MAX_POINTS = 10_000

# a row's columns that come from its validated schedule's totals (same names as the Totals fields)
TOTALS_COLUMNS = (
    "energy_j",
    "compute_energy_j",
    "paging_energy_j",
    "runtime_s",
    "peak_ram_bytes",
    "recomputes",
    "page_ins",
    "page_outs",
)

COLUMNS = [
    "key",
    "model",
    "device",
    "strategy",
    "paging_time",
    "memory",
    "ram_budget_bytes",
    "ram_fraction",
    "runtime",
    "runtime_budget_s",
    "runtime_budget_x",
    "status",
    *TOTALS_COLUMNS,
    "solve_seconds",
    "gap",
    "bound_energy_j",
    "method",
    "reused_from",
    "schedule_file",
    "tiled_nodes",  # nodes of the tiled graph the point was solved on (empty: not tiled)
    "tiling",  # what was split, e.g. "5 layers split into up to 2 tiles: fc1 x2, relu1 x2, fc2 x2, ..."
    "message",
]


class SweepError(BudgetError):
    """A sweep request that cannot be carried out (bad range, unsafe output directory)."""


@dataclass
class SweepSpec:
    """One model on one device: the RAM budgets x deadlines x strategies to solve, and how."""

    model: str
    device: str | None
    memories: list[str]
    runtimes: list[str]
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    paging_time: str = PAGING_SERIAL
    time_limit_s: float | None = 60.0
    batch_size: int = 1
    gap: float = 1e-3
    threads: int | None = None  # HiGHS threads per point (None: HiGHS decides)
    method: str = "auto"  # MILP formulation/solve variant, see poet.solve.METHODS
    tile: str = "auto"  # auto: tile points below the untiled minimum; off: never; N: always, N tiles

    def identity(self) -> dict:
        """What must match for points of two runs to be comparable (and resumable)."""
        return {
            "model": self.model,
            "device": self.device,
            "paging_time": self.paging_time,
            "batch_size": self.batch_size,
            "tile": self.tile,
        }

    def points(self) -> list[tuple[str, str, str]]:
        """Every (strategy, memory, runtime) of the grid."""
        return [(s, m, r) for r in self.runtimes for m in self.memories for s in self.strategies]


def parse_memory_range(text: str, steps: int | None = None) -> list[str]:
    """``10%..100%`` with ``steps`` points, or a comma list (``20%,50%,3MB``)."""
    text = str(text).strip()
    m = re.fullmatch(r"([0-9.]+)%\s*\.\.\s*([0-9.]+)%", text)
    if m:
        try:
            lo, hi = float(m.group(1)), float(m.group(2))
        except ValueError:
            raise SweepError(f"cannot read memory range {text!r}; write e.g. 10%..100%") from None
        if not (0 < lo <= hi and math.isfinite(hi)):
            raise SweepError(f"memory range {text!r} must go from a positive percentage up to a larger one")
        n = steps if steps is not None else 10
        if n < 1:
            raise SweepError(f"--steps must be at least 1 (got {n})")
        check_size(n, 1, 1)
        if n == 1 or lo == hi:
            vals = [hi]
        else:
            vals = [lo + (hi - lo) * j / (n - 1) for j in range(n)]
        return list(dict.fromkeys(f"{v:.4g}%" for v in vals))
    if ".." in text:
        raise SweepError(
            f"cannot read memory range {text!r}; write e.g. 10%..100% (with --steps) or a list like 20%,50%,3MB"
        )
    return parse_list(text, "--memory", example="20%,50%,3MB")


def parse_list(text: str, what: str = "list", example: str = "") -> list[str]:
    """A comma-separated list, without blanks or repeats; an empty one is refused (``--strategies ,``)."""
    items = list(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    if not items:
        hint = f", e.g. {example}" if example else ""
        raise SweepError(f"{what} {str(text)!r} names nothing; give at least one value{hint}")
    return items


def check_grid(spec: SweepSpec, strategies) -> None:
    """Refuse unknown strategies, empty axes, a bad --tile and grids too large to finish."""
    from ..graph.core import GraphError
    from ..graph.tile_option import TILE_AUTO, TILE_OFF, parse_tile_option
    from ..graph.zoo import MODELS

    try:
        spec.tile = parse_tile_option(spec.tile)
    except GraphError as e:
        raise SweepError(str(e)) from None
    if spec.tile not in (TILE_AUTO, TILE_OFF) and spec.model not in MODELS:
        raise SweepError(
            f"--tile {spec.tile} needs a built-in model (--model NAME): {spec.model} does not record the "
            f"shapes, kernels and strides tiling needs; use --tile auto or off"
        )
    for s in spec.strategies:
        if s not in strategies:
            raise SweepError(f"unknown strategy {s!r}; choose from {', '.join(strategies)}")
    for name, axis in (("--strategies", spec.strategies), ("--memory", spec.memories), ("--runtime", spec.runtimes)):
        if not axis:
            raise SweepError(f"{name} names nothing; give at least one value")
    check_size(len(spec.memories), len(spec.runtimes), len(spec.strategies))


def check_size(memories: int, runtimes: int, strategies: int) -> None:
    """Refuse a grid of more than :data:`MAX_POINTS` points, saying how many it has."""
    n = memories * runtimes * strategies
    if n > MAX_POINTS:
        raise SweepError(
            f"the grid has {n:,} points ({memories:,} RAM budgets x {runtimes:,} deadlines x "
            f"{strategies:,} strategies); a sweep holds at most {MAX_POINTS:,}. Use fewer --steps "
            f"(e.g. --steps 10), deadlines or strategies"
        )


def point_tiles(spec_d: dict, min_ram_bytes: int, ram_bytes: int) -> bool:
    """Is a point of this RAM budget solved on a tiled graph?  ``--tile N`` always; ``auto`` below
    the untiled minimum ``min_ram_bytes``; ``off`` (and sweeps from before ``--tile``) and graph files never."""
    from ..graph.zoo import MODELS

    mode = spec_d.get("tile", "off")
    if spec_d["model"] not in MODELS:
        return False  # a graph file has no layer shapes: never tiled
    return mode not in ("auto", "off") or (mode == "auto" and ram_bytes < min_ram_bytes)


def point_key(strategy: str, memory: str, runtime: str) -> str:
    return f"{strategy}|{memory}|{runtime}"


def order_key(row: dict):
    """Cheap fixed rules first, then MILPs from the loosest budgets down (so results can be reused)."""
    s = row["strategy"]
    milp = s in MILP_STRATEGIES
    rank = MILP_STRATEGIES.index(s) if milp else {"keep-all": 0, "chen": 1, "capuchin": 2}.get(s, 3)
    rt = row.get("runtime_budget_s")
    rt = math.inf if rt in (None, "") else float(rt)
    return (1 if milp else 0, -float(row["ram_budget_bytes"]), -rt, rank)
