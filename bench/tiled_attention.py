"""Executed tiled attention: minimum RAM with key/value tiles streamed against query-only tiling.

For a demo model of :mod:`poet.demo_models` (default ``gpt``: TinyGPT, d 32, 2 heads, 2 layers,
one sequence of 128 tokens, SGD with momentum as in ``poet train``), the step is traced once and tiled
with every op split (``tile_program(..., threshold=0)``) at each tile count, once with attention
streamed (online softmax, one key/value tile per step) and once with query tiles reading the whole
keys and values (``stream_attention=False``, the rewrite before streaming).  Printed per count: nodes
and the minimum RAM of any schedule (fixed RAM included, and the activation part), plus the node
that sets it.

    PYTHONPATH=. python bench/tiled_attention.py [--model gpt] [--counts 2,4,8,16,32] [--device m4]
"""

from __future__ import annotations

import argparse
import time

import torch

import poet
from poet import demo_models as models
from poet.execute.tiled import tile_program
from poet.hardware.cost import costed_program


def limiting_node(g) -> str:
    ws = [nd.ram_bytes + sum(g.nodes[p].ram_bytes for p in g.preds[i]) for i, nd in enumerate(g.nodes)]
    i = max(range(len(ws)), key=ws.__getitem__)
    return g.nodes[i].name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--counts", default="2,4,8,16,32")
    ap.add_argument("--device", default="m4")
    a = ap.parse_args()
    model, loss_fn, data = models.build(a.model, dropout=0.0)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = data.batch()
    probe = poet.plan(
        model, x, loss_fn, targets=y, device=a.device, memory="100%", strategy="keep-all", optimizer=opt, tile="off"
    )
    prog, g0 = probe.program, probe.graph
    fixed = g0.fixed_ram_bytes
    print(f"{a.model}: untiled {len(g0)} nodes, minimum RAM {g0.min_ram_bytes()} B (fixed {fixed} B)")
    print("| tiles | attention | nodes | min RAM B | activations B | set by | tiling s |")
    print("|---:|---|---:|---:|---:|---|---:|")
    for c in (int(v) for v in a.counts.split(",")):
        for stream in (False, True):
            t0 = time.perf_counter()
            tp, _ = tile_program(prog, c, 0, stream_attention=stream)
            g = costed_program(tp, a.device, fixed)
            m = g.min_ram_bytes()
            print(
                f"| {c} | {'K/V streamed' if stream else 'query tiles'} | {len(g)} | {m:,} | {m - fixed:,} | "
                f"{limiting_node(g)} | {time.perf_counter() - t0:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
