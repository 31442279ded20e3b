"""Networks trained on the emulated Cortex-M4, one row per model and budget: the table of docs/cbackend.md.

Each row is ``poet train --model M --device m4 --memory B --target qemu-m4 --steps N --check --json``
(SGD with momentum 0.9, generated data), untiled and below the untiled minimum: the schedule's peak
and the arena (activations), the RAM region's parts from the link (stack, data, bss), flash, bytes
paged per step, instructions per step predicted (per-node costs measured on the emulator) and
measured, and the largest errors against PyTorch (first step's gradients relative to each tensor's
scale; the loss curve).

    PYTHONPATH=. python bench/mcu_table.py [--steps 5] [--cases cnn,cnn-200KB,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CASES = {
    "cnn": ("cnn", "100%"),
    "cnn-200KB": ("cnn", "200KB"),
    "depthwise": ("examples.mcu_models:depthwise", "100%"),
    "depthwise-80KB": ("examples.mcu_models:depthwise", "80KB"),
    "transformer": ("examples.mcu_models:transformer", "100%"),
    "transformer-120KB": ("examples.mcu_models:transformer", "120KB"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--time-limit", default="60")
    a = ap.parse_args()
    rows = []
    for name in a.cases.split(","):
        model, memory = CASES[name]
        cmd = [
            sys.executable,
            "-m",
            "poet",
            "train",
            "--model",
            model,
            "--device",
            "m4",
            "--memory",
            memory,
            "--target",
            "qemu-m4",
            "--steps",
            str(a.steps),
            "--check",
            "--json",
            "--time-limit",
            a.time_limit,
        ]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        secs = time.monotonic() - t0
        try:
            rep = json.loads(r.stdout[r.stdout.index("{") :])
        except ValueError:
            print(f"{name}: exit {r.returncode}: {(r.stdout + r.stderr).strip().splitlines()[-1:]}", flush=True)
            continue
        print(f"{name}: exit {r.returncode} in {secs:.0f} s: {json.dumps(rep)}", flush=True)
        rows.append((name, rep))
    print(
        "\n| model, budget | nodes | schedule peak | arena | stack | data | bss | flash | paged out/in per step "
        "| instructions per step predicted / measured | max gradient error | loss curve |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for name, rep in rows:
        m, ins, chk = rep["memory"], rep.get("instructions") or {}, rep.get("check") or {}
        pred = sum((ins.get("predicted") or {}).values())
        meas = sum((ins.get("measured") or {}).values())
        print(
            f"| {name} ({rep['budget_bytes']:,} B{', tiled' if rep['tiled'] else ''}) | {rep['nodes']} "
            f"| {rep['schedule_peak_bytes']:,} | {rep['arena_bytes']:,} | {m['stack']:,} | {m['data']:,} "
            f"| {m['bss']:,} | {m['flash']:,} | {rep['bytes_paged_out']:,} / {rep['bytes_paged_in']:,} "
            f"| {pred:,.0f} / {meas:,.0f} ({ins.get('total_error', 0):+.2%}) "
            f"| {chk.get('worst_grad', float('nan')):.1e} | {chk.get('worst_loss', float('nan')):.1e} |"
        )


if __name__ == "__main__":
    main()
