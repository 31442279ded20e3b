"""Running a traced training step once, on real tensors: real output sizes, and eager autograd's answer.

Extraction needs both: the bytes an op really allocates (fake tensors can
under-report) and how far the traced step's loss and gradients are from
``loss.backward()`` in eager mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from .torch_ops import ExtractionError, tensor_bytes

try:  # the module must import without torch; the functions need it
    import torch
    import torch.fx
except Exception:  # pragma: no cover
    torch = None


def placeholder_values(placeholders, params, buffers, batch) -> list:
    """Real values for the joint graph's placeholders ``(role, name, fx node)``: the parameters
    and buffers (detached), the batch, and the loss tangent d loss / d loss = 1."""
    vals = []
    for role, name, n in placeholders:
        if role == "param":
            vals.append(params[name].detach())
        elif role == "buffer":
            vals.append(buffers[name].detach())
        elif role == "input":
            x = batch[int(name)]
            vals.append(x.detach() if isinstance(x, torch.Tensor) else x)
        else:
            ref = n.meta["val"]
            vals.append(torch.ones(tuple(ref.shape), dtype=ref.dtype))
    return vals


@dataclass
class TracedRun:
    """What one run of the traced step gave: real output bytes per op, and the outputs."""

    sizes: dict[str, int]  # fx name -> bytes of the op's real outputs
    outputs: tuple  # the joint graph's outputs (loss, grads, buffer updates)


def run_traced(gm, ph_desc, params, buffers, batch, uname) -> TracedRun:
    """One run of the traced step on the example batch, for the bytes of every op's real outputs.

    The traced (fake) outputs' sizes are not always the kernels': the CPU LSTM's
    ``mkldnn_rnn_layer`` workspace is 0 B when traced and 28 kB for a 16-unit layer when
    run, so a plan priced from them exceeds its budget.  The run is the one plain
    training step the plan replaces; the generator's state is restored afterwards.
    """
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = placeholder_values(
        [(role, uname(name) if role in ("param", "buffer") else name, n) for (role, name), n in zip(ph_desc, phs)],
        params,
        buffers,
        batch,
    )
    sizes: dict[str, int] = {}
    outs: list = []

    at: list = [None]  # the node running, to name it when the step fails

    class Measure(torch.fx.Interpreter):
        def run_node(self, n):
            at[0] = n.name
            if n.op == "output":  # the flat list the output descriptors name, before regrouping
                outs.extend(self.map_nodes_to_values(n.args[0], n))
            out = super().run_node(n)
            if n.op == "call_function":
                sizes[n.name] = tensor_bytes(out)
            return out

    rng = torch.get_rng_state()
    try:
        with torch.enable_grad():  # as traced; see the executor
            Measure(gm).run(*vals)
    except Exception as e:
        err = ExtractionError(f"the traced training step failed on the example batch: {type(e).__name__}: {e}")
        err.node = at[0]
        raise err from e
    finally:
        torch.set_rng_state(rng)
    return TracedRun(sizes, tuple(outs))


def eager_difference(wrapper, batch, out_desc, outputs, uname) -> float | None:
    """Largest absolute difference between the traced step's loss and gradients and eager autograd's.

    torch.export decomposes ops whose eager kernels are fused (``nn.GRU`` on the CPU
    becomes matmuls and pointwise ops), and the decomposition rounds differently.
    The executor reproduces the traced step exactly, so this is what a comparison
    with ``loss.backward()`` will show.  Run on copies of the parameters and buffers
    (the model is untouched); ``None`` if eager mode could not be run that way.
    """
    try:
        ps = {k: p.detach().clone().requires_grad_(p.requires_grad) for k, p in wrapper.named_parameters()}
        bs = {k: b.detach().clone() for k, b in wrapper.named_buffers()}
        trained = [k for k, p in ps.items() if p.requires_grad]
        rng = torch.get_rng_state()
        try:
            with torch.enable_grad():
                loss = torch.func.functional_call(wrapper, {**ps, **bs}, tuple(batch))
                grads = torch.autograd.grad(loss, [ps[k] for k in trained], allow_unused=True)
        finally:
            torch.set_rng_state(rng)
    except Exception:
        return None
    eager = {"": loss.detach()}
    eager.update({uname(k): g for k, g in zip(trained, grads)})
    worst = 0.0
    for (role, name), val in zip(out_desc, outputs):
        key = "" if role == "loss" else uname(name) if role == "grad" else None
        ref = eager.get(key) if key is not None else None
        if ref is None or not isinstance(val, torch.Tensor) or ref.shape != val.shape:
            continue
        worst = max(worst, float((ref - val).abs().max()) if val.numel() else 0.0)
    return worst


__all__ = ["TracedRun", "eager_difference", "placeholder_values", "run_traced"]
