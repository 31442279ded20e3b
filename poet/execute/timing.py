"""Predicted vs measured time of an executed schedule, per instruction kind and per iteration.

Two measured figures per row:

* ``measured_s``: wall-clock seconds (``time.perf_counter``), what a user waits;
* ``busy_s``: wall-clock seconds minus the time this thread waited in the run queue for a CPU
  (Linux ``/proc/thread-self/schedstat``).  On a machine shared with other work the wall clock also
  counts the time the scheduler gave other processes -- after every storage wait, a process that
  computes a lot queues behind them (measured here at load 9 on 2 CPUs: page-ins of 0.2 ms median
  but 8-13 ms in the tail).  The busy figure leaves that out and keeps storage waits, so it is the
  one to compare with a profile measured the same way (``poet profile`` fits busy seconds).  Where
  the OS does not report run-queue waits it equals the wall clock; on an idle machine both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware.profile_clock import RunQueueClock

KINDS = ("compute", "page_out", "page_in", "free", "total")


@dataclass(frozen=True)
class TimingRow:
    kind: str  # compute, page_out, page_in, free or total (the iteration)
    predicted_s: float | None  # None: the schedule's totals do not price this kind separately
    measured_s: float  # wall clock
    cpu_s: float | None  # busy seconds (see module docstring); None when not measured
    ratio: float | None  # measured_s / predicted_s
    cpu_ratio: float | None  # cpu_s / predicted_s

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "predicted_s": self.predicted_s,
            "measured_s": self.measured_s,
            "busy_s": self.cpu_s,
            "ratio": self.ratio,
            "busy_ratio": self.cpu_ratio,
        }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def busy_seconds(wall: dict, busy: dict) -> float:
    """Busy seconds of one iteration (``busy['total']``; summed over kinds if absent)."""
    if "total" in busy:
        return busy["total"]
    return sum(busy.get(k, 0.0) for k in KINDS if k != "total")


def timing_rows(predicted: dict, wall: dict, busy: dict) -> list[TimingRow]:
    """One row per instruction kind and one for the iteration (``total``)."""
    rows = []
    for k in KINDS:
        pred = predicted.get(k)
        m = wall.get(k, 0.0)
        c = busy.get(k) if busy else None
        rows.append(TimingRow(k, pred, m, c, _ratio(m, pred), _ratio(c, pred)))
    return rows


def steady_results(results) -> list:
    """The steps a median is taken over: all but the first when there are at least three (the first
    step allocates gradient buffers and optimizer state and runs with cold caches)."""
    return list(results[1:]) if len(results) >= 3 else list(results)


def median_rows(results) -> list[TimingRow]:
    """Per kind, the median over executed steps (``RunResult``s of one schedule, the first left out
    when there are three or more: :func:`steady_results`) of the measured seconds."""
    import statistics

    if not results:
        return []
    per = [r.timing for r in steady_results(results)]
    rows = []
    for i, first in enumerate(per[0]):
        m = statistics.median(p[i].measured_s for p in per)
        cs = [p[i].cpu_s for p in per if p[i].cpu_s is not None]
        c = statistics.median(cs) if cs else None
        rows.append(
            TimingRow(first.kind, first.predicted_s, m, c, _ratio(m, first.predicted_s), _ratio(c, first.predicted_s))
        )
    return rows


def timing_table(rows: list[TimingRow]) -> str:
    """Predicted vs measured seconds, one line per kind (``total`` is the iteration)."""

    def f(x):
        return "-" if x is None else f"{x:.6f}"

    def r(x):
        return "-" if x is None else f"{x:.3f}"

    out = [
        f"{'time per iteration':<18} {'predicted s':>12} {'measured s':>12} {'ratio':>7} {'busy s':>12} {'ratio':>7}"
    ]
    for t in rows:
        out.append(
            f"{t.kind:<18} {f(t.predicted_s):>12} {f(t.measured_s):>12} {r(t.ratio):>7} "
            f"{f(t.cpu_s):>12} {r(t.cpu_ratio):>7}"
        )
    return "\n".join(out)


__all__ = [
    "KINDS",
    "RunQueueClock",
    "TimingRow",
    "busy_seconds",
    "median_rows",
    "steady_results",
    "timing_rows",
    "timing_table",
]
