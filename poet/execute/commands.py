"""``poet plan`` and ``poet train``: plan and run schedules of real PyTorch models.

``register(subparsers)`` adds both subcommands; torch is imported only when
one of them runs.
"""

from __future__ import annotations

import sys
import time

TRAIN_EXAMPLE = "poet train --model cnn --device m4 --memory 256KB --strategy poet --steps 20 --check"
PLAN_EXAMPLE = "poet plan --model bert --device m4 --memory 60% --strategy paging --run --out bert-plan.json"


def _common(p) -> None:
    from ..units import SECONDS, number_option
    from .model_options import add_model_options

    src = p.add_argument_group("model")
    add_model_options(src)
    src.add_argument(
        "--granularity",
        choices=["aten", "layer"],
        default="aten",
        help="aten: every aten op a node (default); layer: ops grouped by module",
    )
    b = p.add_argument_group("budgets")
    b.add_argument(
        "--device",
        default="m4",
        help="device profile for the cost model: a name (see `poet devices`) or a .toml file, e.g. one "
        "written by `poet profile`",
    )
    b.add_argument(
        "--costs",
        choices=["model", "measured"],
        default="model",
        help="model: price nodes with the device's cost model (default); measured: time every node of "
        "this model on this machine, paging priced by the device's storage",
    )
    b.add_argument(
        "--memory",
        default="100%",
        help="RAM budget incl. params, grads, buffers, batch, optimizer state: 256KB, 1MB, or "
        "a percentage of the way from fixed bytes to the keep-everything peak (default 100%%)",
    )
    b.add_argument("--runtime", default=None, help="deadline: 2x (of one plain step), 2.5s; default none")
    b.add_argument("--paging-time", choices=["serial", "overlap", "hidden"], default="serial")
    b.add_argument(
        "--tile",
        default="auto",
        help="auto (default): split ops into tiles when the budget is below the untiled minimum; "
        "off: never; N: force N tiles (tiled gradients match within docs/torch.md's bound)",
    )
    b.add_argument("--strategy", default="poet", help="poet (default), remat, paging, keep-all, chen")
    b.add_argument("--time-limit", type=SECONDS, default=60.0, help="solver seconds (default 60)")
    b.add_argument(
        "--no-cache",
        action="store_true",
        help="solve afresh: neither reuse nor keep an answer in the cache (docs/pipeline.md, Cache)",
    )
    r = p.add_argument_group("execution")
    r.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    r.add_argument(
        "--lr", type=number_option("float", "a finite learning rate >= 0", "0.05", minimum=0.0), default=0.05
    )
    r.add_argument("--paging-dir", default=None, help="directory for paged tensors (default: a temp dir)")
    r.add_argument("--swap-file", default=None, help="one swap file instead of a directory of pages")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="trace a PyTorch model, schedule its training step, optionally run it",
        epilog=f"Example: {PLAN_EXAMPLE}",
    )
    _common(p)
    p.add_argument("--run", action="store_true", help="execute one step and print predicted vs measured")
    p.add_argument("--out", help="write the schedule (poet-schedule/1 JSON) here")
    p.add_argument("--graph-out", help="write the costed graph (poet-graph/1 JSON) here, e.g. with --costs measured")
    p.add_argument("--force", action="store_true", help="overwrite --out / --graph-out")
    p.add_argument("--quiet", action="store_true", help="no progress line while the solver runs")
    p.add_argument(
        "--target",
        choices=("host", "qemu-m4"),
        default=None,
        help="plan for a step compiled to C on this target (poet compile): the budget keeps room for the "
        "compiled step's stack and statics",
    )
    p.set_defaults(func=cmd_plan)

    t = subparsers.add_parser(
        "train", help="fine-tune a model for N steps with the executed schedule", epilog=f"Example: {TRAIN_EXAMPLE}"
    )
    _common(t)
    from ..units import number_option

    t.add_argument(
        "--steps", type=number_option("int", "a whole number of training steps, 1 or more", "20", minimum=1), default=20
    )
    t.add_argument(
        "--check",
        action="store_true",
        help="also train with plain PyTorch from the same seed and compare the loss curves bit for bit",
    )
    t.add_argument("--quiet", action="store_true")
    from ..cbackend.commands import add_train_options

    add_train_options(t)
    t.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (losses, peaks, predicted and measured seconds) instead of text",
    )
    t.set_defaults(func=cmd_train)


def _load(a):
    from .models import load

    return load(a.model, batch_size=a.batch_size, seed=a.seed, dropout=a.dropout)


def _optimizer(a, model):
    import torch

    if a.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=a.lr)
    return torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)


def _make_plan(a, model, loss_fn, inputs, targets, optimizer):
    from ..console import Progress, ctrl_c_stops_the_solve, warn_uncached
    from ..planner import plan

    prog = Progress(enabled=not getattr(a, "quiet", False))
    try:
        with ctrl_c_stops_the_solve() as stop:
            pl = plan(
                model,
                inputs,
                loss_fn,
                targets=targets,
                device=a.device,
                memory=a.memory,
                runtime=a.runtime,
                strategy=a.strategy,
                granularity=a.granularity,
                paging_time=a.paging_time,
                optimizer=optimizer,
                time_limit=a.time_limit,
                paging_dir=a.paging_dir,
                swap_file=a.swap_file,
                cache=not a.no_cache,
                progress=prog,
                stop=stop,
                costs=a.costs,
                tile=a.tile,
                runtime_ram_bytes=_runtime_ram(a),
            )
    finally:
        prog.done()
    warn_uncached(pl.schedule)
    return pl


def _runtime_ram(a) -> int:
    """RAM a compiled step (poet train --target) holds besides its tensors: the plan leaves room for it."""
    if getattr(a, "target", None) is None:
        return 0
    from ..cbackend.commands import RUNTIME_RAM_BYTES

    return RUNTIME_RAM_BYTES


def _errors():
    from ..graph.torch_export import ExtractionError
    from ..units import BudgetError
    from .executor import ExecutionError
    from .store import PagingError

    # OSError: a file that could not be written or read (--out on a full disk, a paging directory)
    return (ExtractionError, ExecutionError, PagingError, BudgetError, ValueError, OSError)


def cmd_plan(a) -> int:
    from ..console import check_out_path

    try:
        check_out_path(a.out, a.force)  # before tracing and solving, not after
        check_out_path(a.graph_out, a.force)
        model, loss_fn, data = _load(a)
        model.train()
        inputs, targets = data.batch()
        opt = _optimizer(a, model)
        pl = _make_plan(a, model, loss_fn, inputs, targets, opt)
        print(pl)
        if a.graph_out:
            from ..graph.io import save_graph

            save_graph(pl.graph, a.graph_out)
            print(f"costed graph ({a.costs} costs) written to {a.graph_out} (poet-graph/1)")
        if a.out:
            pl.save(a.out)
            print(f"schedule written to {a.out}")
        if not pl.feasible:
            return 3
        if a.run:
            res = pl.run(apply=False)
            print(f"executed {len(pl.steps)} instructions; loss {res.loss.item():.6g}")
            print(res.table())
        return 0
    except _errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2


def cmd_train(a) -> int:
    import copy
    import statistics

    import torch

    from ..units import fmt_bytes
    from .timing import busy_seconds, median_rows, steady_results, timing_table

    if a.json:  # stdout carries the JSON object only
        a.quiet = True
    say = (lambda *args, **kw: None) if a.json else print
    try:
        model, loss_fn, data = _load(a)
        model.train()
        reference = copy.deepcopy(model) if a.check else None
        data_state = data.g.get_state() if hasattr(data, "g") else None
        rng_state = torch.get_rng_state()
        opt = _optimizer(a, model)
        inputs, targets = data.batch()
        pl = _make_plan(a, model, loss_fn, inputs, targets, opt)
        say(pl)
        if not pl.feasible:
            _emit_json(
                a,
                {
                    "model": a.model,
                    "device": pl.device,
                    "strategy": a.strategy,
                    "status": pl.schedule.status,
                    "message": pl.schedule.report.message,
                },
            )
            return 3
        if getattr(a, "target", None) is not None:  # the plan compiled to C, trained there
            from ..cbackend.commands import train_on_target

            return train_on_target(a, pl, data, tuple(inputs) + tuple(targets))
        losses = []
        results = []
        peak = 0
        t0 = time.perf_counter()
        batch = (inputs, targets)
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
        dt = time.perf_counter() - t0
        say(
            f"trained {a.steps} steps in {dt:.2f} s; loss {losses[0]:.6f} -> {losses[-1]:.6f}; "
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
        report = {
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
        if a.check:
            # plain PyTorch from the same initial weights, data and generator state
            if data_state is not None:
                data.g.set_state(data_state)
            torch.set_rng_state(rng_state)
            ropt = _optimizer(a, reference)
            plain = []
            threads0 = torch.get_num_threads()
            if pl.threads:  # the thread count the plan ran with: same reduction order
                torch.set_num_threads(pl.threads)
            try:
                for _ in range(a.steps):
                    x, y = data.batch()
                    ropt.zero_grad(set_to_none=True)
                    loss = loss_fn(reference(*x), *y)
                    loss.backward()
                    ropt.step()
                    plain.append(loss.item())
            finally:
                torch.set_num_threads(threads0)
            same = plain == losses
            params_same = all(torch.equal(p, q) for p, q in zip(model.parameters(), reference.parameters()))
            if pl.tiling is not None and pl.tiling.tiled:
                # tiles sum in another order: within the documented bound, not bit for bit
                from .tiled import TRAINED_LOSS_BOUND, TRAINED_PARAM_BOUND, parameter_difference

                loss_rel = max(abs(u - v) / max(abs(v), 1e-12) for u, v in zip(losses, plain))
                param_rel = parameter_difference(model.parameters(), reference.parameters())
                ok = loss_rel <= TRAINED_LOSS_BOUND and param_rel <= TRAINED_PARAM_BOUND
                say(
                    f"plain PyTorch (tiled plan: summation order differs): loss curve within "
                    f"{loss_rel:.2e} (bound {TRAINED_LOSS_BOUND:.0e}), final parameters within {param_rel:.2e} "
                    f"of the model's largest parameter (bound {TRAINED_PARAM_BOUND:.0e}): "
                    f"{'match within the bound' if ok else 'EXCEED the bound'}"
                )
                report["check"] = {
                    "loss_curve_relative": loss_rel,
                    "parameters_relative": param_rel,
                    "within_bound": ok,
                }
                _emit_json(a, report)
                return 0 if ok else 1
            say(f"plain PyTorch loss curve identical: {same}; final parameters identical: {params_same}")
            report["check"] = {"loss_curve_identical": same, "parameters_identical": params_same}
            if not (same and params_same):
                for i, (u, v) in enumerate(zip(losses, plain)):
                    if u != v:
                        say(f"  first difference at step {i + 1}: {u!r} vs {v!r}")
                        break
                _emit_json(a, report)
                return 1
        _emit_json(a, report)
        return 0
    except _errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2


def _emit_json(a, report: dict) -> None:
    if a.json:
        import json

        print(json.dumps(report, indent=1))
