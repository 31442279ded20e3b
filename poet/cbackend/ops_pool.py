"""Specs of pooling, sums and means, and their tile kernels (kernels: runtime/kernels_pool.c, kernels_reduce.c).

Pooling windows travel as ``(kh, kw, sh, sw, ph, pw[, dh, dw])`` (an empty stride means the kernel
size, as in aten).  A reduction's dimensions travel as one bit mask (bit d: dimension d is reduced);
whether they are kept is the output's rank.
"""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, arg, flat_ints, need_float32, register, target_key


def _pair(xs, default=None) -> tuple[int, int]:
    v = flat_ints(xs) if xs not in (None, []) else flat_ints(default)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _window(kernel, stride, padding, dilation=1) -> tuple[int, ...]:
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride, kernel)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    return (kh, kw, sh, sw, ph, pw, dh, dw)


@register("aten.max_pool2d_with_indices.default")
def max_pool2d(n) -> CallSpec:
    x = n.args[0]
    need_float32(n, x)
    win = _window(n.args[1], arg(n, 2, "stride", []), arg(n, 3, "padding", 0), arg(n, 4, "dilation", 1))
    return CallSpec("max_pool2d", (x,), (*win, int(bool(arg(n, 5, "ceil_mode", False)))))


@register("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_backward(n) -> CallSpec:
    go, _x, *_, indices = n.args[:8]
    need_float32(n, go)
    return CallSpec("max_pool2d_backward", (go, indices))


def _avg_scalars(n, first: int) -> tuple[int, ...]:
    """(kh, kw, sh, sw, ph, pw, ceil_mode, count_include_pad, divisor) from avg_pool2d's arguments."""
    kernel = n.args[first]
    win = _window(kernel, arg(n, first + 1, "stride", []), arg(n, first + 2, "padding", 0))[:6]
    ceil = int(bool(arg(n, first + 3, "ceil_mode", False)))
    include_pad = int(bool(arg(n, first + 4, "count_include_pad", True)))
    divisor = arg(n, first + 5, "divisor_override", None)
    return (*win, ceil, include_pad, int(divisor or 0))


@register("aten.avg_pool2d.default")
def avg_pool2d(n) -> CallSpec:
    need_float32(n, n.args[0])
    return CallSpec("avg_pool2d", (n.args[0],), _avg_scalars(n, 1))


@register("aten.avg_pool2d_backward.default")
def avg_pool2d_backward(n) -> CallSpec:
    need_float32(n, n.args[0])
    return CallSpec("avg_pool2d_backward", (n.args[0],), _avg_scalars(n, 2))


def _mask(n, dims) -> int:
    """The bit mask of the dimensions reduced (None or [] means all, as aten's sum.dim_IntList); negative
    dimensions and "all" need the input's rank, which a node made after tracing may not record."""
    val = n.args[0].meta.get("val")
    explicit = flat_ints(dims) if dims is not None and dims != [] else ()
    if val is None:
        if explicit and min(explicit) >= 0:
            return sum(1 << d for d in set(explicit))
        raise UnsupportedOp(f"{target_key(n.target)} (node {n.name}): dimensions {dims} of a tensor of unknown rank")
    ndim = val.dim()
    if not explicit:
        return (1 << ndim) - 1
    mask = 0
    for d in explicit:
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise UnsupportedOp(f"{target_key(n.target)} (node {n.name}): dimension {d} of a {ndim}-d tensor")
        mask |= 1 << (d % max(ndim, 1))
    return mask if ndim else 0


@register("aten.sum.dim_IntList", "aten.mean.dim")
def sum_dims(n) -> CallSpec:
    mean = int(target_key(n.target).startswith("aten.mean"))
    return CallSpec("sum", (n.args[0],), (mean, _mask(n, arg(n, 1, "dim", None))))


@register("aten.sum.default", "aten.mean.default")
def sum_all(n) -> CallSpec:
    mean = int(target_key(n.target).startswith("aten.mean"))
    return CallSpec("sum", (n.args[0],), (mean, _mask(n, None)))


# ------------------------------------------------------------------ tile kernels


@register("poet.execute.tiled_ops.tile_max_pool")
def tile_max_pool(n) -> CallSpec:
    pieces, top, bottom, start, _width, kernel, stride, padding, dilation = n.args[:9]
    kh, kw, sh, sw, _ph, pw, dh, dw = _window(kernel, stride, padding, dilation)
    return CallSpec(
        "tile_max_pool", tuple(pieces), (len(pieces), int(top), int(bottom), int(start), kh, kw, sh, sw, pw, dh, dw)
    )


@register("poet.execute.tiled_ops.tile_max_pool_grad")
def tile_max_pool_grad(n) -> CallSpec:
    go_pieces, idx_pieces, a, b, _in_shape = n.args[:5]
    return CallSpec("tile_max_pool_grad", (*go_pieces, *idx_pieces), (len(go_pieces), int(a), int(b)))


@register("poet.execute.tiled_ops.tile_avg_pool")
def tile_avg_pool(n) -> CallSpec:
    pieces, top, bottom, kernel, stride, padding, include_pad, divisor = n.args[:8]
    kh, kw, sh, sw, _ph, pw, _dh, _dw = _window(kernel, stride, padding)
    scalars = (len(pieces), int(top), int(bottom), kh, kw, sh, sw, pw, int(bool(include_pad)), int(divisor or 0))
    return CallSpec("tile_avg_pool", tuple(pieces), scalars)


@register("poet.execute.tiled_ops.tile_avg_pool_grad")
def tile_avg_pool_grad(n) -> CallSpec:
    go_pieces, start, rows, a, b, _in_shape, kernel, stride, padding, include_pad, divisor = n.args[:11]
    kh, kw, sh, sw, _ph, pw, _dh, _dw = _window(kernel, stride, padding)
    region = (int(start), int(rows), int(a), int(b))
    scalars = (len(go_pieces), *region, kh, kw, sh, sw, pw, int(bool(include_pad)), int(divisor or 0))
    return CallSpec("tile_avg_pool_grad", tuple(go_pieces), scalars)


@register("poet.execute.tiled_ops.tile_sum_partial")
def tile_sum_partial(n) -> CallSpec:
    """One tile's float64 sum: the sum kernel writing a float64 output sums in double."""
    return CallSpec("sum", (n.args[0],), (0, _mask(n, n.args[1])))


@register("poet.execute.tiled_ops.tile_sum_combine")
def tile_sum_combine(n) -> CallSpec:
    partials, scale = n.args[:2]
    return CallSpec("tile_sum_combine", tuple(partials), (len(partials), float(scale)))
