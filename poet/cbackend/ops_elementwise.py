"""Specs of elementwise ops and their gradients (kernels: runtime/kernels_elementwise.c)."""

from __future__ import annotations

from .opspec import CallSpec, register


@register("aten.relu.default")
def relu(n) -> CallSpec:
    return CallSpec("relu", (n.args[0],))


@register("aten.threshold_backward.default")
def threshold_backward(n) -> CallSpec:
    grad, self_, threshold = n.args[:3]
    return CallSpec("threshold_backward", (grad, self_), (float(threshold),))
