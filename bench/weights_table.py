"""What counting the weights does: the docs table of docs/weights.md.

For each model, device and RAM budget, the minimum-energy schedule (no deadline) under ``--weights
flash`` (the paper's setting: the parameters are free) and ``--weights stream`` (weights and weight
gradients in storage, every use read, the SGD update streamed): energy and time per step, the weight
traffic's share of the energy, and the bytes the step reads and writes (weights and activation pages).

    PYTHONPATH=. nice -n 10 python bench/weights_table.py [--models resnet18_cifar,vgg16_cifar,transformer]
        [--devices m0,m4] [--budgets 32768,262144] [--time-limit 30]

Each schedule is the validator's replay (``poet.solve`` returns nothing else); ``*``: not proven
optimal within the time limit (the gap is printed).
"""

from __future__ import annotations

import argparse
import time

from poet.solve.api import plan_and_solve
from poet.units import fmt_bytes, fmt_energy, fmt_seconds


def row(model: str, device: str, budget: int, weights: str, limit: float) -> str:
    t0 = time.perf_counter()
    try:
        solved = plan_and_solve(model, device, memory=budget, weights=weights, time_limit=limit, threads=1)
    except Exception as e:  # a budget no tiling reaches, said in the table
        return f"| {model} | {device} | {budget:,} | {weights} | error: {str(e)[:80]} | | | | | |"
    s = solved.schedule
    took = time.perf_counter() - t0
    if not s.feasible:
        why = (s.report.message or s.status)[:90].replace("|", "/")
        return f"| {model} | {device} | {budget:,} | {weights} | {s.status}: {why} | | | | | {took:.0f} s |"
    t = s.totals
    star = "" if s.status == "optimal" else f"* (gap {s.report.gap:.2%})"
    share = f"{t.weight_energy_j / t.energy_j:.1%}" if weights == "stream" else "not counted"
    read = t.weight_read_bytes + t.bytes_paged_in
    wrote = t.weight_write_bytes + t.bytes_paged_out
    return (
        f"| {model} | {device} | {budget:,} | {weights} | {fmt_energy(t.energy_j)}{star} | {fmt_seconds(t.runtime_s)} "
        f"| {share} | {fmt_bytes(read)} ({fmt_bytes(t.weight_read_bytes)} weights) "
        f"| {fmt_bytes(wrote)} ({fmt_bytes(t.weight_write_bytes)} weights) | {took:.0f} s |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18_cifar,vgg16_cifar,transformer")
    ap.add_argument("--devices", default="m0,m4")
    ap.add_argument("--budgets", default="32768,262144")
    ap.add_argument("--time-limit", type=float, default=30.0)
    a = ap.parse_args()
    print(
        "| model | device | RAM budget (B) | weights | energy per step | time per step | weight traffic share "
        "| bytes read (of which weights) | bytes written (of which weights) | solve |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for device in a.devices.split(","):
            for budget in (int(b) for b in a.budgets.split(",")):
                for weights in ("flash", "stream"):
                    print(row(model, device, budget, weights, a.time_limit), flush=True)


if __name__ == "__main__":
    main()
