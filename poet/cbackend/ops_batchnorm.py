"""Specs of BatchNorm (training and eval), its gradient and its tile kernels (kernels: runtime/kernels_batchnorm.c).

One forward kernel, ``batch_norm(x, w, b, running_mean, running_var -> y, save_mean, save_invstd
[, new_running_mean, new_running_var]; training, momentum, eps)``, serves aten's functional training
op, the no-stats op (BatchNorm without running statistics) and the eval op; absent tensors are None.
"""

from __future__ import annotations

from .opspec import CallSpec, need_float32, register


@register("aten._native_batch_norm_legit_functional.default")
def batch_norm_functional(n) -> CallSpec:
    x, w, b, rm, rv, training, momentum, eps = n.args[:8]
    need_float32(n, x, w, b)
    return CallSpec("batch_norm", (x, w, b, rm, rv), (int(bool(training)), float(momentum), float(eps)))


@register("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(n) -> CallSpec:
    x, w, b, training, momentum, eps = n.args[:6]
    need_float32(n, x, w, b)
    return CallSpec("batch_norm", (x, w, b, None, None), (int(bool(training)), float(momentum), float(eps)))


@register("aten._native_batch_norm_legit_no_training.default")
def batch_norm_eval(n) -> CallSpec:
    x, w, b, rm, rv, momentum, eps = n.args[:7]
    need_float32(n, x, w, b)
    return CallSpec("batch_norm", (x, w, b, rm, rv), (0, float(momentum), float(eps)))


@register("aten.native_batch_norm_backward.default")
def batch_norm_backward(n) -> CallSpec:
    go, x, w, rm, rv, save_mean, save_invstd, train, eps = n.args[:9]
    need_float32(n, go, x, w)
    return CallSpec("batch_norm_backward", (go, x, w, rm, rv, save_mean, save_invstd), (int(bool(train)), float(eps)))


@register("poet.execute.tiled_ops.tile_bn_stats")
def tile_bn_stats(n) -> CallSpec:
    return CallSpec("tile_bn_stats", (n.args[0],))


@register("poet.execute.tiled_ops.tile_bn_combine")
def tile_bn_combine(n) -> CallSpec:
    stats, rm, rv, momentum, eps = n.args[:5]
    return CallSpec("tile_bn_combine", (*stats, rm, rv), (len(stats), float(momentum), float(eps)))


@register("poet.execute.tiled_ops.tile_bn_apply")
def tile_bn_apply(n) -> CallSpec:
    return CallSpec("tile_bn_apply", tuple(n.args[:5]))


@register("poet.execute.tiled_ops.tile_bn_grad_partial")
def tile_bn_grad_partial(n) -> CallSpec:
    return CallSpec("tile_bn_grad_partial", tuple(n.args[:3]))


@register("poet.execute.tiled_ops.tile_bn_grad_combine")
def tile_bn_grad_combine(n) -> CallSpec:
    partials, invstd = n.args[:2]
    return CallSpec("tile_bn_grad_combine", (*partials, invstd), (len(partials),))


@register("poet.execute.tiled_ops.tile_bn_grad_input")
def tile_bn_grad_input(n) -> CallSpec:
    go, x, mean, invstd, w, sums, count = n.args[:7]
    return CallSpec("tile_bn_grad_input", (go, x, mean, invstd, w, sums), (int(count),))
