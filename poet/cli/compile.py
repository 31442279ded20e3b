"""``poet compile``: a schedule of a traced model compiled to C, and run.

``register(subparsers)`` adds ``poet compile``; ``poet train --target`` (``train_target.py``) shares
its helpers.  torch is imported only when a command runs.

A schedule file carries the costed graph, not the model: ``poet compile`` traces the model again
from ``--model`` (a built-in name, or ``module:function`` returning ``(model, loss_fn, data)`` as
``poet train`` takes it) with the same ``--batch-size``, ``--seed`` and ``--dropout`` the plan was
made with, tiles it again as the plan did (the schedule file records how), and refuses a schedule
whose graph is not the traced program's.
"""

from __future__ import annotations

import sys

EXAMPLE = (
    "poet plan --model cnn --device m4 --memory 60% --out plan.json && "
    "poet compile --schedule plan.json --model cnn --target host --out cnn-c --run --check"
)


def user_errors() -> tuple:
    """The errors a compile reports as ``poet: error: ...`` (exit 2), not as a traceback."""
    from ..cbackend.ir import LoweringError
    from ..cbackend.targets import TargetError
    from ..graph.torch_ops import ExtractionError
    from ..schedule.validate import ScheduleError
    from ..units import BudgetError

    return (LoweringError, ScheduleError, TargetError, ExtractionError, BudgetError, ValueError, OSError)


def register(subparsers) -> None:
    from ..cbackend.targets import TARGETS
    from ..units import SECONDS, number_option
    from .model_options import add_model_options

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


def progress_printer(a):
    """Progress lines on stderr, or None with --quiet."""
    if getattr(a, "quiet", False):
        return None
    return lambda text: print(f"poet: {text}", file=sys.stderr, flush=True)


def check_out_dir(out: str, force: bool) -> None:
    """Refuse an --out folder that is a file, or one not empty without --force, before any work."""
    from pathlib import Path

    from ..cbackend.project import ProjectExists

    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ProjectExists(f"{out} exists and is not a folder; choose another --out")
    if p.is_dir() and any(p.iterdir()) and not force:
        raise ProjectExists(f"{out} exists and is not empty; pass --force to replace it, or choose another --out")


def traced_program(a, schedule):
    """The traced program (and its untiled form) of ``--model``, tiled again as the schedule records."""
    from ..demo_models import load
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


def batches(data, first, steps: int) -> list:
    """``steps`` batches: the first one traced with, then the data's next ones."""
    out = [first]
    while len(out) < steps:
        x, y = data.batch()
        out.append(tuple(x) + tuple(y))
    return out


def cmd_compile(a) -> int:
    from ..cbackend.target_types import RUNTIME_RAM_BYTES
    from ..schedule.io import load_schedule

    try:
        check_out_dir(a.out, a.force)
        schedule = load_schedule(a.schedule)  # replayed by the validator
        fixed = (schedule.graph.meta or {}).get("fixed_ram") or {}
        if a.target == "qemu-m4" and schedule.graph.fixed_ram_bytes and "runtime" not in fixed:
            say = progress_printer(a) or (lambda text: None)
            say(
                f"note: {a.schedule} keeps no RAM for the compiled step's stack and statics ({RUNTIME_RAM_BYTES:,} B): "
                f"if they do not fit beside it, plan with poet plan --target qemu-m4"
            )
        from ..cbackend.compiler import compile_program
        from ..cbackend.lower_zoo import is_zoo_graph, zoo_program

        if not a.model and is_zoo_graph(schedule.graph):  # a zoo layer graph: built again from its meta
            prog = untiled = zoo_program(schedule.graph, seed=a.seed)
            steps_batches = [prog.example_batch] * a.steps
        elif not a.model:
            raise ValueError(
                f"{a.schedule} is not a schedule of a zoo network: give --model, the model it was planned for"
            )
        else:
            prog, untiled, data, first = traced_program(a, schedule)
            steps_batches = batches(data, first, a.steps)

        res = compile_program(
            prog,
            schedule,
            target=a.target,
            out=a.out,
            run=a.run or a.check,
            check=a.check,
            batches=steps_batches,
            lr=a.lr,
            momentum=a.momentum,
            force=a.force,
            progress=progress_printer(a),
            timeout_s=a.timeout,
            fit_time_limit_s=a.fit_time_limit,
            reference_program=untiled if untiled is not prog else None,
        )
    except user_errors() as e:
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
