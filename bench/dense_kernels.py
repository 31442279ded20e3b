"""The dense C kernels on the calls real training steps make: accuracy against aten on the host and,
where the qemu-m4 toolchain and the kernel probe are there, bit-identity with the host and
instructions per output element on the emulated Cortex-M4.

Every node with a spec in the traced steps of the demo models (untiled, and tiled into --tile tiles
with every op split) is called on the step's own values (poet.cbackend.spec_check).

    python bench/dense_kernels.py                       # mlp, gpt, bert; tiled in 2
    python bench/dense_kernels.py --models gpt --tile 4 --no-qemu
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict

import torch

from poet import demo_models as models
from poet.cbackend.spec_check import relative_error, run_beside, run_host
from poet.execute.tiled import tile_program
from poet.graph.torch_export import export_training_graph


def collect(names, tile):
    calls = []
    for name in names:
        model, loss, data = models.build(name, dropout=0.0)
        x, y = data.batch()
        prog = export_training_graph(model.train(), x, loss, y)
        run_beside(prog, calls.append)
        if tile:
            run_beside(tile_program(prog, tile, 0, 0)[0], calls.append)
        print(f"{name}: {len(calls)} calls so far", file=sys.stderr)
    return calls


def on_qemu(calls):
    """(instructions per call, host outputs equal?) or None with the reason printed."""
    try:
        probe = importlib.import_module("poet.cbackend.probe")
        qemu_m4 = importlib.import_module("poet.cbackend.qemu_m4")
    except ImportError:
        print("qemu-m4: no kernel probe in this tree (poet.cbackend.probe)", file=sys.stderr)
        return None
    missing = qemu_m4.QemuM4().missing() if hasattr(qemu_m4, "QemuM4") else None
    if missing:
        print(f"qemu-m4: {missing}", file=sys.stderr)
        return None
    pcalls = [
        probe.KernelCall(c.kernel, c.inputs, tuple(o.clone() if o is not None else None for o in c.outputs), c.scalars)
        for c in calls
    ]
    res = probe.run_on_qemu(pcalls, timeout_s=1200)
    same = [all(a is None or torch.equal(a, b) for a, b in zip(p.outputs, c.outputs)) for p, c in zip(pcalls, calls)]
    return res.instructions, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,gpt,bert")
    ap.add_argument("--tile", type=int, default=2, help="also the steps tiled into this many tiles (0: untiled only)")
    ap.add_argument("--no-qemu", action="store_true")
    args = ap.parse_args(argv)
    calls = collect([m for m in args.models.split(",") if m], args.tile)
    for c in calls:
        run_host(c)
    emu = None if args.no_qemu else on_qemu(calls)
    rows = defaultdict(lambda: [0, 0.0, 0, 0, 0])  # calls, max error, output elements, instructions, host == emulator
    for i, c in enumerate(calls):
        r = rows[c.kernel]
        r[0] += 1
        r[1] = max(r[1], relative_error(c, inputs_scale=False))
        r[2] += sum(o.numel() for o in c.outputs if o is not None)
        if emu is not None:
            r[3] += emu[0][i]
            r[4] += emu[1][i]
    print(f"models {args.models}, tiled in {args.tile}; error: max |kernel - aten| / max |aten| per output (host)")
    print("\n| kernel | calls | max relative error | qemu-m4 = host | instructions / output element |")
    print("|---|---:|---:|---:|---:|")
    for k, (n, err, elems, ins, same) in sorted(rows.items()):
        q = (f"{same}/{n}", f"{ins / max(elems, 1):.1f}") if emu is not None else ("-", "-")
        print(f"| {k} | {n} | {err:.2g} | {q[0]} | {q[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
