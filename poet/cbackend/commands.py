"""``poet compile`` and ``poet train --target``: schedules of traced models compiled to C and run.

``register(subparsers)`` adds ``poet compile``; ``poet train`` (poet/execute/commands.py) calls
:func:`train_on_target` when given ``--target``.  torch is imported only when a command runs.

A schedule file carries the costed graph, not the model: ``poet compile`` traces the model again
from ``--model`` (a built-in name, or ``module:function`` returning ``(model, loss_fn, data)`` as
``poet train`` takes it) with the same ``--batch-size``, ``--seed`` and ``--dropout`` the plan was
made with, tiles it again as the plan did (the schedule file records how), and refuses a schedule
whose graph is not the traced program's.
"""

from __future__ import annotations

import dataclasses
import sys

EXAMPLE = (
    "poet plan --model cnn --device m4 --memory 60% --out plan.json && "
    "poet compile --schedule plan.json --model cnn --target host --out cnn-c --run --check"
)

# RAM a compiled step holds besides its tensors: the stack (qemu-m4's default) and the runtime's
# statics; poet train --target counts it as fixed RAM, so the plan leaves room for it
RUNTIME_RAM_BYTES = 4096 + 512


def _errors():
    from ..graph.torch_ops import ExtractionError
    from ..schedule.validate import ScheduleError
    from ..units import BudgetError
    from .ir import LoweringError
    from .targets import TargetError

    return (LoweringError, ScheduleError, TargetError, ExtractionError, BudgetError, ValueError, OSError)


def register(subparsers) -> None:
    from ..execute.model_options import add_model_options
    from ..units import SECONDS, number_option
    from .targets import TARGETS

    p = subparsers.add_parser(
        "compile",
        help="compile a schedule of a traced model to a C training step (host or emulated Cortex-M4)",
        epilog=f"Example: {EXAMPLE}",
    )
    p.add_argument("--schedule", required=True, help="a poet-schedule/1 file of a traced model (poet plan --out)")
    add_model_options(
        p,
        model_default="",  # not required: a zoo schedule names its network
        model_help="the model the schedule was planned for: cnn, mlp, dwnet, gpt ... or module:function "
        "returning (model, loss_fn, data), traced again with the options below (not needed for a schedule "
        "of a zoo network from poet solve --model: its graph names the network, weights and batch come "
        "from --seed)",
    )
    p.add_argument("--target", choices=TARGETS, default="host")
    p.add_argument("--out", required=True, help="folder for the C project (replaced only with --force)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--run", action="store_true", help="also build and run the step")
    p.add_argument("--check", action="store_true", help="also compare the run with PyTorch; exit 1 on a mismatch")
    p.add_argument(
        "--steps",
        type=number_option("int", "a whole number of training steps, 1 or more", "1", minimum=1),
        default=1,
        help="training steps to run (batches from the model's data)",
    )
    p.add_argument(
        "--lr", type=number_option("float", "a finite learning rate >= 0", "0.05", minimum=0.0), default=0.05
    )
    p.add_argument(
        "--momentum",
        type=number_option("float", "a momentum in [0, 1)", "0.9", minimum=0.0, below=1.0),
        default=0.0,
        help="SGD momentum (parameters in RAM only; default 0: plain SGD)",
    )
    p.add_argument("--timeout", type=SECONDS, default=600.0, help="seconds a run may take (default 600)")
    p.add_argument(
        "--fit-time-limit",
        type=SECONDS,
        default=240.0,
        help="seconds the re-solves may take when the arena does not fit what the budget leaves (a zoo "
        "network is tiled again for the lower budget; default 240)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_compile)


def add_train_options(t) -> None:
    """``poet train``'s options for running the step compiled to C."""
    from .targets import TARGETS

    g = t.add_argument_group("compiled step")
    g.add_argument(
        "--target",
        choices=TARGETS,
        default=None,
        help="compile the plan to C and train there (host: this machine's cc; qemu-m4: an emulated Cortex-M4 "
        "whose RAM region is the budget) instead of running it with PyTorch",
    )
    g.add_argument("--out", default=None, help="folder for the C project with --target (default: a temporary one)")
    g.add_argument("--force", action="store_true", help="replace --out if it exists")


def _progress(a):
    if getattr(a, "quiet", False):
        return None
    return lambda text: print(f"poet: {text}", file=sys.stderr, flush=True)


def _check_out_dir(out: str, force: bool) -> None:
    from pathlib import Path

    from .project import ProjectExists

    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ProjectExists(f"{out} exists and is not a folder; choose another --out")
    if p.is_dir() and any(p.iterdir()) and not force:
        raise ProjectExists(f"{out} exists and is not empty; pass --force to replace it, or choose another --out")


def traced_program(a, schedule):
    """The traced program (and its untiled form) of ``--model``, tiled again as the schedule records."""
    from ..execute.models import load
    from ..graph.torch_export import export_training_graph

    model, loss_fn, data = load(a.model, batch_size=a.batch_size, seed=a.seed, dropout=a.dropout)
    model.train()
    inputs, targets = data.batch()
    prog = export_training_graph(model, inputs, loss_fn, targets)
    untiled = prog
    tiling = dict(schedule.report.tiling or {})
    tiled_nodes = any(getattr(nd, "tile", None) is not None for nd in schedule.graph.nodes)
    if tiling.get("kind") == "torch":
        from ..execute.tiled import tile_program

        prog, _ = tile_program(prog, int(tiling["count"]), int(tiling["threshold_bytes"]))
    elif tiled_nodes:
        raise ValueError(
            f"{a.schedule} is a schedule of a tiled program but does not record how it was tiled "
            f"(it was saved by an older version or by poet solve); plan it again with poet plan --out"
        )
    return prog, untiled, data, (tuple(inputs) + tuple(targets))


def _batches(data, first, steps: int) -> list:
    out = [first]
    while len(out) < steps:
        x, y = data.batch()
        out.append(tuple(x) + tuple(y))
    return out


def cmd_compile(a) -> int:
    from ..schedule.io import load_schedule

    try:
        _check_out_dir(a.out, a.force)
        schedule = load_schedule(a.schedule)  # replayed by the validator
        fixed = (schedule.graph.meta or {}).get("fixed_ram") or {}
        if a.target == "qemu-m4" and schedule.graph.fixed_ram_bytes and "runtime" not in fixed:
            say = _progress(a) or (lambda text: None)
            say(
                f"note: {a.schedule} keeps no RAM for the compiled step's stack and statics ({RUNTIME_RAM_BYTES:,} B): "
                f"if they do not fit beside it, plan with poet plan --target qemu-m4"
            )
        from .compiler import compile_program
        from .lower_zoo import is_zoo_graph, zoo_program

        if not a.model and is_zoo_graph(schedule.graph):  # a zoo layer graph: built again from its meta
            prog = untiled = zoo_program(schedule.graph, seed=a.seed)
            batches = [prog.example_batch] * a.steps
        elif not a.model:
            raise ValueError(
                f"{a.schedule} is not a schedule of a zoo network: give --model, the model it was planned for"
            )
        else:
            prog, untiled, data, first = traced_program(a, schedule)
            batches = _batches(data, first, a.steps)

        res = compile_program(
            prog,
            schedule,
            target=a.target,
            out=a.out,
            run=a.run or a.check,
            check=a.check,
            batches=batches,
            lr=a.lr,
            momentum=a.momentum,
            force=a.force,
            progress=_progress(a),
            timeout_s=a.timeout,
            fit_time_limit_s=a.fit_time_limit,
            reference_program=untiled if untiled is not prog else None,
        )
    except _errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2
    print(f"C project written to {res.project.path} ({res.project.layout.instructions} instructions)")
    print("\n".join(res.lines()))
    if res.results is not None:
        for s, loss in enumerate(res.results.losses):
            print(f"step {s + 1}: loss {loss:.6f}")
    if res.not_run:
        instead = "; the same project ran on the host instead (above)" if res.run else "; run it with --target host"
        print(f"poet: error: {res.not_run}{instead}", file=sys.stderr)
        return 2
    return 0 if res.ok else 1


def _report(a, plan, res) -> dict:
    """``poet train --target --json``: what was compiled, where it lived, what it ran and how close."""
    t = res.schedule.totals
    report = {
        "model": a.model,
        "target": a.target,
        "budget_bytes": res.schedule.budget.ram_bytes,
        "status": res.schedule.status,
        "nodes": len(res.schedule.graph),
        "tiled": bool(plan.tiling is not None and plan.tiling.tiled),
        "arena_bytes": res.arena_bytes,
        "schedule_peak_bytes": res.peak_bytes,
        "fixed_bytes": res.schedule.graph.fixed_ram_bytes,
        "bytes_paged_out": t.bytes_paged_out,
        "bytes_paged_in": t.bytes_paged_in,
        "memory": None if res.build is None else dataclasses.asdict(res.build.memory),
        "losses": list(res.results.losses) if res.results else None,
        "ok": res.ok,
    }
    ins = res.instructions
    if ins is not None:  # per iteration, the mean of the steps run
        report["instructions"] = {
            "predicted": {k: ins.mean_predicted(k) for k in ins.counts},
            "measured": {k: ins.mean_measured(k) for k in ins.counts},
            "total_error": ins.total_error,
        }
    if res.check is not None:
        worst = {k: res.check.worst(k) for k in ("loss", "grad", "param", "buffer")}
        report["check"] = {
            "ok": res.check.ok,
            **{f"worst_{k}": None if w is None else w.relative for k, w in worst.items()},
            "lines": res.check.lines(),
        }
    return report


def train_on_target(a, plan, data, first) -> int:
    """``poet train --target``: the plan compiled to C, ``--steps`` steps run there, checked if asked."""
    import json
    import tempfile
    from pathlib import Path

    if a.optimizer != "sgd":
        print(
            f"poet: error: the compiled step updates with SGD; --optimizer {a.optimizer} is not compiled",
            file=sys.stderr,
        )
        return 2
    tmp = None
    try:
        if a.out:
            _check_out_dir(a.out, a.force)
            out = Path(a.out)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="poet-train-")
            out = Path(tmp.name) / "project"
        res = plan.compile(
            a.target,
            out,
            run=True,
            check=a.check,
            batches=_batches(data, first, a.steps),
            lr=a.lr,
            momentum=0.9,  # poet train's optimizer: torch.optim.SGD(lr, momentum=0.9)
            force=a.force,
            progress=_progress(a),
        )
        report = _report(a, plan, res)
        if a.json:
            print(json.dumps(report, indent=1))
        else:
            print("\n".join(res.lines()))
            if res.results is not None:
                for s, loss in enumerate(res.results.losses):
                    print(f"step {s + 1:4d}/{a.steps}  loss {loss:.6f}  ({a.target})")
        return 0 if res.ok else 1
    except _errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()
