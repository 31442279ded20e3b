"""Tiled training below the untiled minimum: measured peak and the numerics bound (docs/torch.md).

For each demo model (cnn, dwnet, gpt) the budget is set to ``FRACTION`` of the way from
fixed RAM to the untiled minimum, so no untiled schedule exists.  ``poet.plan`` tiles the
step, and ``plan.train_step`` trains ``STEPS`` steps next to plain PyTorch from the same
weights and data.  Printed per model: the minimum RAM untiled and tiled, nodes before and
after, the measured peak against the budget, the largest relative gradient difference of
the first step (max |g_tiled - g| / max |g| per parameter), and after training the largest
relative loss difference and final-parameter difference.

    PYTHONPATH=. python examples/tiled_numerics.py [--steps 20] [--fraction 0.6] [--models cnn,dwnet,gpt]
"""

from __future__ import annotations

import argparse
import copy

import torch

import poet
from poet import demo_models as models
from poet.execute.tiled import parameter_difference, relative_difference


def run(name: str, steps: int, fraction: float, time_limit: float) -> dict:
    model, loss_fn, data = models.build(name, dropout=0.0)
    model.train()
    reference = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ropt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    g0 = data.g.get_state()
    inputs, targets = data.batch()
    probe = poet.plan(
        model,
        inputs,
        loss_fn,
        targets=targets,
        device="m4",
        memory="100%",
        strategy="keep-all",
        optimizer=opt,
        tile="off",
    )
    lo, fixed = probe.graph.min_ram_bytes(), probe.graph.fixed_ram_bytes
    budget = int(fixed + fraction * (lo - fixed))
    pl = poet.plan(
        model,
        inputs,
        loss_fn,
        targets=targets,
        device="m4",
        memory=budget,
        strategy="poet",
        optimizer=opt,
        time_limit=time_limit,
    )
    row = {
        "model": name,
        "untiled_min": lo,
        "budget": budget,
        "fixed": fixed,
        "status": pl.schedule.status,
        "tiled_min": pl.tiling.tiled_min_bytes if pl.tiling else None,
        "nodes_before": len(probe.graph),
        "nodes_after": len(pl.graph),
        "tiles": pl.tiling.report.count if pl.tiling and pl.tiling.tiled else 0,
    }
    if not pl.feasible:
        return row
    data.g.set_state(g0)
    peak, first_grad, losses, plain = 0, 0.0, [], []
    for step in range(steps):
        x, y = data.batch()
        res = pl.train_step(x, y, optimizer=None)
        if step == 0:  # gradients of the same weights: the one-step bound
            ropt.zero_grad(set_to_none=True)
            lref = loss_fn(reference(*x), *y)
            lref.backward()
            first_grad = max(
                relative_difference(p.grad, q.grad) for p, q in zip(model.parameters(), reference.parameters())
            )
            first_loss = relative_difference(res.loss, lref)
        else:
            ropt.zero_grad(set_to_none=True)
            lref = loss_fn(reference(*x), *y)
            lref.backward()
        opt.step()
        ropt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(res.loss.item())
        plain.append(lref.item())
        peak = max(peak, res.measured_peak_bytes)
    row.update(
        peak=peak,
        first_step_grad=first_grad,
        first_step_loss=first_loss,
        loss_curve=max(abs(a - b) / abs(b) for a, b in zip(losses, plain)),
        params=max(
            (relative_difference(p, q), n) for (n, p), q in zip(model.named_parameters(), reference.parameters())
        ),
        model_params=parameter_difference(model.parameters(), reference.parameters()),
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--models", default="cnn,dwnet,gpt")
    ap.add_argument("--time-limit", type=float, default=30.0)
    a = ap.parse_args()
    torch.manual_seed(0)
    for name in a.models.split(","):
        r = run(name, a.steps, a.fraction, a.time_limit)
        print(
            f"{r['model']}: untiled min {r['untiled_min']} B, tiled min {r['tiled_min']} B, budget {r['budget']} B "
            f"(fixed {r['fixed']} B); {r['nodes_before']} -> {r['nodes_after']} nodes, {r['tiles']} tiles; "
            f"{r['status']}"
        )
        if "peak" in r:
            print(
                f"  measured peak {r['peak']} B <= budget: {r['peak'] <= r['budget']}; step 1: gradients within "
                f"{r['first_step_grad']:.2e}, loss within {r['first_step_loss']:.2e}; after {a.steps} steps: loss "
                f"curve within {r['loss_curve']:.2e}, parameters within {r['model_params']:.2e} of the largest "
                f"parameter (per tensor: {r['params'][0]:.2e}, {r['params'][1]})"
            )


if __name__ == "__main__":
    main()
