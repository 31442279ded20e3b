"""``poet plan``: trace a PyTorch model, schedule its training step, optionally run it once.

Its options and the steps it shares with ``poet train`` (``train.py``: load the model, make the
optimizer, make the plan) are here; torch is imported only when a command runs.
"""

from __future__ import annotations

import sys

PLAN_EXAMPLE = "poet plan --model bert --device m4 --memory 60% --strategy paging --run --out bert-plan.json"


def add_plan_options(p) -> None:
    """The options ``poet plan`` and ``poet train`` share: the model, the budgets, the execution."""
    from ..graph.tile_option import add_tile_option
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
    add_tile_option(b)
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
    add_plan_options(p)
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


def load_model(a):
    """(model, loss_fn, data) of ``--model``."""
    from ..demo_models import load

    return load(a.model, batch_size=a.batch_size, seed=a.seed, dropout=a.dropout)


def make_optimizer(a, model):
    """``--optimizer`` over ``model``'s parameters."""
    import torch

    if a.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=a.lr)
    return torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)


def make_plan(a, model, loss_fn, inputs, targets, optimizer):
    """The plan of one training step, with a progress line and Ctrl-C ending the solve early."""
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
                runtime_ram_bytes=runtime_ram(a),
            )
    finally:
        prog.done()
    warn_uncached(pl.schedule)
    return pl


def runtime_ram(a) -> int:
    """RAM a compiled step (poet train --target) holds besides its tensors: the plan leaves room for it."""
    if getattr(a, "target", None) is None:
        return 0
    from ..cbackend.target_types import RUNTIME_RAM_BYTES

    return RUNTIME_RAM_BYTES


def user_errors() -> tuple:
    """The errors ``poet plan`` and ``poet train`` report as ``poet: error: ...`` (exit 2)."""
    from ..execute.executor import ExecutionError
    from ..execute.store import PagingError
    from ..graph.torch_export import ExtractionError
    from ..units import BudgetError

    # OSError: a file that could not be written or read (--out on a full disk, a paging directory)
    return (ExtractionError, ExecutionError, PagingError, BudgetError, ValueError, OSError)


def cmd_plan(a) -> int:
    from ..console import check_out_path

    try:
        check_out_path(a.out, a.force)  # before tracing and solving, not after
        check_out_path(a.graph_out, a.force)
        model, loss_fn, data = load_model(a)
        model.train()
        inputs, targets = data.batch()
        opt = make_optimizer(a, model)
        pl = make_plan(a, model, loss_fn, inputs, targets, opt)
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
    except user_errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2
