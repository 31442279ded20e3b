"""Specs of activations, their gradients and unary math (kernels: runtime/kernels_elementwise.c).

Every op here is pointwise: its tensor inputs are viewed with the output's shape (``broadcast``).
The activation kernels are float32 only; a node of another dtype is refused before anything is built.
"""

from __future__ import annotations

from .opspec import CallSpec, arg, need_float32, register


def _f32(n, kernel: str, inputs, scalars=()) -> CallSpec:
    need_float32(n, n, *inputs)
    return CallSpec(kernel, tuple(inputs), tuple(scalars), broadcast=True)


@register("aten.relu.default")
def relu(n) -> CallSpec:
    return _f32(n, "relu", n.args[:1])


@register("aten.threshold_backward.default")
def threshold_backward(n) -> CallSpec:
    grad, self_, threshold = n.args[:3]
    return _f32(n, "threshold_backward", (grad, self_), (float(threshold),))


@register("aten.hardtanh.default")
def hardtanh(n) -> CallSpec:
    lo, hi = arg(n, 1, "min_val", -1.0), arg(n, 2, "max_val", 1.0)
    return _f32(n, "hardtanh", n.args[:1], (float(lo), float(hi)))


@register("aten.clamp.default")
def clamp(n) -> CallSpec:
    """clamp(x, min, max) with either bound None: hardtanh with an infinite bound."""
    lo, hi = arg(n, 1, "min", None), arg(n, 2, "max", None)
    inf = float("inf")
    return _f32(n, "hardtanh", n.args[:1], (-inf if lo is None else float(lo), inf if hi is None else float(hi)))


@register("aten.clamp_min.default")
def clamp_min(n) -> CallSpec:
    return _f32(n, "hardtanh", n.args[:1], (float(n.args[1]), float("inf")))


@register("aten.clamp_max.default")
def clamp_max(n) -> CallSpec:
    return _f32(n, "hardtanh", n.args[:1], (-float("inf"), float(n.args[1])))


@register("aten.hardtanh_backward.default")
def hardtanh_backward(n) -> CallSpec:
    grad, self_, lo, hi = n.args[:4]
    return _f32(n, "hardtanh_backward", (grad, self_), (float(lo), float(hi)))


def _pointwise(kernel: str, arity: int):
    return lambda n: _f32(n, kernel, n.args[:arity])


for _name in ("hardswish", "sigmoid", "silu"):
    register(f"aten.{_name}.default")(_pointwise(_name, 1))
    register(f"aten.{_name}_backward.default")(_pointwise(f"{_name}_backward", 2))


@register("aten.pow.Tensor_Scalar")
def pow_scalar(n) -> CallSpec:
    return _f32(n, "pow_scalar", n.args[:1], (float(n.args[1]),))


def _unary(kernel: str):
    """float32 and float64 (both kernels' dtypes): no dtype check beyond the kernel's own."""
    return lambda n: CallSpec(kernel, (n.args[0],), broadcast=True)


for _op in ("sqrt", "rsqrt", "exp", "log", "reciprocal", "abs", "neg"):
    register(f"aten.{_op}.default")(_unary(_op))
