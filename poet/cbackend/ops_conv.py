"""Specs of convolutions and their tile kernels (kernels: runtime/kernels_conv.c).

2-d convolutions of any stride, padding, dilation and groups, and 1-d ones (as 2-d of height 1);
transposed and 3-d convolutions are refused.  Geometry travels as scalars ``(sh, sw, ph, pw, dh,
dw, groups)``; a tile kernel's list of input pieces becomes that many tensor inputs and a count.
"""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, flat_ints, need_float32, register, target_key


def _geometry(n, stride, padding, dilation) -> tuple[int, int, int, int, int, int]:
    """(sh, sw, ph, pw, dh, dw) of a 1-d or 2-d convolution."""
    st, pd, dl = flat_ints(stride), flat_ints(padding), flat_ints(dilation)
    if len(st) == 1 and len(pd) == 1 and len(dl) == 1:
        return (1, st[0], 0, pd[0], 1, dl[0])
    if len(st) == 2 and len(pd) == 2 and len(dl) == 2:
        return (st[0], st[1], pd[0], pd[1], dl[0], dl[1])
    raise UnsupportedOp(
        f"{target_key(n.target)} (node {n.name}): only 1-d and 2-d convolutions have a C kernel "
        f"(stride {list(st)}, padding {list(pd)})"
    )


def _not_transposed(n, transposed) -> None:
    if transposed:
        raise UnsupportedOp(f"{target_key(n.target)} (node {n.name}): transposed convolutions have no C kernel")


@register("aten.convolution.default")
def convolution(n) -> CallSpec:
    x, w, b, stride, padding, dilation, transposed, _output_padding, groups = n.args[:9]
    _not_transposed(n, transposed)
    need_float32(n, n, x, w, b)
    return CallSpec("convolution", (x, w, b), (*_geometry(n, stride, padding, dilation), int(groups)))


@register("aten.convolution_backward.default")
def convolution_backward(n) -> CallSpec:
    go, x, w, _bias_sizes, stride, padding, dilation, transposed, _output_padding, groups, _mask = n.args[:11]
    _not_transposed(n, transposed)
    need_float32(n, go, x, w)
    # the output mask is the outputs themselves: an item the op does not compute is None (PK_NONE)
    return CallSpec("convolution_backward", (go, x, w), (*_geometry(n, stride, padding, dilation), int(groups)))


def _tile_geometry(n, stride, padding, dilation) -> tuple[int, ...]:
    """(sh, sw, pw, dh, dw) of a tile kernel (its height padding is explicit halo rows)."""
    sh, sw, _ph, pw, dh, dw = _geometry(n, stride, padding, dilation)
    return (sh, sw, pw, dh, dw)


@register("poet.execute.tiled_ops.tile_conv")
def tile_conv(n) -> CallSpec:
    pieces, top, bottom, w, b, stride, padding, dilation, groups = n.args[:9]
    geo = _tile_geometry(n, stride, padding, dilation)
    return CallSpec("tile_conv", (*pieces, w, b), (len(pieces), int(top), int(bottom), *geo, int(groups)))


@register("poet.execute.tiled_ops.tile_conv_input_grad")
def tile_conv_input_grad(n) -> CallSpec:
    go_pieces, region_start, region_rows, a, b, _in_shape, w, stride, padding, dilation, groups = n.args[:11]
    geo = _tile_geometry(n, stride, padding, dilation)
    scalars = (len(go_pieces), int(region_start), int(region_rows), int(a), int(b), *geo, int(groups))
    return CallSpec("tile_conv_input_grad", (*go_pieces, w), scalars)


@register("poet.execute.tiled_ops.tile_conv_weight_grad")
def tile_conv_weight_grad(n) -> CallSpec:
    acc_w, acc_b, go, x_pieces, top, bottom, _w, _bias_sizes, stride, padding, dilation, groups = n.args[:12]
    geo = _tile_geometry(n, stride, padding, dilation)
    scalars = (len(x_pieces), int(top), int(bottom), *geo, int(groups))
    return CallSpec("tile_conv_weight_grad", (acc_w, acc_b, go, *x_pieces), scalars)
