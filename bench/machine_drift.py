"""How steady is this machine's speed?  The noise floor under every predicted-vs-measured figure.

Two measurements, one torch thread, in this one process:

* **drift**: the CNN's keep-everything training step (aten granularity, batch 8, the executor as
  ``poet train`` runs it) back to back for ``--seconds``, reported as the median busy milliseconds
  of each block of ``--block`` runs.  Nothing else changes between blocks, so their spread is the
  machine's own drift in speed.
* **idle**: the same fixed work (groups of small matrix products) run back to back, and with a
  sleep of 0.5, 2 and 10 ms between groups, as a paging schedule's storage waits leave the CPU idle.
  Reported: the median busy milliseconds of the work itself (the sleeps are not counted).

    python bench/machine_drift.py                  # about 40 s
    python bench/machine_drift.py --seconds 60 --json drift.json

Results and what they mean for ``poet profile``: docs/devices.md, "How fast is this machine?".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from poet.cli.profile import build_model
from poet.execute.executor import Executor
from poet.execute.measure import keep_schedule
from poet.graph.torch_export import export_training_graph
from poet.hardware.profile_clock import RunQueueClock


def busy_now(clock: RunQueueClock) -> float:
    """Seconds of wall time so far minus the waits for a CPU behind other processes."""
    return time.perf_counter() - clock.waited()


def drift(seconds: float, block: int) -> list[float]:
    torch.manual_seed(0)
    model, loss_fn, data = build_model("cnn", 8)
    model.train()
    x, y = data.batch()
    prog = export_training_graph(model, x, loss_fn, y)
    ex, keep = Executor(prog), keep_schedule(prog)
    for _ in range(5):
        ex.run(keep, apply=False)
    blocks = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        runs = [ex.run(keep, apply=False).busy_seconds["total"] for _ in range(block)]
        blocks.append(statistics.median(runs) * 1e3)
    return blocks


def idle(sleeps_ms, groups: int = 20, reps: int = 30) -> dict:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    clock = RunQueueClock()
    out = {}
    try:
        for s in sleeps_ms:
            per = []
            for _ in range(reps):
                busy = 0.0
                for _ in range(groups):
                    t = busy_now(clock)
                    for _ in range(50):
                        torch.mm(a, b)
                    busy += busy_now(clock) - t
                    if s:
                        time.sleep(s / 1e3)
                per.append(busy * 1e3)
            out.setdefault(s, []).append(statistics.median(per))
    finally:
        clock.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=25.0, help="length of the drift measurement (default 25)")
    ap.add_argument("--block", type=int, default=40, help="runs per drift block (default 40)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    blocks = drift(a.seconds, a.block)
    lo, hi, med = min(blocks), max(blocks), statistics.median(blocks)
    print(f"load average {load0}; cnn keep-everything step, median busy ms of each block of {a.block} runs:")
    print("  " + " ".join(f"{x:.1f}" for x in blocks))
    print(
        f"  {len(blocks)} blocks over {a.seconds:.0f} s: median {med:.2f} ms, min {lo:.2f}, max {hi:.2f} "
        f"(max/min {hi / lo:.2f}); blocks more than 15% from the median: "
        f"{sum(abs(x / med - 1) > 0.15 for x in blocks)}/{len(blocks)}"
    )
    sleeps = (0, 0.5, 0, 2, 0, 10, 0)
    res = idle(sleeps)
    print("the same work (1000 64x64 matrix products in groups of 50), busy ms, by sleep between groups:")
    for s, v in res.items():
        print(f"  sleep {s:>4} ms: " + ", ".join(f"{x:.2f}" for x in v))
    if a.json:
        Path(a.json).write_text(json.dumps({"load": load0, "drift_ms": blocks, "idle_ms": res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
