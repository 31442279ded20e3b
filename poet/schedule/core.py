"""The one schedule representation: an ordered list of instructions on node ids.

Instructions (``op``):

* ``compute``  -- run node ``node``; every input must be in RAM; the output
  occupies ``ram_bytes`` from now on.  Computing a node again is a recompute.
* ``page_out`` -- copy a RAM-resident output to storage (it stays in RAM).
* ``page_in``  -- copy a stored output back into RAM (occupies RAM again).
* ``free``     -- drop a RAM-resident output.

Steps may carry the solver ``stage`` they belong to; the ``overlap`` paging
model (paging of a stage runs concurrently with its compute) needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from ..graph.core import CostedGraph
from .report import SolveReport


class Op(StrEnum):
    """The instruction vocabulary.  A member is its string (``Op.COMPUTE == "compute"``), so a step read
    from a file, with a plain string, compares equal, and the JSON form is the string."""

    COMPUTE = "compute"
    PAGE_OUT = "page_out"
    PAGE_IN = "page_in"
    FREE = "free"


OPS = tuple(op.value for op in Op)

# How paging time counts against the runtime budget.
PAGING_SERIAL = "serial"  # paging stalls compute: times add (default; honest without DMA)
PAGING_OVERLAP = "overlap"  # each stage takes max(compute, paging) time (DMA within a stage)
PAGING_HIDDEN = "hidden"  # paging is free in time (the original POET assumption)
PAGING_MODES = (PAGING_SERIAL, PAGING_OVERLAP, PAGING_HIDDEN)

# Solver status vocabulary, shared by every strategy.
OPTIMAL = "optimal"  # proven within the requested relative gap
FEASIBLE = "feasible"  # a valid schedule; optimality not proven (gap reported)
INFEASIBLE = "infeasible"  # proven: no schedule meets the budgets
NO_SOLUTION = "no_solution"  # stopped (time limit) before any schedule was found
HEURISTIC = "heuristic"  # a fixed-rule baseline: valid, no optimality claim
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, NO_SOLUTION, HEURISTIC)


@dataclass(frozen=True, slots=True)  # slots: 56 bytes a step, not 352 (a tiled BERT has millions)
class Step:
    op: str  # an Op (read from a file: the same string, checked by the validator)
    node: int
    stage: int | None = None


@dataclass(frozen=True)
class Budget:
    ram_bytes: int
    runtime_s: float | None = None  # None: no deadline
    paging_time: str = PAGING_SERIAL


@dataclass(frozen=True)
class Totals:
    """What a schedule costs, as replayed by the validator."""

    energy_j: float
    compute_energy_j: float
    paging_energy_j: float
    runtime_s: float
    compute_time_s: float
    paging_time_s: float
    peak_ram_bytes: int
    computes: int
    recomputes: int
    page_ins: int
    page_outs: int
    bytes_paged_in: int
    bytes_paged_out: int
    # weight traffic (``--weights stream``; 0 otherwise): part of compute_* above, every computation's
    # reads and writes of weights and gradients plus the SGD update (poet.graph.weight_traffic)
    weight_energy_j: float = 0.0
    weight_time_s: float = 0.0
    weight_read_bytes: int = 0
    weight_write_bytes: int = 0
    weight_reads: int = 0
    weight_writes: int = 0

    @property
    def arithmetic_energy_j(self) -> float:
        """Compute energy less the weight traffic folded into it."""
        return max(0.0, self.compute_energy_j - self.weight_energy_j)

    @property
    def arithmetic_time_s(self) -> float:
        return max(0.0, self.compute_time_s - self.weight_time_s)


@dataclass
class Schedule:
    """A schedule for a costed graph under a budget, with its totals and solver facts.

    ``steps`` is empty when ``status`` is infeasible or no_solution; then
    ``report`` explains why and, where computed, the smallest feasible budgets.
    It is data only: :func:`poet.schedule.save_schedule` writes it, :func:`poet.schedule.simulate`
    replays it (``ram_after_step``).
    """

    graph: CostedGraph
    budget: Budget
    steps: tuple[Step, ...]
    status: str
    strategy: str
    totals: Totals | None = None
    report: SolveReport = field(default_factory=SolveReport)

    @property
    def solver(self) -> Mapping[str, Any]:
        """The report in its JSON form (the schedule file's ``"solver"`` object), read-only.

        Kept for code written against the dict this used to be; read ``report``'s fields instead."""
        return MappingProxyType(self.report.to_dict())

    @property
    def feasible(self) -> bool:
        return bool(self.steps) and self.status in (OPTIMAL, FEASIBLE, HEURISTIC)

    @property
    def energy_j(self) -> float:
        return self.totals.energy_j if self.totals else float("nan")

    def with_(self, **kw) -> Schedule:
        return replace(self, **kw)
