"""Specs of LayerNorm and its gradients (kernels: runtime/kernels_norm.c), and of the tiled weight/bias
gradient accumulated over tiles of tokens."""

from __future__ import annotations

from .opspec import CallSpec, register


@register("aten.native_layer_norm.default")
def layer_norm(n) -> CallSpec:
    x, shape, weight, bias, eps = n.args[:5]
    return CallSpec("layer_norm", (x, weight, bias), (len(shape), float(eps)))


@register("aten.native_layer_norm_backward.default")
def layer_norm_backward(n) -> CallSpec:
    go, x, shape, mean, rstd, weight, _bias, _mask = n.args[:8]
    return CallSpec("layer_norm_backward", (go, x, mean, rstd, weight), (len(shape),))


@register("poet.execute.tiled_ops.tile_layer_norm_param_grad")
def tile_layer_norm_param_grad(n) -> CallSpec:
    acc_w, acc_b, go, x, mean, rstd = n.args[:6]
    return CallSpec("layer_norm_param_grad", (acc_w, acc_b, go, x, mean, rstd))
