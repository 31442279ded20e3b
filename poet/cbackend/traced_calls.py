"""Every kernel call of a traced program, with the values its example batch gives the inputs.

The lowering (:func:`poet.cbackend.lower.lower_program`) says which kernel each node calls and the
geometry of every argument; this module runs the traced step once more, keeps every value, and
pairs each call with real tensors of exactly that geometry: the inputs are views of the values the
step computed, the outputs empty tensors of the outputs' sizes and strides.  A call can then run
anywhere the kernels run (the host library, the emulator's probe) on the data the step itself sees,
so data-dependent paths and instruction counts are the step's.  :func:`call_signature` names what
makes two calls cost the same (kernel, dtypes, sizes, strides, scalars), and keys the instruction
profile's table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from ..graph.torch_run import placeholder_values
from .ir import KernelCall, KernelProgram, LoweringError
from .lower import lower_program
from .probe import KernelCall as ProbeCall
from .vocabulary import spec_for

__all__ = ["TracedCall", "call_signature", "step_values", "traced_calls"]

TORCH_DTYPE = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "uint8": torch.uint8,
}


def call_signature(call: KernelCall) -> str:
    """What a call's instruction count depends on besides the data: ``kernel|inputs|tensors|scalars``."""
    ts = ";".join(
        "-" if r is None else f"{r.dtype}{list(r.sizes)}{list(r.strides)}".replace(" ", "") for r in call.tensors
    )
    return f"{call.kernel}|{call.n_inputs}|{ts}|{','.join(repr(s) for s in call.scalars)}"


@dataclass(frozen=True)
class TracedCall:
    node: int  # the poet node whose compute makes the call
    call: KernelCall  # as lowered (geometry, scalars)
    probe: ProbeCall  # the same call on real tensors (outputs empty, NaN-filled where floating)

    @property
    def signature(self) -> str:
        return call_signature(self.call)


def step_values(program) -> dict[str, object]:
    """FX name -> value of every node of ``program``'s joint graph, run once on its example batch
    (every value kept; the generator's state restored afterwards)."""
    vals = placeholder_values(program.placeholders, program.params, program.buffers, program.example_batch)
    values: dict[str, object] = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n.name] = out
            return out

    rng = torch.get_rng_state()
    try:
        with torch.enable_grad():  # as traced (see the executor)
            Keep(program.gm, garbage_collect_values=False).run(*vals)
    except Exception as e:
        raise LoweringError(f"running the traced step for its values failed: {type(e).__name__}: {e}") from e
    finally:
        torch.set_rng_state(rng)
    return values


def _output(ref):
    if ref is None:
        return None
    t = torch.empty_strided(ref.sizes, ref.strides, dtype=TORCH_DTYPE[ref.dtype])
    return t.fill_(float("nan") if t.is_floating_point() else -1) if t.numel() else t


def traced_calls(program, kp: KernelProgram | None = None) -> list[TracedCall]:
    """Every call of every node of ``program`` (lowered again unless ``kp`` is given), in node order."""
    kp = kp if kp is not None else lower_program(program)
    values = step_values(program)
    fx = {n.name: n for n in program.gm.graph.nodes}
    out = []
    for nd in kp.nodes:
        for c in nd.calls:
            spec = spec_for(fx[c.fx_name])
            ins = []
            for a, ref in zip(spec.inputs, c.tensors[: c.n_inputs]):
                if ref is None:
                    ins.append(None)
                    continue
                v = values.get(a.name)
                if not isinstance(v, torch.Tensor):
                    raise LoweringError(f"call pk_{c.kernel} of node {nd.name}: input {a.name} has no tensor value")
                ins.append(torch.as_strided(v.detach(), ref.sizes, ref.strides))
            outs = tuple(_output(r) for r in c.tensors[c.n_inputs :])
            out.append(TracedCall(nd.node, c, ProbeCall(c.kernel, tuple(ins), outs, tuple(c.scalars))))
    return out
