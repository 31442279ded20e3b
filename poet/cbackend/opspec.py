"""How each aten op (or tile kernel) of a traced program becomes one call of a C kernel.

An op's *spec* is a function of its FX node returning a :class:`CallSpec`: the C kernel to call, the
node's tensor arguments in the kernel's input order (FX nodes, or ``None`` for an absent optional
tensor) and its non-tensor arguments flattened into scalars.  The kernel's outputs are the op's own
outputs, in order (every item of a tuple-returning op; a ``None`` item is passed as ``PK_NONE``).
Specs live one family per module (``ops_*.py``) beside their kernels (``runtime/kernels_*.c``); this
module is the registry they fill, and :mod:`poet.cbackend.vocabulary` the door the lowering reads it
through.  An op with no spec is refused before anything is built, with the node named
(:class:`UnsupportedOp`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SPECS",
    "CallSpec",
    "UnsupportedOp",
    "arg",
    "flat_ints",
    "is_value",
    "need_float32",
    "register",
    "scalar_for",
    "target_key",
    "value_dtype",
]

Scalar = int | float


@dataclass(frozen=True)
class CallSpec:
    """One kernel call: ``pk_<kernel>(inputs..., outputs..., scalars...)``."""

    kernel: str  # C function name without the ``pk_`` prefix
    inputs: tuple[Any, ...]  # FX nodes (tensor arguments) or None, in the kernel's input order
    scalars: tuple[Scalar, ...] = ()
    # True: the lowering views every tensor input with the first output's shape (broadcast dimensions
    # get stride 0, missing leading ones are added), so a pointwise kernel walks one shape
    broadcast: bool = False


class UnsupportedOp(ValueError):
    """An op the C backend has no kernel for (raised before anything is built)."""


SpecFn = Callable[[Any], CallSpec]
SPECS: dict[str, SpecFn] = {}  # registry key (target_key) -> spec; filled by the ops_* modules


def target_key(target) -> str:
    """The registry key of an FX call target: ``aten.relu.default`` for an aten overload, the
    function's qualified name (``poet.execute.tiled_ops.tile_conv``) for a Python tile kernel."""
    schema = getattr(target, "_schema", None)  # torch OpOverload: schema 'aten::add' + overload 'Tensor'
    if schema is not None and hasattr(target, "_overloadname"):
        ns, _, op = schema.name.partition("::")
        return f"{ns}.{op}.{schema.overload_name or 'default'}"
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def register(*keys: str) -> Callable[[SpecFn], SpecFn]:
    """Decorator: ``@register("aten.relu.default")`` makes the function the spec of those ops."""

    def deco(fn: SpecFn) -> SpecFn:
        for k in keys:
            if k in SPECS:
                raise AssertionError(f"two specs for {k}")
            SPECS[k] = fn
        return fn

    return deco


def flat_ints(xs) -> tuple[int, ...]:
    """A list argument (stride, padding, dims ...) as ints; a single int as a 1-tuple."""
    if isinstance(xs, (list, tuple)):
        return tuple(int(x) for x in xs)
    return (int(xs),)


def arg(n, i: int, name: str, default):
    """Argument ``i`` of FX node ``n`` by position, else by keyword ``name``, else ``default`` (the
    schema's default: FX leaves defaulted arguments out)."""
    return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)


def is_value(a) -> bool:
    """True for a tensor argument (an FX node), False for a Python number, list or None."""
    return hasattr(a, "op") and hasattr(a, "meta")


def value_dtype(n, item: int | None = None) -> str:
    """The dtype of FX node ``n``'s value (``item`` of a tuple), as ``float32``, ``int64`` ...: the traced
    one, or, for a node made after tracing (a tile kernel's, whose meta is empty), its first tensor
    argument's (views and tiles keep their input's dtype; a getitem, its tuple item's), followed back as
    far as it goes (a tiled graph's chains of new nodes are long); ``unknown`` when nothing says."""
    while True:
        val = n.meta.get("val")
        if isinstance(val, (tuple, list)):  # a tuple-valued node: the item asked for, else its first tensor
            pick = [val[item]] if item is not None and item < len(val) else val
            val = next((v for v in pick if hasattr(v, "dtype")), None)
        if val is not None:
            return str(getattr(val, "dtype", "unknown")).replace("torch.", "")
        if getattr(n.target, "__name__", "") == "getitem" and is_value(n.args[0]):
            n, item = n.args[0], int(n.args[1])
            continue
        first = next((v for a in n.args for v in (a if isinstance(a, (list, tuple)) else (a,)) if is_value(v)), None)
        if first is None:
            return "unknown"
        n, item = first, None  # an FX graph has no cycles: every step goes to an earlier node


def scalar_for(dtype: str, value) -> Scalar:
    """A Python number in the kind a kernel reads for ``dtype``: an int (``.i``) for integer and bool
    dtypes, a float (``.f``) for floating ones and for a dtype nothing records (float32 activations are
    what tiled graphs hold; a float is never truncated to an int on a guess)."""
    if dtype.startswith(("int", "uint", "bool")):
        return int(value)
    return float(value)


def need_float32(n, *values) -> None:
    """Refuse (:class:`UnsupportedOp`, naming node ``n``) unless every tensor in ``values`` (FX nodes;
    numbers and None are skipped) is float32: for kernels that only have a float32 version.  A dtype
    nothing records is let through: the kernel itself refuses it (PK_EDTYPE) when it runs."""
    for v in values:
        if is_value(v) and value_dtype(v) not in ("float32", "unknown"):
            raise UnsupportedOp(
                f"the C kernel for {target_key(n.target)} (node {n.name}) takes float32 tensors; "
                f"{v.name} is {value_dtype(v)}"
            )
