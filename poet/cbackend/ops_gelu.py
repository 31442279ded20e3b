"""Specs of GELU (exact and tanh-approximated) and tanh, and their gradients (kernels:
runtime/kernels_gelu.c)."""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, arg, register

APPROXIMATE = {"none": 0, "tanh": 1}


def _approximate(n, i: int) -> int:
    a = arg(n, i, "approximate", "none")
    if a not in APPROXIMATE:
        raise UnsupportedOp(f"{n.name}: gelu approximate={a!r} has no C kernel (none or tanh)")
    return APPROXIMATE[a]


@register("aten.gelu.default")
def gelu(n) -> CallSpec:
    return CallSpec("gelu", (n.args[0],), (_approximate(n, 1),))


@register("aten.gelu_backward.default")
def gelu_backward(n) -> CallSpec:
    return CallSpec("gelu_backward", (n.args[0], n.args[1]), (_approximate(n, 2),))


@register("aten.tanh.default")
def tanh(n) -> CallSpec:
    return CallSpec("tanh", (n.args[0],))


@register("aten.tanh_backward.default")
def tanh_backward(n) -> CallSpec:
    return CallSpec("tanh_backward", (n.args[0], n.args[1]))
