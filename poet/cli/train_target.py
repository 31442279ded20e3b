"""``poet train --target``: the plan compiled to C and trained there, with ``poet compile``'s
helpers (``compile.py``)."""

from __future__ import annotations

import dataclasses
import sys

from .compile import batches, check_out_dir, progress_printer, user_errors


def add_train_options(t) -> None:
    """``poet train``'s options for running the step compiled to C."""
    from ..cbackend.targets import TARGETS

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


def target_report(a, plan, res) -> dict:
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
            check_out_dir(a.out, a.force)
            out = Path(a.out)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="poet-train-")
            out = Path(tmp.name) / "project"
        res = plan.compile(
            a.target,
            out,
            run=True,
            check=a.check,
            batches=batches(data, first, a.steps),
            lr=a.lr,
            momentum=0.9,  # poet train's optimizer: torch.optim.SGD(lr, momentum=0.9)
            force=a.force,
            progress=progress_printer(a),
        )
        report = target_report(a, plan, res)
        if a.json:
            print(json.dumps(report, indent=1))
        else:
            print("\n".join(res.lines()))
            if res.results is not None:
                for s, loss in enumerate(res.results.losses):
                    print(f"step {s + 1:4d}/{a.steps}  loss {loss:.6f}  ({a.target})")
        return 0 if res.ok else 1
    except user_errors() as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()
