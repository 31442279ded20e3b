"""ResNet-18 (CIFAR) compiled with its weights streamed from storage (``--weights stream``).

    python bench/r18_stream.py --schedule s.json [--target host|qemu-m4] [--out DIR]

``s.json``: ``poet solve --model resnet18_cifar --device D --memory B --weights stream --runtime R --out s.json``.
Compiles it as ``poet compile --schedule s.json --target T --run --check`` does, then prints: the
schedule (nodes, steps, budget, staging buffer), the RAM the build holds, the bytes and transfers the step
moved beside the schedule's priced weight traffic, the run's seconds (and on qemu-m4 its measured
instructions per kind), and the worst gradient and updated-weight errors against PyTorch's ResNet-18
(``zoo_module``, same initial weights, one SGD step).  A schedule the backend refuses is reported with its
message.  Figures in docs/weights.md, for both of the issue's settings:

    poet solve --model resnet18_cifar --device m4 --memory 262144 --weights stream --runtime 602 \
        --time-limit 120 --out s.json
    poet solve --model resnet18_cifar --device m0 --memory 32768 --weights stream --runtime 20550 \
        --time-limit 120 --out s.json
    python bench/r18_stream.py --schedule s.json --target qemu-m4

At 32 KiB the RAM region (arena, staging buffer, stack, data, bss) is the 32,768-B budget: the compile
solves again for a smaller arena when the schedule's does not fit beside the stack and statics.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedule", required=True)
    ap.add_argument("--target", default="host", choices=("host", "qemu-m4"))
    ap.add_argument("--out", default=None, help="project folder (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds the run may take")
    args = ap.parse_args(argv)
    from poet.cbackend.compiler import compile_program
    from poet.cbackend.ir import LoweringError
    from poet.cbackend.lower_zoo import zoo_program
    from poet.schedule.io import load_schedule

    s = load_schedule(args.schedule)
    g = s.graph
    print(f"schedule {args.schedule}: {g.name}, {len(g.nodes):,} nodes, {len(s.steps):,} steps, weights {g.placement}")
    print(f"budget {s.budget.ram_bytes:,} B, fixed RAM {g.fixed_ram_bytes:,} B (staging {g.weights.staging_bytes:,} B)")
    out = Path(args.out) if args.out else Path(os.environ.get("TMPDIR", "/tmp")) / f"r18-stream-{os.getpid()}"
    t0 = time.monotonic()
    try:
        r = compile_program(
            zoo_program(g, seed=0), s, out=out, target=args.target, run=True, check=True, force=True,
            timeout_s=args.timeout, progress=lambda m: print("  " + m, flush=True),
        )  # fmt: skip
    except LoweringError as e:
        print(f"refused: {e}")
        return 2
    print("\n".join(r.lines()))
    secs = ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items())
    print(f"wall seconds: total {time.monotonic() - t0:.0f}; {secs}")
    if r.check is not None:
        gr, pa = r.check.worst("grad"), r.check.worst("param")
        print(f"worst gradient error {gr.relative:.2e} ({gr.name}); worst updated weight {pa.relative:.2e} ({pa.name})")
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
