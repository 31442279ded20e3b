"""Specs of dropout (kernels: runtime/kernels_dropout.c; the masks: poet/cbackend/rng.py).

A dropout node's kernel call carries its unit number (``rng.unit_of`` of the node's name), so the
mask depends only on the step's seed, the node and the element, on every target and in the
Python reference.
"""

from __future__ import annotations

from .opspec import CallSpec, arg, need_float32, register
from .rng import unit_of


@register("aten.native_dropout.default")
def native_dropout(n) -> CallSpec:
    x, p = n.args[:2]
    train = arg(n, 2, "train", True)
    need_float32(n, x)
    return CallSpec("native_dropout", (x,), (float(p), int(train is None or bool(train)), unit_of(n.name)))


@register("aten.native_dropout_backward.default")
def native_dropout_backward(n) -> CallSpec:
    grad, mask, scale = n.args[:3]
    need_float32(n, grad)
    return CallSpec("native_dropout_backward", (grad, mask), (float(scale),), broadcast=True)
