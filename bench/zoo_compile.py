"""A zoo schedule compiled to C, run on the host and checked against PyTorch; the issue-36 ResNet-18 case.

    python bench/zoo_compile.py --schedule s.json [--out DIR] [--allow BYTES]

Without ``--schedule`` it first solves ``resnet18_cifar`` on ``m0`` at 32,768 B with a 3x deadline
(``poet solve``, about 4 minutes).  Prints: the schedule's peak, the arena (and every re-solve the fit
tried), then, when the arena fits, the host build's RAM use, the run's seconds and the worst loss and
gradient errors against ``zoo_module`` autograd, and the result of linking for ``qemu-m4`` with a RAM
region of the budget.  When the arena cannot be made to fit, ``--allow BYTES`` compiles and runs with
the budget raised to BYTES to measure the rest (said as such in the output).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    from poet.cbackend import qemu_m4
    from poet.cbackend.compiler import ArenaTooLarge, compile_program
    from poet.cbackend.lower_zoo import zoo_program
    from poet.schedule.io import load_schedule

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedule")
    ap.add_argument("--out")
    ap.add_argument("--allow", type=int, default=None, help="budget to compile with if the arena cannot fit")
    ap.add_argument("--fit-time-limit", type=float, default=300.0)
    a = ap.parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="poet-zoo-"))
    path = a.schedule
    if path is None:
        path = str(out / "s.json")
        cmd = [sys.executable, "-m", "poet", "solve", "--model", "resnet18_cifar", "--device", "m0"]
        cmd += ["--memory", "32768", "--runtime", "3x", "--out", path, "--force"]
        print("solving:", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True)
    s = load_schedule(path)
    zp = zoo_program(s.graph)
    peak = s.totals.peak_ram_bytes - s.graph.fixed_ram_bytes
    print(
        f"schedule: {len(s.graph.nodes):,} nodes, {len(s.steps):,} steps, "
        f"peak {peak:,} B, budget {s.budget.ram_bytes:,} B"
    )
    say = lambda t: print("  " + t, flush=True)  # noqa: E731
    budget = s.budget.ram_bytes
    try:
        r = compile_program(
            zp, s, out=out / "proj", run=True, check=True, force=True, progress=say, fit_time_limit_s=a.fit_time_limit
        )
    except ArenaTooLarge as e:
        print(f"the arena does not fit the budget: {e}")
        if a.allow is None:
            return 1
        print(f"MEASURING WITH THE BUDGET RAISED TO {a.allow:,} B (not the issue's setting)")
        s = s.with_(budget=dataclasses.replace(s.budget, ram_bytes=a.allow))
        r = compile_program(
            zp, s, out=out / "proj", run=True, check=True, force=True, progress=say, fit_time_limit_s=a.fit_time_limit
        )
    print("\n".join(r.lines()))
    print(
        f"host run: {r.seconds.get('run', float('nan')):.2f} s; compile {r.seconds['compile']:.1f} s, "
        f"build {r.seconds.get('build', float('nan')):.1f} s"
    )
    if r.check is not None:
        g, lo = r.check.worst("grad"), r.check.worst("loss")
        print(f"max gradient error: {g.relative:.2e} of its scale ({g.name}); loss {lo.relative:.2e}")
    if qemu_m4.missing() is None:
        t = time.monotonic()
        try:
            b = qemu_m4.build(r.project.path, budget)
            print(f"qemu-m4 link with a {budget:,} B RAM region: {b.memory.describe()}")
        except Exception as e:  # the link's own message says what does not fit
            print(f"qemu-m4 link with a {budget:,} B RAM region FAILED ({time.monotonic() - t:.0f} s): {e}")
    else:
        print("qemu-m4 toolchain missing:", qemu_m4.missing())
    return 0


if __name__ == "__main__":
    sys.exit(main())
