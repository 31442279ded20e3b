"""``poet train``: fine-tune a model for ``--steps`` steps with the executed schedule, optionally
checked against plain PyTorch from the same seed.

``cmd_train`` reads as its steps: load and plan (``plan.py``'s helpers), train (or, with
``--target``, compile and train in C: ``train_target.py``), report the timing, check.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from .plan import add_plan_options, load_model, make_optimizer, make_plan, user_errors

TRAIN_EXAMPLE = "poet train --model cnn --device m4 --memory 256KB --strategy poet --steps 20 --check"


def register(subparsers) -> None:
    from ..units import number_option
    from .train_target import add_train_options

    t = subparsers.add_parser(
        "train", help="fine-tune a model for N steps with the executed schedule", epilog=f"Example: {TRAIN_EXAMPLE}"
    )
    add_plan_options(t)
    t.add_argument(
        "--steps", type=number_option("int", "a whole number of training steps, 1 or more", "20", minimum=1), default=20
    )
    t.add_argument(
        "--check",
        action="store_true",
        help="also train with plain PyTorch from the same seed and compare the loss curves bit for bit",
    )
    t.add_argument("--quiet", action="store_true")
    add_train_options(t)
    t.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (losses, peaks, predicted and measured seconds) instead of text",
    )
    t.set_defaults(func=cmd_train)


@dataclass
class StartingPoint:
    """What ``--check``'s plain PyTorch run starts from: the untrained model, the data generator's
    state and torch's random state, taken before the first batch is drawn."""

    reference: object  # a deep copy of the model, or None without --check
    data_state: object  # the data generator's state, or None when the data has none
    rng_state: object


@dataclass
class TrainedSteps:
    """What the training loop measured: one RunResult per step, each step's loss, the peak RAM."""

    losses: list
    results: list
    peak_bytes: int
    seconds: float


def cmd_train(a) -> int:
    if a.json:  # stdout carries the JSON object only
        a.quiet = True
    say = (lambda *args, **kw: None) if a.json else print
    try:
        model, loss_fn, data = load_model(a)
        model.train()
        start = starting_point(a, model, data)
        opt = make_optimizer(a, model)
        inputs, targets = data.batch()
        pl = make_plan(a, model, loss_fn, inputs, targets, opt)
        say(pl)
        if not pl.feasible:
            emit_json(a, infeasible_report(a, pl))
            return 3
        if getattr(a, "target", None) is not None:  # the plan compiled to C, trained there
            from .train_target import train_on_target

            return train_on_target(a, pl, data, tuple(inputs) + tuple(targets))
        trained = train_steps(a, pl, data, opt, (inputs, targets), say)
        report = timing_report(a, pl, trained, say)
        rc = check_against_plain_pytorch(a, pl, model, loss_fn, data, start, trained, report, say) if a.check else 0
        emit_json(a, report)
        return rc
    except user_errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2


def starting_point(a, model, data) -> StartingPoint:
    import copy

    import torch

    return StartingPoint(
        reference=copy.deepcopy(model) if a.check else None,
        data_state=data.g.get_state() if hasattr(data, "g") else None,
        rng_state=torch.get_rng_state(),
    )


def infeasible_report(a, pl) -> dict:
    return {
        "model": a.model,
        "device": pl.device,
        "strategy": a.strategy,
        "status": pl.schedule.status,
        "message": pl.schedule.report.message,
    }


def train_steps(a, pl, data, opt, first_batch, say) -> TrainedSteps:
    """``--steps`` training steps with the plan, the first on the batch it was traced with."""
    from ..units import fmt_bytes

    losses, results, peak = [], [], 0
    t0 = time.perf_counter()
    batch = first_batch
    for step in range(a.steps):
        if step > 0:
            batch = data.batch()
        res = pl.train_step(batch[0], batch[1], opt)
        losses.append(res.loss.item())
        results.append(res)
        peak = max(peak, res.measured_peak_bytes)
        if not a.quiet:
            say(
                f"step {step + 1:4d}/{a.steps}  loss {losses[-1]:.6f}  measured peak "
                f"{fmt_bytes(res.measured_peak_bytes)} (budget {fmt_bytes(res.budget_bytes)})  "
                f"paged {fmt_bytes(res.bytes_written)} out / {fmt_bytes(res.bytes_read)} in  "
                f"{res.seconds['total']:.3f} s",
                flush=True,
            )
    return TrainedSteps(losses, results, peak, time.perf_counter() - t0)


def timing_report(a, pl, trained: TrainedSteps, say) -> dict:
    """Say what the steps took against what the plan predicted, and return the JSON report."""
    import statistics

    import torch

    from ..execute.timing import busy_seconds, median_rows, steady_results, timing_table
    from ..units import fmt_bytes

    losses, results, peak = trained.losses, trained.results, trained.peak_bytes
    say(
        f"trained {a.steps} steps in {trained.seconds:.2f} s; loss {losses[0]:.6f} -> {losses[-1]:.6f}; "
        f"measured peak {fmt_bytes(peak)} <= budget {fmt_bytes(pl.schedule.budget.ram_bytes)}: "
        f"{peak <= pl.schedule.budget.ram_bytes}"
    )
    timing = median_rows(results)
    steady = [busy_seconds(r.seconds, r.busy_seconds) for r in steady_results(results)]
    timed = len(steady)
    say(
        f"predicted vs measured (median of {timed} steps{', the first left out' if timed < len(results) else ''}; "
        f"busy = wall seconds minus waits for a CPU behind other processes, see docs/devices.md):"
    )
    say(timing_table(timing))
    if timed >= 2:
        mid = statistics.median(steady)
        say(
            f"the timed steps took {min(steady) * 1e3:.2f}-{max(steady) * 1e3:.2f} ms busy "
            f"({(min(steady) / mid - 1):+.0%} to {(max(steady) / mid - 1):+.0%} of their median): "
            f"how steady this machine ran; more --steps average more of it"
        )
    if not pl.threads:  # not a measured profile: its time is another machine's
        say(
            f"note: {pl.device} is not a profile of this machine, so the ratios compare two machines; "
            f"`poet profile --model {a.model} --out host.toml` then --device host.toml predicts this one"
        )
    return {
        "model": a.model,
        "device": pl.device,
        "strategy": a.strategy,
        "status": pl.schedule.status,
        "costs": a.costs,
        "steps": a.steps,
        "losses": losses,
        "measured_peak_bytes": peak,
        "predicted_peak_bytes": pl.totals.peak_ram_bytes,
        "budget_bytes": pl.schedule.budget.ram_bytes,
        "torch_threads": pl.threads or torch.get_num_threads(),
        "device_measured": bool(pl.threads),  # a `poet profile` of a machine, not a built-in device
        "per_iteration": next(t.as_dict() for t in timing if t.kind == "total"),
        "per_kind": [t.as_dict() for t in timing if t.kind != "total"],
        "step_seconds": [r.seconds["total"] for r in results],
        "step_busy_seconds": [busy_seconds(r.seconds, r.busy_seconds) for r in results],
        "timed_steps": timed,  # the medians above: the steps after the first (when >= 3)
    }


def plain_losses(a, pl, loss_fn, data, start: StartingPoint) -> list:
    """The loss curve of plain PyTorch from the same initial weights, data and generator state."""
    import torch

    if start.data_state is not None:
        data.g.set_state(start.data_state)
    torch.set_rng_state(start.rng_state)
    ropt = make_optimizer(a, start.reference)
    plain = []
    threads0 = torch.get_num_threads()
    if pl.threads:  # the thread count the plan ran with: same reduction order
        torch.set_num_threads(pl.threads)
    try:
        for _ in range(a.steps):
            x, y = data.batch()
            ropt.zero_grad(set_to_none=True)
            loss = loss_fn(start.reference(*x), *y)
            loss.backward()
            ropt.step()
            plain.append(loss.item())
    finally:
        torch.set_num_threads(threads0)
    return plain


def check_against_plain_pytorch(a, pl, model, loss_fn, data, start, trained, report: dict, say) -> int:
    """``--check``: bit for bit against plain PyTorch (within the documented bound for a tiled plan,
    whose tiles sum in another order); adds ``report["check"]``, returns the exit code."""
    import torch

    losses = trained.losses
    plain = plain_losses(a, pl, loss_fn, data, start)
    if pl.tiling is not None and pl.tiling.tiled:
        from ..execute.tiled import TRAINED_LOSS_BOUND, TRAINED_PARAM_BOUND, parameter_difference

        loss_rel = max(abs(u - v) / max(abs(v), 1e-12) for u, v in zip(losses, plain))
        param_rel = parameter_difference(model.parameters(), start.reference.parameters())
        ok = loss_rel <= TRAINED_LOSS_BOUND and param_rel <= TRAINED_PARAM_BOUND
        say(
            f"plain PyTorch (tiled plan: summation order differs): loss curve within "
            f"{loss_rel:.2e} (bound {TRAINED_LOSS_BOUND:.0e}), final parameters within {param_rel:.2e} "
            f"of the model's largest parameter (bound {TRAINED_PARAM_BOUND:.0e}): "
            f"{'match within the bound' if ok else 'EXCEED the bound'}"
        )
        report["check"] = {"loss_curve_relative": loss_rel, "parameters_relative": param_rel, "within_bound": ok}
        return 0 if ok else 1
    same = plain == losses
    params_same = all(torch.equal(p, q) for p, q in zip(model.parameters(), start.reference.parameters()))
    say(f"plain PyTorch loss curve identical: {same}; final parameters identical: {params_same}")
    report["check"] = {"loss_curve_identical": same, "parameters_identical": params_same}
    if same and params_same:
        return 0
    for i, (u, v) in enumerate(zip(losses, plain)):
        if u != v:
            say(f"  first difference at step {i + 1}: {u!r} vs {v!r}")
            break
    return 1


def emit_json(a, report: dict) -> None:
    if a.json:
        import json

        print(json.dumps(report, indent=1))
