"""Specs of matrix products (kernel: ``pk_matmul`` in runtime/kernels_matmul.c).

``pk_matmul(add, a, b -> out; beta, alpha)`` computes ``beta * add + alpha * (a @ b)`` on 2-D or
batched 3-D views; mm, bmm, addmm and the tiled contraction ``tile_mm_accumulate`` are its cases
(``add`` absent, or addmm's bias, or the running accumulator).
"""

from __future__ import annotations

from .opspec import CallSpec, register


@register("aten.mm.default", "aten.bmm.default")
def mm(n) -> CallSpec:
    return CallSpec("matmul", (None, n.args[0], n.args[1]), (0.0, 1.0))


@register("aten.addmm.default")
def addmm(n) -> CallSpec:
    bias, a, b = n.args[:3]
    return CallSpec("matmul", (bias, a, b), (float(n.kwargs.get("beta", 1)), float(n.kwargs.get("alpha", 1))))


@register("poet.execute.tiled_ops.tile_mm_accumulate")
def tile_mm_accumulate(n) -> CallSpec:
    acc, a, b = n.args[:3]
    return CallSpec("matmul", (acc, a, b), (1.0, 1.0))
