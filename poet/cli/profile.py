"""``poet profile``: measure this machine (or import a board's measurements) into a device profile.

Compute: the keep-everything schedule of each model's aten-level training step runs through the
executor (:mod:`poet.execute.measure`); each operator family gets ``latency + FLOPs / rate`` fitted
to its ops (:mod:`poet.hardware.profile`).  Storage: fsync'd writes and cache-dropped reads of real
files in ``--dir`` over a size sweep (:mod:`poet.hardware.profile_storage`).  Power: RAPL energy
counters over the compute measurement when readable, else ``--power-w``.  ``--import CSV`` builds
the profile (or, with ``--graph-out``, a costed graph) from measurements taken elsewhere
(:mod:`poet.hardware.profile_import`).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

EXAMPLE = "poet profile --model cnn --out host.toml"
STANDARD_MODELS = ("cnn", "mlp", "dwcnn")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure this machine (or import measurements) into a device profile",
        epilog=f"Example: {EXAMPLE}; then poet train --model cnn --device host.toml ...",
    )
    p.add_argument(
        "--model",
        default=None,
        help="measure the ops of these models, comma-separated: cnn, bert, mlp, dwcnn or "
        "module:function returning (model, loss_fn, data) (default: cnn,mlp,dwcnn)",
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", help="write the device profile (TOML) here")
    p.add_argument("--force", action="store_true", help="overwrite --out / --graph-out")
    p.add_argument("--dir", default=None, help="directory on the storage to measure (default: the temp directory)")
    p.add_argument(
        "--power-w",
        type=float,
        default=None,
        help="compute power in watts, when RAPL counters are not readable (or to override them)",
    )
    p.add_argument("--storage-power-w", type=float, default=None, help="storage power in watts (default: as compute)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads to measure with (default 1; training with this profile uses the same)",
    )
    p.add_argument("--runs", type=int, default=20, help="measured executions of each model's step (default 20)")
    p.add_argument(
        "--seconds",
        type=float,
        default=40.0,
        help="measure for about this long (default 40): after the storage sweep, paging runs and "
        "keep-everything runs alternate until then, to average the machine's drift in speed",
    )
    p.add_argument("--name", default=None, help="the profile's device name (default host; board with --import)")
    p.add_argument("--quick", action="store_true", help="tiny sweep and few runs: a complete but rough profile")
    p.add_argument(
        "--import",
        dest="import_csv",
        metavar="CSV",
        help="build the profile from a CSV of measurements taken on another board (docs/devices.md)",
    )
    p.add_argument("--graph-out", help="with --import: also write the costed graph of its op rows (poet-graph/1)")
    p.add_argument(
        "--device",
        default=None,
        help="with --import --graph-out and no storage rows: the device whose storage prices paging",
    )
    p.add_argument(
        "--target",
        choices=("host", "qemu-m4"),
        default="host",
        help="host (default): time this machine; qemu-m4: count the instructions of --model's step on the "
        "emulated Cortex-M4 (docs/mcu.md), priced with a declared clock and energies",
    )
    p.add_argument("--memory", help="with --target qemu-m4: also measure the tiled step this RAM budget needs")
    p.add_argument("--clock-hz", type=float, default=None, help="with --target qemu-m4: declared clock (default 64e6)")
    p.add_argument(
        "--joules-per-instruction", type=float, default=None, help="with --target qemu-m4: declared (default: m4's)"
    )
    p.add_argument("--joules-per-byte", type=float, default=None, help="with --target qemu-m4: declared per byte paged")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_profile)


def build_model(spec: str, batch_size: int):
    """(model, loss_fn, data) for a built-in name or ``module:function``."""
    from ..demo_models import load

    return load(spec, batch_size=batch_size, seed=0, dropout=0.1)


def op_samples(programs, timings):
    """OpSamples (busy seconds per aten op, as executed) of each program from its timing."""
    from ..hardware.profile import OpSample

    samples = []
    for prog, t in zip(programs, timings):
        for v, grp in enumerate(prog.groups):
            u = prog.units[grp[0]]
            samples.append(OpSample(u.op, u.flops, t.node_busy_s[v], t.node_spread[v]))
    return samples


def measure_ops(specs, batch_size: int, runs: int, warmup: int, say):
    """Each model's traced aten-level program and the timing of its keep-everything runs."""
    import torch

    from ..execute.measure import measure_program
    from ..graph.torch_export import export_training_graph

    programs, timings = [], []
    for spec in specs:
        torch.manual_seed(0)
        model, loss_fn, data = build_model(spec, batch_size)
        model.train()
        inputs, targets = data.batch()
        say(f"tracing {spec}")
        prog = export_training_graph(model, inputs, loss_fn, targets)
        t = measure_program(prog, runs=runs, warmup=warmup, progress=say)
        programs.append(prog)
        timings.append(t)
        say(
            f"{spec}: {len(prog.groups)} ops, step {t.iteration_busy_s * 1e3:.2f} ms busy "
            f"({t.iteration_wall_s * 1e3:.2f} ms wall), median of {t.runs} runs"
        )
    return programs, timings


def cmd_profile(a) -> int:
    from ..console import check_out_path

    say = (lambda m: None) if a.quiet else (lambda m: print(f"profile: {m}", file=sys.stderr, flush=True))
    try:
        check_out_path(a.out, a.force)
        check_out_path(a.graph_out, a.force)
        if a.target == "qemu-m4":
            from ..cbackend.target_types import TargetError

            try:
                return _qemu(a, say)
            except TargetError as e:  # the emulator or the toolchain: say what, not a traceback
                raise ValueError(str(e)) from e
        if a.memory is not None or a.clock_hz is not None:
            raise ValueError("--memory and --clock-hz go with --target qemu-m4")
        if a.import_csv:
            return _import(a, say)
        if not a.out:
            raise ValueError("give --out host.toml (where to write the profile)")
        if a.graph_out:
            raise ValueError(
                "--graph-out goes with --import; to price a model from its own measured nodes use "
                "poet plan --costs measured --graph-out FILE"
            )
        if a.threads < 1 or a.runs < 1:
            raise ValueError("--threads and --runs must be at least 1")
        if not (a.seconds >= 0 and a.seconds < 3600):
            raise ValueError(f"--seconds must be between 0 and 3600, got {a.seconds}")
        return _measure(a, say)
    except (ValueError, OSError, FileExistsError) as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2


def _qemu(a, say) -> int:
    """The instruction profile of --model's step (and its tiled step for --memory) on the emulator."""
    import torch

    from ..cbackend import qemu_m4
    from ..cbackend.instruction_profile import default_declared, profile_programs, profile_toml
    from ..cbackend.target_types import RUNTIME_RAM_BYTES
    from ..execute.tiled import tile_for_budget
    from ..fileio import atomic_write_text
    from ..graph.torch_export import export_training_graph
    from ..hardware.cost import costed_program
    from ..solve.api import make_budget

    if not a.out:
        raise ValueError("give --out m4-cnn.toml (where to write the profile)")
    if not a.model:
        raise ValueError(
            "give --model: an instruction profile measures one model's own kernel calls (e.g. --model cnn)"
        )
    if a.import_csv or a.graph_out:
        raise ValueError("--import and --graph-out go with --target host")
    why = qemu_m4.missing()
    if why:
        raise ValueError(why)
    declared = default_declared(a.clock_hz, a.joules_per_instruction, a.joules_per_byte)
    programs = []
    for spec in a.model.split(","):
        torch.manual_seed(0)
        model, loss_fn, data = build_model(spec, a.batch_size)
        model.train()
        inputs, targets = data.batch()
        say(f"tracing {spec}")
        # traced and tiled as `poet train --target qemu-m4` plans it (SGD state and the compiled
        # step's runtime counted as fixed RAM), so a tiled plan's nodes are the ones measured here
        prog = export_training_graph(model, inputs, loss_fn, targets, optimizer="sgd")
        prog.fixed_breakdown["runtime"] = RUNTIME_RAM_BYTES
        programs.append((spec, prog))
        if a.memory is not None:
            cg = costed_program(prog, "m4")
            budget = make_budget(cg, a.memory, None, "serial")
            tiling = tile_for_budget(prog, "m4", budget.ram_bytes) if budget.ram_bytes < cg.min_ram_bytes() else None
            if tiling is not None and tiling.tiled:
                say(f"{spec} is tiled for {budget.ram_bytes:,} B: {len(tiling.program.graph.nodes)} nodes")
                programs.append((f"{spec}, tiled for {budget.ram_bytes} B", tiling.program))
            else:
                say(f"{spec} needs no tiling at {budget.ram_bytes:,} B")
    t0 = time.monotonic()
    measured = profile_programs(programs, progress=say)
    command = "poet profile " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "poet profile --target qemu-m4"
    atomic_write_text(a.out, profile_toml(measured, declared, command=command))
    say(f"measured in {time.monotonic() - t0:.1f} s; wrote {a.out}")
    for _, m in measured:
        total = sum(nd.compute for nd in m.nodes)
        print(
            f"{m.program}: {len(m.nodes)} nodes, {len(m.kernel_counts)} kernel calls, "
            f"{total:,} instructions to compute every node once ({total / declared.clock_hz * 1e3:.1f} ms "
            f"at {declared.clock_hz / 1e6:g} MHz), update {m.update_in_ram:,}"
        )
    print(f"wrote {a.out}: plan with --device {a.out}")
    return 0


def _measure(a, say) -> int:
    import torch

    from ..execute.executor import Executor
    from ..execute.measure import calibrate_paging, keep_schedule, measure_program, merge_timings, run_paging_schedule
    from ..fileio import atomic_write_text
    from ..hardware.device import load_device
    from ..hardware.profile import (
        HostProfile,
        choose_power,
        fit_families,
        profile_device,
        profile_toml,
        rapl_energy_j,
    )
    from ..hardware.profile_storage import FULL_SIZES, QUICK_SIZES, profile_storage

    t0 = time.perf_counter()
    specs = [s.strip() for s in a.model.split(",") if s.strip()] if a.model else list(STANDARD_MODELS)
    runs, warmup = (min(a.runs, 3), 1) if a.quick else (a.runs, 3)
    threads0 = torch.get_num_threads()
    torch.set_num_threads(a.threads)
    try:
        e0, c0 = rapl_energy_j(), time.perf_counter()
        programs, timings = measure_ops(specs, a.batch_size, runs, warmup, say)
        e1, c1 = rapl_energy_j(), time.perf_counter()
        rapl_w = (e1 - e0) / (c1 - c0) if e0 is not None and e1 is not None and e1 > e0 else None
        power = choose_power(rapl_w, a.power_w, a.storage_power_w)
        directory = a.dir or tempfile.gettempdir()
        say(f"storage: files in {directory}")
        # short bursts of keep-everything runs of the first model, their first runs left out, after each
        # size of the sweep and each block of paging runs: computes are priced as training runs them,
        # back to back, and bursts spread over the profile average the machine's drift in speed
        meter, keep = Executor(programs[0]), keep_schedule(programs[0])
        bursts = []

        def burst():
            bursts.append(measure_program(programs[0], runs=3, warmup=3, executor=meter, schedule=keep))

        storage = profile_storage(
            directory, QUICK_SIZES if a.quick else FULL_SIZES, 2 if a.quick else 5, progress=say, between=burst
        )
        fams, rate = fit_families(op_samples(programs, timings))  # refitted below with all the bursts
        hp = HostProfile(
            name=a.name or "host",
            threads=a.threads,
            families=fams,
            flops_per_s=rate,
            free_overhead_s=statistics.median(t.free_busy_s for t in timings),
            power=power,
            storage=storage,
            models=specs,
            command="poet " + " ".join(sys.argv[1:]),
        )
        # paging calibration: a paging schedule of the first model in blocks, with bursts between
        pages = run_paging_schedule(
            programs[0],
            profile_device(hp),
            runs=runs,
            until=None if a.quick else t0 + a.seconds,
            between=burst,
            paging_dir=directory,
            progress=say,
        )
        timings[0] = merge_timings([timings[0], *bursts])
        samples = op_samples(programs, timings)
        fams, rate = fit_families(samples)
        hp.families, hp.flops_per_s = fams, rate
        hp.free_overhead_s = statistics.median(t.free_busy_s for t in timings)
        cal = calibrate_paging(pages, timings[0])
        fit = cal.fit
        hp.page_in_overhead_s, hp.page_out_overhead_s = fit.page_in_s, fit.page_out_s
        hp.page_overhead_note = (
            f"{specs[0]}, paging all but every 3rd forward output ({cal.page_ins} page-ins, {cal.page_outs} "
            f"page-outs), {fit.runs} runs in blocks of 5: per page-in "
            f"{fit.page_in_direct_s * 1e6:.0f} us and per page-out {fit.page_out_direct_s * 1e6:.0f} us beyond the "
            f"storage fit, computes after them {fit.other_per_page_s * 1e6:+.0f} us per page-in/out; run "
            f"{cal.measured_s * 1e3:.2f} ms busy vs {cal.predicted_s * 1e3:.2f} ms without the overhead (medians)"
        )
        say(
            f"paging overhead: page-in +{hp.page_in_overhead_s * 1e6:.0f} us, page-out "
            f"+{hp.page_out_overhead_s * 1e6:.0f} us ({hp.page_overhead_note})"
        )
    finally:
        torch.set_num_threads(threads0)
    hp.seconds = time.perf_counter() - t0
    atomic_write_text(a.out, profile_toml(hp))
    load_device(a.out)  # what was written reads back
    print(
        f"wrote {a.out}: {len(samples)} ops of {', '.join(specs)} in {len(fams)} families; "
        f"storage write {storage.write.latency_s * 1e3:.3f} ms + {storage.write.bytes_per_s / 1e6:.1f} MB/s "
        f"(fit error median {storage.write.median_rel_error:.0%}), read {storage.read.latency_s * 1e3:.3f} ms + "
        f"{storage.read.bytes_per_s / 1e6:.1f} MB/s (median {storage.read.median_rel_error:.0%}), "
        f"page-in +{hp.page_in_overhead_s * 1e6:.0f} us, page-out +{hp.page_out_overhead_s * 1e6:.0f} us when "
        f"executed; "
        f"power {power.compute_w:.3g} W ({power.source}); {hp.seconds:.0f} s"
    )
    for f in fams:
        print(
            f"  {f.name:<14} {f.ops:4d} ops  {f.fit.latency_s * 1e6:9.1f} us + FLOPs / {f.fit.bytes_per_s / 1e9:8.3g} "
            f"GFLOP/s  fit error median {f.fit.median_rel_error:5.1%} max {f.fit.max_rel_error:6.1%}  "
            f"spread {f.spread:5.1%}"
        )
    if power.source == "none":
        print(f"note: {power.note}", file=sys.stderr)
    return 0


def _import(a, say) -> int:
    from ..fileio import atomic_write_text
    from ..graph.io import save_graph
    from ..hardware.device import load_device
    from ..hardware.profile_import import imported_graph, imported_profile_toml, read_measurements

    if not (a.out or a.graph_out):
        raise ValueError("--import needs --out board.toml (a profile) and/or --graph-out graph.json (a costed graph)")
    m = read_measurements(a.import_csv)
    say(f"{a.import_csv}: {len(m.ops)} op rows, {len(m.storage)} storage rows")
    if a.out:
        atomic_write_text(
            a.out,
            imported_profile_toml(m, name=a.name or "board", power_w=a.power_w, storage_power_w=a.storage_power_w),
        )
        load_device(a.out)
        print(f"wrote {a.out}: device profile from {a.import_csv}")
    if a.graph_out:
        g = imported_graph(m, device=a.device, power_w=a.power_w, storage_power_w=a.storage_power_w)
        save_graph(g, a.graph_out)
        print(f"wrote {a.graph_out}: {g.name}, {len(g)} nodes, {len(g.edges)} edges (poet-graph/1)")
    return 0
