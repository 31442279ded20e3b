"""Running traced aten ops through their specs and C kernels, as the lowering will: the spec names
the kernel, its tensor inputs (viewed with the output's shape when the spec broadcasts) and its
scalars; the kernel writes fresh outputs, which the tests compare with what torch computed."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from poet.cbackend import hostlib, vocabulary


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        out = super().run_node(n)
        self.values[n] = out
        return out


def trace(fn, *args):
    """(the aten ops of ``fn(*args)`` but views, as FX nodes; each node's value when run on ``args``)."""
    gm = make_fx(fn)(*args)
    rec = _Recorder(gm)
    rec.run(*args)
    # views (t, expand, view ...) are the lowering's: strided views of their base, no kernel
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and not getattr(n.target, "is_view", False)]
    return nodes, rec.values


def run_kernel(node, values):
    """(torch's outputs, the C kernel's outputs) of one node, as tuples (None for an absent item)."""
    spec = vocabulary.spec_for(node)
    want = values[node]
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    ins = []
    for a in spec.inputs:
        v = None if a is None else values[a]
        if v is not None and spec.broadcast:
            v = v.expand(want[0].shape)
        ins.append(v)
    got = tuple(
        None if w is None else torch.full_like(w, -7 if not w.is_floating_point() else float("nan")) for w in want
    )
    hostlib.call(spec.kernel, ins, got, spec.scalars)
    return want, got


def set_step_seed(seed: int) -> None:
    """What the runtime does before each step: the seed dropout's masks are drawn from."""
    hostlib.set_rng_seed(seed)
