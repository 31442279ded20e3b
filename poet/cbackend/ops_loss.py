"""Specs of losses (kernels: runtime/kernels_loss.c): nll_loss (the cross-entropy after log_softmax),
its tiled partial sums and their combination, mse_loss."""

from __future__ import annotations

from .opspec import CallSpec, arg, register


@register("aten.nll_loss_forward.default")
def nll_loss_forward(n) -> CallSpec:
    logp, target, weight, reduction, ignore = n.args[:5]
    return CallSpec("nll_loss", (logp, target, weight), (int(reduction), int(ignore)))


@register("aten.nll_loss_backward.default")
def nll_loss_backward(n) -> CallSpec:
    grad, logp, target, weight, reduction, ignore, total_weight = n.args[:7]
    return CallSpec("nll_loss_backward", (grad, logp, target, weight, total_weight), (int(reduction), int(ignore)))


@register("poet.execute.tiled_ops.tile_nll_partial")
def tile_nll_partial(n) -> CallSpec:
    logp, target, weight, ignore = n.args[:4]
    return CallSpec("nll_partial", (logp, target, weight), (int(ignore),))


@register("poet.execute.tiled_ops.tile_nll_combine")
def tile_nll_combine(n) -> CallSpec:
    partials, reduction = n.args[:2]
    return CallSpec("nll_combine", tuple(partials), (int(reduction), len(partials)))


@register("aten.mse_loss.default")
def mse_loss(n) -> CallSpec:
    return CallSpec("mse_loss", (n.args[0], n.args[1]), (int(arg(n, 2, "reduction", 1)),))


@register("aten.mse_loss_backward.default")
def mse_loss_backward(n) -> CallSpec:
    grad, x, target, reduction = n.args[:4]
    return CallSpec("mse_loss_backward", (grad, x, target), (int(reduction),), broadcast=True)
