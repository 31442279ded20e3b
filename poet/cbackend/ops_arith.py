"""Specs of arithmetic, comparisons, dtype conversion and tensor creation (kernels: runtime/kernels_arith.c).

Binary ops take their second operand as a tensor (``add``) or, when the graph gives a Python number,
as a scalar (``add_scalar``).  Scalars travel in the kind of the computation (:func:`.opspec.scalar_for`:
the output's dtype decides), except a comparison's, which is always a float.  Creation ops (``full``,
``zeros``, ``arange`` ...) have no tensor input: the kernel only writes its output.
"""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, arg, is_value, register, scalar_for, target_key, value_dtype


def _binary(kernel: str, has_alpha: bool):
    def spec(n) -> CallSpec:
        a, b = n.args[:2]
        kind = value_dtype(n)
        alpha = (scalar_for(kind, arg(n, 2, "alpha", 1)),) if has_alpha else ()
        if not is_value(a):  # a number first (aten allows it for mul/add via the Tensor overloads' reflection)
            raise UnsupportedOp(f"{target_key(n.target)} (node {n.name}) with a number as its first operand")
        if is_value(b):
            return CallSpec(kernel, (a, b), alpha, broadcast=True)
        return CallSpec(f"{kernel}_scalar", (a,), (scalar_for(kind, b), *alpha), broadcast=True)

    return spec


for _name, _alpha in (("add", True), ("sub", True), ("mul", False), ("div", False)):
    register(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_name, _alpha))


@register("aten.div.Tensor_mode")
def div_mode(n) -> CallSpec:
    if arg(n, 2, "rounding_mode", None) is not None:
        raise UnsupportedOp(
            f"{target_key(n.target)} (node {n.name}): division with rounding_mode="
            f"{arg(n, 2, 'rounding_mode', None)!r} has no C kernel (true division has)"
        )
    return _binary("div", False)(n)


@register("aten.rsub.Scalar")
def rsub_scalar(n) -> CallSpec:
    kind = value_dtype(n)
    return CallSpec(
        "rsub_scalar", (n.args[0],), (scalar_for(kind, n.args[1]), scalar_for(kind, arg(n, 2, "alpha", 1))), True
    )


@register("aten.rsub.Tensor")
def rsub_tensor(n) -> CallSpec:
    """other - alpha * self: sub with the operands swapped."""
    self_, other = n.args[:2]
    if not is_value(other):
        return rsub_scalar(n)
    return CallSpec("sub", (other, self_), (scalar_for(value_dtype(n), arg(n, 2, "alpha", 1)),), broadcast=True)


def _compare(kernel: str):
    def spec(n) -> CallSpec:
        a, b = n.args[:2]
        if is_value(b):
            return CallSpec(kernel, (a, b), broadcast=True)
        return CallSpec(f"{kernel}_scalar", (a,), (float(b),), broadcast=True)

    return spec


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_name))


@register("aten.logical_not.default")
def logical_not(n) -> CallSpec:
    """not x: x == 0 (bool out)."""
    return CallSpec("eq_scalar", (n.args[0],), (0.0,), broadcast=True)


@register("aten.bitwise_not.default")
def bitwise_not(n) -> CallSpec:
    return CallSpec("bitwise_not", (n.args[0],), broadcast=True)


@register("aten._to_copy.default", "aten.copy.default")
def convert(n) -> CallSpec:
    """The source's values in the output's dtype (and shape: ``copy(self, src)`` broadcasts src)."""
    src = n.args[1] if target_key(n.target) == "aten.copy.default" else n.args[0]
    return CallSpec("convert", (src,), broadcast=True)


@register("aten.fill.Tensor")
def fill_tensor(n) -> CallSpec:
    """Every element the 0-dim value's: a conversion of the value viewed with the output's shape."""
    return CallSpec("convert", (n.args[1],), broadcast=True)


def _fill(value_of):
    return lambda n: CallSpec("fill", (), (scalar_for(value_dtype(n), value_of(n)),))


for _key, _value in {
    "aten.fill.Scalar": lambda n: n.args[1],
    "aten.full.default": lambda n: n.args[1],
    "aten.full_like.default": lambda n: n.args[1],
    "aten.new_full.default": lambda n: n.args[2],
    "aten.scalar_tensor.default": lambda n: n.args[0],
    "aten.zeros.default": lambda n: 0,
    "aten.zeros_like.default": lambda n: 0,
    "aten.new_zeros.default": lambda n: 0,
    "aten.ones.default": lambda n: 1,
    "aten.ones_like.default": lambda n: 1,
    "aten.new_ones.default": lambda n: 1,
    # uninitialised memory in aten; zeros here, so a step never depends on what the arena held
    "aten.empty.memory_format": lambda n: 0,
    "aten.empty_strided.default": lambda n: 0,
    "aten.empty_like.default": lambda n: 0,
    "aten.new_empty.default": lambda n: 0,
}.items():
    register(_key)(_fill(_value))


@register("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def arange(n) -> CallSpec:
    key = target_key(n.target)
    nums = [a for a in n.args if not is_value(a)]
    if key == "aten.arange.default":
        start, step = 0, 1
    elif key == "aten.arange.start":
        start, step = nums[0], 1
    else:
        start, step = nums[0], arg(n, 2, "step", 1)
    kind = value_dtype(n)
    return CallSpec("arange", (), (scalar_for(kind, start), scalar_for(kind, step)))
