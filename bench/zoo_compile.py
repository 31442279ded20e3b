"""Zoo schedules compiled to C: ResNet-18 (CIFAR) in the issue's 32 KiB setting, and a block of it on qemu-m4.

    python bench/zoo_compile.py [--schedule s.json] [--out DIR] [--parts r18,block]

``r18``: without ``--schedule`` it first solves ``resnet18_cifar`` on ``m0`` at 32,768 B with a 3x deadline
(``poet solve``, about 4 minutes).  Then, as ``poet compile`` does: (1) the host target: arena, run
seconds, worst gradient error against ``zoo_module`` autograd; (2) the qemu-m4 target with a RAM region
of the budget: what the firmware holds besides the arena (measured: stack bound from its machine code,
data, bss), the re-solve for what is left (the network tiled again, into channel groups), the link's
RAM map; the image cannot run on mps2-an386 (44.7 MB of weights against its 4 MiB of flash), so the same
project (its arena and tables) is run on the host and checked.  ``block``: ResNet-18's stem and first
block (64 channels at 32x32, the rows that set ResNet-18's 32 KiB) with its own classifier, under the
same 32 KiB RAM region, run on the emulator and checked, and the same project run on the host: host and
emulator results compared bit for bit.  Prints every figure docs/cbackend.md quotes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET = 32768


def _figures(label: str, r, solve_s: float | None = None) -> None:
    s = r.schedule
    print(f"== {label}")
    print(f"nodes {len(s.graph.nodes):,}, steps {len(s.steps):,}, schedule peak {r.peak_bytes:,} B, ", end="")
    print(f"arena {r.arena_bytes:,} B")
    if solve_s is not None:
        print(f"solve {solve_s:.0f} s")
    print("\n".join(r.lines()))
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()))
    if r.check is not None:
        g, lo = r.check.worst("grad"), r.check.worst("loss")
        print(f"max gradient error {g.relative:.2e} ({g.name}); loss {lo.relative:.2e}")


def _r18(out: Path, path: str | None, say) -> None:
    from poet.cbackend.compiler import compile_program
    from poet.cbackend.lower_zoo import zoo_program
    from poet.schedule.io import load_schedule

    solve_s = None
    if path is None:
        path = str(out / "s.json")
        cmd = [sys.executable, "-m", "poet", "solve", "--model", "resnet18_cifar", "--device", "m0"]
        cmd += ["--memory", str(BUDGET), "--runtime", "3x", "--out", path, "--force"]
        print("solving:", " ".join(cmd[2:]), flush=True)
        t = time.monotonic()
        subprocess.run(cmd, check=True)
        solve_s = time.monotonic() - t
    s = load_schedule(path)
    zp = zoo_program(s.graph)
    host = compile_program(zp, s, out=out / "host", run=True, check=True, force=True, progress=say)
    _figures("resnet18_cifar m0 32,768 B 3x, host target", host, solve_s)
    q = compile_program(
        zp, s, out=out / "qemu", target="qemu-m4", run=True, check=True, force=True, progress=say, fit_time_limit_s=600
    )
    _figures("resnet18_cifar m0 32,768 B 3x, qemu-m4 target (run on the host: the board cannot hold it)", q)


def _block(out: Path, say) -> None:
    import numpy as np

    from poet.cbackend.compiler import compile_program
    from poet.cbackend.layout import read_out
    from poet.cbackend.lower_zoo import zoo_program
    from poet.cbackend.target_table import get_target
    from poet.graph.tiling import build_tiled
    from poet.graph.tiling_plan import plan_tiling
    from poet.graph.zoo import DATA, ModelLayers
    from poet.graph.zoo_layers import NetBuilder
    from poet.solve.api import solve

    net = NetBuilder((3, 32, 32))  # resnet18_cifar's stem and its first basic block, then a classifier
    x = net.relu("relu1", net.batchnorm("bn1", net.conv("conv1", DATA, 64, 3, 1, 1)))
    y = net.relu("b.relu1", net.batchnorm("b.bn1", net.conv("b.conv1", x, 64, 3, 1, 1)))
    y = net.relu("b.relu2", net.add("b.add", net.batchnorm("b.bn2", net.conv("b.conv2", y, 64, 3, 1, 1)), x))
    net.linear("fc", net.flatten("flatten", net.avgpool("avgpool", y, 32)), 10)
    ml = ModelLayers("r18_block", net.input_shape, tuple(net.layers))
    t = time.monotonic()
    plan = plan_tiling(ml, BUDGET)
    s = solve(build_tiled(ml, plan.counts, 1).graph, "m0", memory=BUDGET, runtime="3x", time_limit=120)
    solve_s = time.monotonic() - t
    print(f"block network: {len(s.graph.nodes):,} nodes, {s.status}, solved in {solve_s:.0f} s", flush=True)
    zp = zoo_program(s.graph, layers=ml)
    q = compile_program(
        zp, s, out=out / "block", target="qemu-m4", run=True, check=True, force=True, progress=say, fit_time_limit_s=600
    )
    _figures("r18 stem + first block, 32,768-B RAM region, qemu-m4", q, solve_s)
    print(f"emulator: {q.run.instructions:,} instructions, stack high-water {q.run.stack_used:,} B")
    host = get_target("host")
    hb = host.build(q.project.path, BUDGET)
    t = time.monotonic()
    run = host.run(hb, out / "block-host-run", count=False, timeout_s=600)
    h = read_out(q.project.layout, out / "block-host-run" / "out.bin")
    same = h.losses == q.results.losses and all(np.array_equal(g, h.grads[0][k]) for k, g in q.results.grads[0].items())
    print(
        f"the same project on the host ({time.monotonic() - t:.2f} s, {run.problem() or 'ok'}): "
        f"loss and every gradient {'bit for bit the emulator' if same else 'DIFFER from the emulator'}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedule", help="a resnet18_cifar m0 32,768-B schedule (default: solve one)")
    ap.add_argument("--out")
    ap.add_argument("--parts", default="r18,block")
    a = ap.parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="poet-zoo-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    say = lambda text: print(f"  [{time.monotonic() - t0:6.0f} s] {text}", flush=True)  # noqa: E731
    parts = set(a.parts.split(","))
    if "r18" in parts:
        _r18(out, a.schedule, say)
    if "block" in parts:
        _block(out, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
