"""Predicted beside measured instructions of compiled training steps on the emulated Cortex-M4.

For each model and RAM budget: plan as ``poet train`` does (``--device``, tiling when the budget is
below the untiled minimum), compile the plan to C for ``qemu-m4``, run ``--steps`` training steps on
batches from the model's data (SGD, momentum 0.9, as poet train), and print the comparison every
qemu-m4 run prints: instructions per iteration and per kind, predicted from per-node costs measured
on the emulator (poet/cbackend/instructions.py) beside those the run executed.  The prediction's
measurements use the model's example batch; later iterations compute on other batches and updated
weights, so data-dependent kernels (ReLU, max pooling, dropout) move their counts a little.

    python bench/qemu_instructions.py                              # cnn at 400KB (untiled) and 200KB (tiled)
    python bench/qemu_instructions.py --model mlp --memory 80% --steps 3

Results: docs/mcu.md, "Predicted beside measured".
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import poet
from poet.cbackend import qemu_m4
from poet.cbackend.target_types import RUNTIME_RAM_BYTES
from poet.demo_models import load

ROWS: list[str] = []
HEAD = (
    "| model | budget | tiled | schedule (recomputes, page-outs, page-ins) | instructions per step, predicted | "
    "measured | error, first step | error, mean | stack used / reserved (B) |"
)


def run(model_name: str, memory: str, steps: int, device: str, time_limit: float, check: bool, say) -> None:
    torch.manual_seed(0)
    model, loss_fn, data = load(model_name, batch_size=8, seed=0, dropout=0.1)
    model.train()
    batches = []
    for _ in range(steps):
        inputs, targets = data.batch()
        batches.append(tuple(inputs) + tuple(targets))
    x, y = batches[0][: len(inputs)], batches[0][len(inputs) :]
    t0 = time.perf_counter()
    pl = poet.plan(
        model, x, loss_fn, targets=y, device=device, memory=memory, optimizer="sgd", time_limit=time_limit,
        runtime_ram_bytes=RUNTIME_RAM_BYTES,
    )  # fmt: skip
    if not pl.feasible:
        print(f"{model_name} at {memory}: no schedule ({pl.schedule.status})")
        return
    tiled = "tiled" if pl.tiling is not None and pl.tiling.tiled else "untiled"
    secs = time.perf_counter() - t0
    say(f"{model_name} at {memory}: planned in {secs:.1f} s ({tiled}, {len(pl.steps)} instructions)")
    with tempfile.TemporaryDirectory(prefix="poet-bench-") as tmp:
        t0 = time.perf_counter()
        res = pl.compile(
            "qemu-m4", Path(tmp) / "p", run=True, check=check, batches=batches, lr=0.05, momentum=0.9, progress=say
        )
        wall = time.perf_counter() - t0
    if not res.ok or res.instructions is None:
        print(f"{model_name} at {memory}: the run failed: {res.run.problem() if res.run else 'not run'}")
        return
    t = res.schedule.totals
    print(
        f"\n## {model_name} at {memory} ({tiled}): {len(res.schedule.steps)} instructions per iteration "
        f"({t.recomputes} recomputes, {t.page_outs} page-outs, {t.page_ins} page-ins), {steps} iterations; "
        f"{res.build.memory.describe()}"
    )
    print("\n".join(res.instructions.lines()))
    errs = [
        (sum(p.values()) - sum(m.values())) / sum(m.values())
        for p, m in zip(res.instructions.predicted, res.instructions.measured)
    ]
    print(f"  error per iteration: {', '.join(f'{e:+.3%}' for e in errs)}")
    cmp = res.instructions
    pred = sum(sum(p.values()) for p in cmp.predicted) / len(cmp.predicted)
    meas = sum(sum(m.values()) for m in cmp.measured) / len(cmp.measured)
    first = (sum(cmp.predicted[0].values()) - sum(cmp.measured[0].values())) / sum(cmp.measured[0].values())
    ROWS.append(
        f"| {model_name} | {memory} | {tiled} | {len(res.schedule.steps)} ({t.recomputes}, {t.page_outs}, "
        f"{t.page_ins}) | {pred:,.0f} | {meas:,.0f} | {first:+.3%} | {(pred - meas) / meas:+.2%} | "
        f"{res.run.stack_used or 0:,} / {res.build.memory.stack:,} |"
    )
    if res.check is not None:
        print("\n".join(res.check.lines()))
    secs = res.seconds
    print(
        f"  seconds: build {secs.get('build', 0):.1f}, run {secs.get('run', 0):.1f}, per-node measurement "
        f"{secs.get('instructions', 0):.1f} (cached after the first time), all {wall:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--memory", default="400KB,200KB", help="RAM budgets, comma-separated")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="m4", help="the device the plan is priced on")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--check", action="store_true", help="also compare with PyTorch (and print how close)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    why = qemu_m4.missing()
    if why:
        raise SystemExit(why)
    say = (lambda m: None) if args.quiet else (lambda m: print(f"  .. {m}", file=sys.stderr, flush=True))
    for model in args.model.split(","):
        for memory in args.memory.split(","):
            run(model, memory, args.steps, args.device, args.time_limit, args.check, say)
    print("\n" + HEAD + "\n|" + "---|" * HEAD.count(" | ") + "---|")
    print("\n".join(ROWS))


if __name__ == "__main__":
    main()
