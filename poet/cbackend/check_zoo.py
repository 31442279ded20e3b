"""The PyTorch reference of a compiled zoo step: :func:`poet.graph.zoo_torch.zoo_module` on the same
weights and batches (BatchNorm in training, cross-entropy mean over the batch), trained with SGD as
``torch.optim.SGD``; compared with the compiled run by :func:`poet.cbackend.check.compare`."""

from __future__ import annotations

import numpy as np
import torch

from ..graph.zoo_torch import zoo_module
from .check import ReferenceRun
from .lower_zoo import ZooProgram

__all__ = ["zoo_reference"]


def _named(module, zp: ZooProgram) -> dict:
    out = {}
    for lay in zp.layers.layers:
        if lay.params:
            for pn, p in module.layer_module(lay.name).named_parameters():
                out[f"{lay.name}.{pn}"] = p
    return out


def zoo_reference(zp: ZooProgram, batches, *, lr: float, momentum: float = 0.0) -> ReferenceRun:
    """Train ``zp``'s reference module from its weights for ``len(batches)`` steps of ``(input, labels)``."""
    module = zoo_module(zp.layers, seed=zp.seed)
    params = _named(module, zp)
    with torch.no_grad():  # the program's weights are the module's, checked here once more
        for k, p in params.items():
            if not np.array_equal(p.detach().numpy(), zp.params[k]):
                raise AssertionError(f"{k}: the reference module's weights differ from the compiled program's")
    grads64 = _first_step_float64(module, zp, batches[0]) if batches else {}
    opt = torch.optim.SGD(list(params.values()), lr=lr, momentum=momentum)
    losses, grads = [], []
    for x, y in batches:
        opt.zero_grad(set_to_none=False)
        out = module(torch.as_tensor(np.asarray(x, dtype=np.float32)))
        loss = torch.nn.functional.cross_entropy(out, torch.as_tensor(np.asarray(y, dtype=np.int64)))
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({k: p.grad.detach().numpy().copy() for k, p in params.items()})
        opt.step()
    final = {k: p.detach().numpy().copy() for k, p in params.items()}
    return ReferenceRun(tuple(losses), tuple(grads), final, {}, grads64)


def _first_step_float64(module, zp: ZooProgram, batch) -> dict:
    """The first step's gradients of a float64 copy of the module (how exact float32 can be: the check
    holds a sum that cancels to twice PyTorch's own float32 error against these)."""
    import copy

    m64 = copy.deepcopy(module).double()
    x, y = batch
    out = m64(torch.as_tensor(np.asarray(x, dtype=np.float64)))
    torch.nn.functional.cross_entropy(out, torch.as_tensor(np.asarray(y, dtype=np.int64))).backward()
    return {k: p.grad.detach().numpy().copy() for k, p in _named(m64, zp).items()}
