"""Each op spec beside the op it stands for, on a traced step's own values.

:func:`run_beside` runs a traced (or tiled) training step once on its example batch and, at every
node whose op has a spec, hands a :class:`SpecCall` to a visitor: the spec's kernel, the node's real
argument values in the spec's order (views exactly as the step made them, broadcast to the first
output's shape where the spec says the lowering does so), fresh output tensors with the op's own
sizes and strides, the scalars, and what aten computed.  :func:`run_host` runs a call on the host
library and :func:`relative_error` compares it.  The kernel tests use it to check every spec of real
models; ``bench/dense_kernels.py`` to measure accuracy and, on the emulator, instructions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.fx

from ..graph.torch_run import placeholder_values
from . import hostlib, rng, vocabulary
from .opspec import SPECS, target_key

__all__ = ["DRAWING", "DROPOUT_SEED", "SpecCall", "relative_error", "run_beside", "run_host"]

# ops whose kernel draws its own random numbers (dropout's counter-based masks): aten's draw comes from
# torch's generator, so their expected outputs are poet.cbackend.rng's for DROPOUT_SEED (the kernel
# library's and the probe firmware's default step seed), which run_host sets
DRAWING = frozenset({"aten.native_dropout.default"})
DROPOUT_SEED = 0


@dataclass(frozen=True)
class SpecCall:
    node: str  # FX node name
    op: str  # registry key of its op
    kernel: str
    inputs: tuple  # torch tensors (views of the step's values) or None
    outputs: tuple  # fresh tensors of the op's sizes and strides (filled with -1), or None items
    scalars: tuple
    expected: tuple  # the op's own outputs (None items where the op returned None)


def _fresh(o):
    if not isinstance(o, torch.Tensor):
        return None
    return torch.empty_strided(o.shape, o.stride(), dtype=o.dtype).fill_(-1)


def run_beside(program, visit: Callable[[SpecCall], None]) -> None:
    """Run ``program``'s step once; ``visit`` every node that has a spec (in graph order) before the
    step goes on.  Nodes whose op has no spec run as usual and are not visited; an op that draws random
    numbers (:data:`DRAWING`) is visited with the reference draw as its expected outputs."""
    vals = placeholder_values(program.placeholders, program.params, program.buffers, program.example_batch)

    class Beside(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n.op != "call_function" or target_key(n.target) not in SPECS:
                return out
            spec = vocabulary.spec_for(n)
            outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            if target_key(n.target) in DRAWING:
                x, p, train = self.env[n.args[0]], float(n.args[1]), n.args[2] if len(n.args) > 2 else True
                outs = rng.native_dropout(x, p, train, DROPOUT_SEED, rng.unit_of(n.name))
            first = next(o for o in outs if isinstance(o, torch.Tensor))
            ins = [self.env[a] if isinstance(a, torch.fx.Node) else a for a in spec.inputs]
            if spec.broadcast:
                ins = [x.expand(first.shape) if isinstance(x, torch.Tensor) else x for x in ins]
            visit(
                SpecCall(
                    n.name,
                    target_key(n.target),
                    spec.kernel,
                    tuple(ins),
                    tuple(_fresh(o) for o in outs),
                    tuple(spec.scalars),
                    tuple(o if isinstance(o, torch.Tensor) else None for o in outs),
                )
            )
            return out

    with torch.enable_grad():  # as the step was traced (see the executor)
        Beside(program.gm).run(*vals)


def run_host(call: SpecCall) -> None:
    """``call`` on the host kernel library: its outputs are written."""
    if call.kernel == "native_dropout":
        hostlib.set_rng_seed(DROPOUT_SEED)
    hostlib.call(call.kernel, list(call.inputs), list(call.outputs), call.scalars)


def relative_error(call: SpecCall, got: tuple | None = None, *, inputs_scale: bool = True) -> float:
    """Largest difference between ``got`` (default: the call's outputs) and aten's outputs, over the
    largest magnitude among aten's outputs (and, with ``inputs_scale``, the call's float inputs: a
    mean near 0 of values near 1 is judged on the values' scale).  0.0: bit for bit; inf: a non-float
    output differs."""
    got = call.outputs if got is None else got
    floats = [x for x in call.inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    scale = max([x.abs().max().item() for x in floats] + [0.0]) if inputs_scale else 0.0
    worst = 0.0
    for g, w in zip(got, call.expected):
        if g is None or w is None or torch.equal(g, w):
            continue
        if not g.is_floating_point():
            return float("inf")
        diff = (g.double() - w.double()).abs()
        diff[(g == w) | (g.isnan() & w.isnan())] = 0.0  # equal infinities differ by nothing
        err = diff.max().item()
        worst = max(worst, err / max(w.abs().max().item(), scale, 1e-30))
    return worst
