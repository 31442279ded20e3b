"""What executing one training step produced and measured, next to what the schedule predicted.

:class:`RunResult` is what :meth:`poet.execute.executor.Executor.run` returns:
the loss, the staged gradients and buffer updates, one :class:`InstructionRecord`
per instruction, and predicted vs measured peak RAM, bytes paged and seconds per
instruction kind (:meth:`RunResult.table` prints them side by side).  Plain
data: reading a result needs none of the executor's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    import torch


@dataclass
class InstructionRecord:
    """One executed instruction: what it was, how long it took, the activation bytes after it."""

    op: str
    node: int
    seconds: float
    live_bytes: int  # activation store after the instruction (unique storages)
    predicted_bytes: int  # the validator's activation bytes after the instruction (no fixed)
    cpu_seconds: float = 0.0  # CPU time of this process during the instruction (time.process_time)
    busy_seconds: float = 0.0  # wall seconds minus run-queue waits (see poet.execute.timing)


@dataclass
class RunResult:
    """What one executed training step produced and measured."""

    loss: torch.Tensor
    grads: dict
    buffer_updates: dict
    records: list
    fixed_ram_bytes: int
    measured_fixed_bytes: int
    peak_live_bytes: int  # activation store peak (unique storages)
    intra_peak_live_bytes: int  # peak including a node's internal temporaries (layer groups)
    predicted_peak_bytes: int  # validator's peak (fixed included)
    budget_bytes: int
    bytes_written: int
    bytes_read: int
    predicted_bytes_paged_out: int
    predicted_bytes_paged_in: int
    seconds: dict
    predicted_seconds: dict
    applied: bool = False
    rng_replays: int = 0  # seeded ops recomputed with their first draw's generator state
    cpu_seconds: dict = field(default_factory=dict)  # CPU seconds per instruction kind (process_time)
    busy_seconds: dict = field(default_factory=dict)  # wall minus run-queue waits per kind (timing.py)

    @property
    def timing(self) -> list:
        """Predicted vs measured seconds per instruction kind and for the iteration (see TimingRow)."""
        from .timing import timing_rows

        return timing_rows(self.predicted_seconds, self.seconds, self.busy_seconds)

    @property
    def measured_peak_bytes(self) -> int:
        """Peak activation bytes measured plus the graph's fixed bytes (compare with the budget)."""
        return self.peak_live_bytes + self.fixed_ram_bytes

    @property
    def within_budget(self) -> bool:
        return self.measured_peak_bytes <= self.budget_bytes

    def table(self) -> str:
        """Predicted vs measured, side by side."""
        rows = [
            ("", "predicted", "measured"),
            (
                "peak RAM (fixed + activations)",
                fmt_bytes(self.predicted_peak_bytes),
                fmt_bytes(self.measured_peak_bytes),
            ),
            ("  exact bytes", str(self.predicted_peak_bytes), str(self.measured_peak_bytes)),
            ("budget", fmt_bytes(self.budget_bytes), "ok" if self.within_budget else "EXCEEDED"),
            ("bytes paged out", str(self.predicted_bytes_paged_out), str(self.bytes_written)),
            ("bytes paged in", str(self.predicted_bytes_paged_in), str(self.bytes_read)),
        ]
        for t in self.timing:
            meas = fmt_seconds(t.measured_s) + (f" (x{t.ratio:.2f})" if t.ratio is not None else "")
            if t.cpu_s is not None:
                meas += f"; busy {fmt_seconds(t.cpu_s)}" + (f" (x{t.cpu_ratio:.2f})" if t.cpu_ratio is not None else "")
            rows.append((f"time {t.kind}", fmt_seconds(t.predicted_s) if t.predicted_s is not None else "-", meas))
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        return "\n".join(f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows)
