"""How the torch tests compare a planned step with eager autograd (docs/torch.md, "Tiling numerics").

Untiled steps must equal ``loss.backward()`` bit for bit.  Tiled steps sum in another order, so a
gradient must be within ``GRADIENT_BOUND`` of float32 autograd's relative to its largest element,
or, where float32 autograd is itself inexact (a sum that cancels: a BatchNorm weight whose loss is
scale-invariant), no more than twice as far from the float64 gradient as float32 autograd is; a
gradient that is 0 in exact arithmetic is held to the bound relative to the model's largest gradient.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from poet.execute.tiled import GRADIENT_BOUND, relative_difference


@dataclass
class Eager:
    """Eager autograd's loss and gradients for one step, in float32 and float64."""

    loss: torch.Tensor
    grads: dict
    loss64: torch.Tensor
    grads64: dict = field(default_factory=dict)


def _double(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def eager_step(model, inputs, targets, loss_fn) -> Eager:
    """``loss_fn(model(*inputs), *targets).backward()`` on copies of ``model`` (float32 and float64)."""
    ref = copy.deepcopy(model)
    loss = loss_fn(ref(*inputs), *targets)
    loss.backward()
    ref64 = copy.deepcopy(model).double()
    loss64 = loss_fn(ref64(*map(_double, inputs)), *targets)
    loss64.backward()
    grads = {k: p.grad for k, p in ref.named_parameters() if p.grad is not None}
    grads64 = {k: p.grad for k, p in ref64.named_parameters() if p.grad is not None}
    return Eager(loss.detach(), grads, loss64.detach(), grads64)


ZERO_GRADIENT = 1e-7  # a float64 gradient this far below the model's largest is 0 in exact arithmetic


def tiled_error(g, g32, g64, model_scale: float | None = None) -> float:
    """How far a tiled gradient is, in units of the bound: <= 1 passes (see the module docstring).

    A gradient that is 0 in exact arithmetic (a key bias under softmax, a bias before BatchNorm:
    its float64 value is rounding noise, below ``ZERO_GRADIENT`` of ``model_scale``, the model's
    largest gradient) has no relative error to speak of: it is compared with ``model_scale``.
    """
    if model_scale and g64.numel() and float(g64.abs().max()) <= ZERO_GRADIENT * model_scale:
        return float((g.double() - g64).abs().max()) / (GRADIENT_BOUND * model_scale)
    near = relative_difference(g, g32) / GRADIENT_BOUND
    if near <= 1:
        return near
    allowed = max(GRADIENT_BOUND, 2 * relative_difference(g32.double(), g64))
    return relative_difference(g.double(), g64) / allowed


def worst_tiled_error(result, eager: Eager) -> tuple[float, str]:
    """The largest :func:`tiled_error` over the loss and every gradient of a run, and whose it is."""
    worst = (tiled_error(result.loss, eager.loss, eager.loss64), "loss")
    scale = max((float(g.abs().max()) for g in eager.grads64.values() if g.numel()), default=0.0)
    for k, g32 in eager.grads.items():
        worst = max(worst, (tiled_error(result.grads[k], g32, eager.grads64[k], scale), k))
    return worst


def bitwise_equal(result, eager: Eager) -> list[str]:
    """The names of the loss and gradients of a run that differ from eager float32 autograd's at all."""
    bad = [] if torch.equal(result.loss, eager.loss) else ["loss"]
    return bad + [k for k, g in eager.grads.items() if not torch.equal(result.grads[k], g)]
