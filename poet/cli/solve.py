"""``poet solve``: the minimum-energy schedule of a zoo network or a costed graph file, within
RAM and runtime budgets, through the front door ``poet.solve.api.plan_and_solve``."""

from __future__ import annotations

from ..console import Progress, check_out_path, ctrl_c_stops_the_solve, warn_uncached
from ..units import BATCH, GAP, SECONDS, THREADS, BudgetError

EXAMPLE = "poet solve --model resnet18_cifar --device a72 --memory 3MB --runtime 7.6x"


def cmd_solve(a) -> int:
    from ..report.text import summary_text
    from ..report.tiling import tiling_text
    from ..schedule.io import save_schedule
    from ..solve.api import plan_and_solve
    from ..solve.policy import DEFAULT_POLICY
    from ..solve.problem import PARAMETER_MULTIPLES, tiling_costs
    from ..units import parse_bytes

    if (a.graph is None) == (a.model is None):
        raise BudgetError("give either --model NAME --device DEVICE or --graph FILE.json")
    if a.model is not None and a.device is None:
        raise BudgetError(f"--model {a.model} needs --device (one of: see `poet devices`)")
    check_out_path(a.out, a.force)
    if a.graph is not None and a.device is not None:
        raise BudgetError(
            f"--device {a.device} cannot apply to --graph {a.graph}: a poet-graph/1 file already "
            f"carries its costs; drop --device, or re-price the model with --model NAME --device "
            f"{a.device}"
        )
    fixed_ram = a.fixed_ram
    if fixed_ram is not None and fixed_ram.lower() not in PARAMETER_MULTIPLES:
        fixed_ram = parse_bytes(fixed_ram, "--fixed-ram", allow_zero=True)  # named as the option it came from
    prog = Progress(enabled=not a.quiet and not a.json)
    try:
        with ctrl_c_stops_the_solve() as stop:
            # the front door poet.solve() goes through: tiling, a tiled graph's time limit, the cache
            solved = plan_and_solve(
                a.graph or a.model,
                a.device,
                memory=a.memory,
                runtime=a.runtime,
                strategy=a.strategy,
                paging_time="hidden" if a.paging_overlap else a.paging_time,
                time_limit=a.time_limit,
                threads=a.threads,
                gap=a.gap,
                method=a.method,
                batch_size=a.batch_size,
                fixed_ram=fixed_ram,
                tile=a.tile,
                weights=a.weights,
                staging=a.staging,
                policy=DEFAULT_POLICY.with_tile_caps(a.max_tile_nodes, a.max_tile_seconds),
                progress=prog,
                verbose=a.verbose,
                cache=not a.no_cache,
                stop=stop,
            )
    finally:
        prog.done()
    s, problem = solved.schedule, solved.problem
    g = problem.graph
    warn_uncached(s)
    costs = None
    if problem.tiled and s.totals is not None:
        from ..hardware.device import load_device

        dev = load_device(a.device)
        costs = tiling_costs(problem, s, dev.read_latency_s, dev.write_latency_s, dev.storage_power_w)
    if a.out and s.feasible:
        save_schedule(s, a.out)
    if a.json:
        from ..schedule.io import schedule_to_dict

        d = schedule_to_dict(s)
        d.pop("graph")
        d.pop("steps")
        d["graph_name"], d["nodes"], d["num_steps"] = g.name, len(g), len(s.steps)
        if costs is not None:
            import dataclasses

            d["solver"]["tiling"]["costs"] = dataclasses.asdict(costs)
        if problem.plan is not None:
            from ..report.tiling import accounting_lines

            d["solver"]["tiling"]["ram_accounting"] = " ".join(accounting_lines(problem, s))
        from ..fileio import json_text

        print(json_text(d, "the summary"))
    else:
        print(summary_text(s))
        extra = tiling_text(problem, s, costs)
        solved_here = problem.plan is None or problem.plan.fits  # below the tiled minimum nothing is solved
        if solved_here and solved.time_limit_s != a.time_limit:
            extra += (
                f"\nThe tiled graph was solved with a {solved.time_limit_s:.0f}-s time limit (--time-limit S to change)"
            )
        if solved_here and solved.solve_limit_s != solved.time_limit_s:
            extra += (
                f"\nPlanning the tiles took {solved.planning_s:.1f} s of the limit, "
                f"the solve had {solved.solve_limit_s:.1f} s."
            )
        if extra:
            print(extra)
        if a.out and s.feasible:
            print(f"Schedule written to {a.out} (poet-schedule/1)")
    return 0 if s.feasible else 2


def register(subparsers) -> None:
    s = subparsers.add_parser(
        "solve", help="find the minimum-energy schedule within RAM and runtime budgets", epilog=f"Example: {EXAMPLE}"
    )
    src = s.add_argument_group("what to schedule")
    src.add_argument("--model", help="a built-in network (see `poet models`)")
    src.add_argument("--device", help="a device name (see `poet devices`) or a .toml profile")
    src.add_argument("--graph", help="a costed graph file (poet-graph/1 JSON) instead of --model/--device")
    src.add_argument("--batch-size", type=BATCH, default=1)
    bud = s.add_argument_group("budgets")
    bud.add_argument(
        "--memory",
        required=True,
        help="RAM budget: bytes (3000000), with units (3MB, 256KiB) or a percentage of the keep-everything peak (40%%)",
    )
    bud.add_argument(
        "--runtime",
        default=None,
        help="deadline: a multiple of one plain forward+backward (7.6x) or seconds (2.5s, 800ms); default: none",
    )
    bud.add_argument(
        "--paging-time",
        choices=["serial", "overlap", "hidden"],
        default="serial",
        help="how paging counts against the deadline: added to compute (serial, default), "
        "overlapped with the compute of its stage (overlap), or free (hidden)",
    )
    bud.add_argument(
        "--paging-overlap",
        action="store_true",
        help="the original POET assumption: paging fully hidden behind compute (= --paging-time hidden)",
    )
    bud.add_argument(
        "--fixed-ram",
        default=None,
        help="RAM held all iteration and not scheduled: bytes, or params / sgd (params+grads) / "
        "adam (params+grads+2 moments) from the model's parameter count; default 0 "
        "(the paper's setting: only activations count)",
    )
    from ..graph.tile_option import add_tile_option
    from ..graph.weights import add_weights_option

    add_tile_option(bud, caps=True)
    add_weights_option(bud)
    sol = s.add_argument_group("solver")
    sol.add_argument(
        "--strategy",
        default="poet",
        help="poet (default), remat, paging, keep-all, chen, capuchin, capuchin-paper, pofo",
    )
    sol.add_argument("--time-limit", type=SECONDS, default=None, help="seconds; the best schedule found is returned")
    sol.add_argument(
        "--threads",
        type=THREADS,
        default=None,
        help="cores to use: HiGHS threads, and guide searches side by side (default: all)",
    )
    sol.add_argument("--gap", type=GAP, default=1e-3, help="relative gap that counts as optimal (default 1e-3)")
    sol.add_argument("--method", default="auto", help="MILP formulation (auto, faithful, ...; docs/pipeline.md)")
    sol.add_argument(
        "--no-cache",
        action="store_true",
        help="solve afresh: neither reuse nor keep an answer in the cache (docs/pipeline.md, Cache)",
    )
    out = s.add_argument_group("output")
    out.add_argument("--out", help="write the schedule (poet-schedule/1 JSON) here")
    out.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    out.add_argument("--json", action="store_true", help="print a machine-readable summary")
    out.add_argument("--quiet", action="store_true", help="no progress line")
    out.add_argument("--verbose", action="store_true", help="show the solver's own log")
    s.set_defaults(func=cmd_solve)
