"""Specs of softmax and log-softmax along a dimension and their gradients (kernels:
runtime/kernels_softmax.c).  aten's ``_safe_softmax`` (what attention with a mask uses) is the softmax
kernel with ``safe``: a row whose every element is -inf gives 0, not NaN."""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, register


def _float32_only(n, dtype) -> None:
    if dtype is not None and str(dtype) != "torch.float32":
        raise UnsupportedOp(f"{n.name}: softmax into {dtype} has no C kernel (float32 only)")


def _rowwise(kernel: str, what: str):
    def spec(n) -> CallSpec:
        x, dim, half_to_float = n.args[:3]
        if half_to_float:
            raise UnsupportedOp(f"{n.name}: {what} with half_to_float has no C kernel (float32 only)")
        return CallSpec(kernel, (x,), (int(dim), 0))

    return spec


register("aten._softmax.default")(_rowwise("softmax", "softmax"))
register("aten._log_softmax.default")(_rowwise("log_softmax", "log_softmax"))


@register("aten._safe_softmax.default")
def safe_softmax(n) -> CallSpec:
    x, dim = n.args[:2]
    _float32_only(n, n.args[2] if len(n.args) > 2 else n.kwargs.get("dtype"))
    return CallSpec("softmax", (x,), (int(dim), 1))


@register("aten._softmax_backward_data.default")
def softmax_backward(n) -> CallSpec:
    grad, y, dim, _dtype = n.args[:4]
    return CallSpec("softmax_backward", (grad, y), (int(dim),))


@register("aten._log_softmax_backward_data.default")
def log_softmax_backward(n) -> CallSpec:
    grad, y, dim, _dtype = n.args[:4]
    return CallSpec("log_softmax_backward", (grad, y), (int(dim),))
