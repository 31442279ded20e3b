"""The ``poet sweep`` subcommand: one sweep, or a study of several models x devices, on a local
process pool or a Ray cluster; then its tables and plots."""

from __future__ import annotations

from pathlib import Path

from ..units import BudgetError

SWEEP_EXAMPLE = (
    "poet sweep --model resnet18_cifar --device a72 --memory 10%..100% --steps 10 "
    "--runtime 1.0x,1.2x,2x --out sweeps/resnet18_cifar-a72"
)
STUDY_EXAMPLE = (
    "poet sweep --model linear,vgg16_cifar --device m4,a72 --memory 30%..100% --steps 3 "
    "--runtime 1.2x --cluster ray --out study"
)


def register(subparsers) -> None:
    """Add ``sweep`` to an argparse subparsers object."""
    from ..graph.tile_option import add_tile_option
    from ..schedule.core import PAGING_MODES
    from ..sweep import DEFAULT_STRATEGIES

    s = subparsers.add_parser(
        "sweep",
        help="solve a grid of RAM x runtime budgets for several strategies (and models x devices)",
        description="Solve every (strategy, RAM budget, runtime budget) point of a grid in parallel, "
        "write DIR/sweep.csv, DIR/sweep.json and plots.  Re-running the same command resumes: "
        "finished points are skipped.  Several models or devices (or --study FILE) make a study: "
        "one sweep directory per model x device and a summary on top.  Examples: "
        + SWEEP_EXAMPLE
        + " ; "
        + STUDY_EXAMPLE,
    )
    s.add_argument(
        "--model",
        help="zoo model name (see `poet models`) or a poet-graph/1 JSON file; several, comma-separated, make a study",
    )
    s.add_argument(
        "--device",
        help="device profile (see `poet devices`); several, comma-separated, make a "
        "study; not needed for a costed graph file",
    )
    s.add_argument(
        "--study",
        metavar="FILE",
        help="a study file (TOML) listing models, devices and their grids "
        "(see docs/sweeps.md); instead of --model/--device",
    )
    s.add_argument(
        "--memory",
        default="10%..100%",
        help="RAM budgets: a range LO%%..HI%% (with --steps) or a list like 20%%,50%%,3MB "
        "(percent = of the way from fixed RAM to the keep-all peak; default %(default)s)",
    )
    s.add_argument("--steps", type=int, default=10, help="points in a --memory range (default %(default)s)")
    s.add_argument(
        "--runtime",
        default="1.0x,1.2x,2x",
        help="deadlines, comma-separated: multiples of one plain pass (1.2x), seconds (30s) or "
        "none (default %(default)s)",
    )
    s.add_argument(
        "--strategies", default=",".join(DEFAULT_STRATEGIES), help="comma-separated strategies (default %(default)s)"
    )
    s.add_argument(
        "--out",
        help="output directory (default sweep-MODEL-DEVICE; for a study: study, or study-FILE for --study FILE)",
    )
    s.add_argument(
        "--cluster",
        default="local",
        metavar="WHERE",
        help="where points are solved: local (a process pool, the default), ray (a Ray started "
        "on this machine), or the address of a running Ray cluster (ray://HOST:10001, "
        "HOST:6379 or auto); needs pip install -e '.[cluster]'",
    )
    s.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="points solved at once on this machine (default: CPU cores); with --cluster ray "
        "the local Ray gets jobs x threads CPUs",
    )
    s.add_argument(
        "--threads",
        type=int,
        default=None,
        help="cores per point (HiGHS threads; the CPUs a Ray task asks for; default: the cores "
        "shared out between the jobs, 1 per task on Ray)",
    )
    s.add_argument("--time-limit", type=float, default=60.0, help="seconds per MILP point (default %(default)s)")
    s.add_argument(
        "--paging-time",
        choices=PAGING_MODES,
        default="serial",
        help="how paging time counts against the deadline (default %(default)s)",
    )
    s.add_argument("--batch-size", type=int, default=1)
    add_tile_option(s)
    s.add_argument("--gap", type=float, default=1e-3, help="relative MIP gap counted as optimal")
    s.add_argument(
        "--method",
        default="auto",
        help="MILP solve variant for poet/remat/paging (see poet.solve.METHODS; default %(default)s)",
    )
    s.add_argument(
        "--retry",
        action="store_true",
        help="on resume, solve again points that ended without a proof (no_solution, feasible, error)",
    )
    s.add_argument(
        "--force", action="store_true", help="write into --out even if it holds other files or a different sweep"
    )
    s.add_argument("--no-plots", action="store_true", help="only the CSV and JSON files (and tables)")
    s.add_argument(
        "--point",
        help="schedule to draw, as STRATEGY|MEMORY|RUNTIME (default: the POET point "
        "with the largest saving over the best single technique)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    s.set_defaults(func=cmd_sweep)


def cmd_sweep(a) -> int:
    from ..sweep import make_backend, parse_list, run_study, run_sweep
    from ..sweep.study import load_study, spec_from, study_from_lists
    from .report import render_sweep

    if a.study and (a.model or a.device):
        raise BudgetError(
            "give either --study FILE or --model/--device, not both (the study file lists the models and devices)"
        )
    if not a.study and not a.model:
        raise BudgetError("give --model (and --device), or --study FILE; e.g. " + SWEEP_EXAMPLE)
    for opt, v in (("--jobs", a.jobs), ("--threads", a.threads)):
        if v is not None and v < 1:
            raise BudgetError(f"{opt} must be at least 1 (got {v})")
    grid = {
        "memory": a.memory,
        "steps": a.steps,
        "runtime": a.runtime,
        "strategies": a.strategies,
        "time_limit": a.time_limit,
        "paging_time": a.paging_time,
        "batch_size": a.batch_size,
        "gap": a.gap,
        "method": a.method,
        "tile": a.tile,
    }
    backend = make_backend(a.cluster, jobs=a.jobs, threads=a.threads)
    models = parse_list(a.model, "--model", example="resnet18_cifar,bert") if a.model else []
    devices = parse_list(a.device, "--device", example="m4,a72") if a.device else [None]
    if not a.study and len(models) == 1 and len(devices) == 1:
        spec = spec_from(models[0], devices[0], grid, a.threads)
        out = Path(a.out or f"sweep-{Path(models[0]).stem}-{devices[0] or 'graph'}")
        doc = run_sweep(spec, out, backend=backend, force=a.force, retry=a.retry, progress=not a.quiet)
        written = render_sweep(out, doc, point=a.point, plots=not a.no_plots)
        print(f"{len(doc['points'])} points in {out / 'sweep.csv'} and {out / 'sweep.json'}")
        for w in written:
            print(f"  wrote {w}")
        return 0

    if a.point:
        raise BudgetError(
            "--point picks a schedule of one sweep; for a study, draw it with "
            "`poet report STUDY/MODEL-DEVICE --point ...`"
        )
    if a.study:
        sweeps = load_study(a.study, grid, a.threads)
        out = Path(a.out or f"study-{Path(a.study).stem}")
    else:
        sweeps = study_from_lists(models, devices, grid, a.threads)
        out = Path(a.out or "study")
    docs = run_study(sweeps, out, backend, force=a.force, retry=a.retry, progress=not a.quiet)
    return render_study(out, sweeps, docs, plots=not a.no_plots)


def render_study(out: Path, sweeps, docs: list[dict], plots: bool = True) -> int:
    from ..sweep import write_study_summary
    from ..sweep.study import saving_rows, study_markdown
    from .report import render_sweep

    written = []
    for s, doc in zip(sweeps, docs):
        written += render_sweep(out / s.name, doc, plots=plots)
    written += write_study_summary(out, docs)
    if plots:
        from ..report.study import saving_plot

        written += saving_plot(saving_rows(docs), out)
    print(study_markdown(docs))
    print(f"{sum(len(d['points']) for d in docs)} points in {len(docs)} sweeps under {out}")
    for w in written:
        print(f"  wrote {w}")
    return 0
