"""One hypothesis case builder per aten op of the tiled executor's rule tables (see :mod:`tiling_harness`).

``CASES[op](draw) -> Case``.  Elementwise overloads are built from their schemas (every Tensor
argument a drawn tensor, broadcasts included); the others by hand, with the geometry each op
allows (stride, padding, dilation, groups, pooling windows, masks, reductions).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from tiling_harness import Case, broadcast_shape, dims, values

from poet.execute.tiled_rules import RULES as ELEMENTWISE
from poet.execute.tiled_rules import cat, pointwise, reduction
from poet.execute.tiled_sdpa import RULES as FUSED_ATTENTION
from poet.execute.tiled_spatial import RULES as SPATIAL
from poet.execute.tiled_tokens import RULES as TOKENS
from poet.execute.tiled_views import ALIAS_RULES

aten = torch.ops.aten
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal", "pow", "div"}  # domains where a negative input gives NaN
# Correctly rounded or data movement: the same bits whatever the slice.  The others (exp, erf, tanh,
# gelu, silu, softplus, elu, mish, pow, ...) use vectorised approximations whose result can depend on
# where an element falls in a vector (a tile's tail): measured within the bound, not bit for bit.
EXACT = {
    "add", "sub", "mul", "div", "neg", "abs", "relu", "threshold_backward", "where", "masked_fill", "clone",
    "_to_copy", "copy", "fill", "le", "lt", "ge", "gt", "eq", "ne", "clamp", "clamp_min", "clamp_max", "hardtanh",
    "hardtanh_backward", "leaky_relu", "leaky_relu_backward", "native_dropout_backward", "sqrt",
}  # fmt: skip


# ------------------------------------------------------------------ elementwise, from the schema
def _scalar(arg):
    if arg.name in ("min", "min_val"):
        return -0.5
    if arg.name in ("max", "max_val"):
        return 0.5
    return 2.0 if arg.name in ("exponent", "scale", "self") else 0.5


def pointwise_case(op):
    schema = op._schema
    positive = schema.name.split("::")[-1] in POSITIVE

    def build(draw):
        shape = dims(draw, draw(st.integers(1, 4)))
        inputs, tiled, args, kwargs = [], [], [], {}
        first = True
        for a in schema.arguments:
            ty = str(a.type)
            if a.kwarg_only and a.has_default_value() and a.name != "rounding_mode":
                continue
            if ty in ("Tensor", "Optional[Tensor]"):
                if a.name in ("condition", "mask"):
                    shp, dt = (shape if first else broadcast_shape(draw, shape)), torch.bool
                elif a.name == "value":
                    shp, dt = (), torch.float32
                else:
                    shp, dt = (shape if first else broadcast_shape(draw, shape)), torch.float32
                inputs.append(values(draw, shp, positive=positive, dtype=dt))
                tiled.append(first and draw(st.booleans()))
                val = ("input", len(inputs) - 1)
                first = False
            elif ty in ("number", "Optional[number]", "float"):
                val = _scalar(a)
            elif ty == "bool":
                val = False
            elif ty == "Optional[str]":
                val = draw(st.sampled_from([None, "floor", "trunc"]))
            else:
                val = a.default_value
            (kwargs.__setitem__(a.name, val) if a.kwarg_only else args.append(val))

        def fn(*xs):
            def pick(v):
                return xs[v[1]] if isinstance(v, tuple) else v

            return op(*[pick(v) for v in args], **{k: pick(v) for k, v in kwargs.items()})

        return Case(op, fn, tuple(inputs), tuple(tiled), exact=schema.name.split("::")[-1] in EXACT)

    return build


# ------------------------------------------------------------------ reductions and cat
def reduction_case(op):
    def build(draw):
        nd = draw(st.integers(1, 4))
        x = values(draw, dims(draw, nd))
        if op is aten.sum.default:
            return Case(op, lambda x: op(x), (x,), (True,))
        ds = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        keep = draw(st.booleans())
        return Case(op, lambda x: op(x, ds, keep), (x,), (True,))

    return build


def cat_case(draw):
    nd = draw(st.integers(1, 4))
    shape = dims(draw, nd)
    d = draw(st.integers(0, nd - 1))
    parts = []
    for _ in range(draw(st.integers(2, 3))):
        s = list(shape)
        s[d] = draw(st.integers(1, 4))
        parts.append(values(draw, tuple(s)))
    tiled = tuple(draw(st.booleans()) for _ in parts)

    def fn(*xs):
        return aten.cat.default(list(xs), d)

    return Case(aten.cat.default, fn, tuple(parts), tiled, exact=True, may_decline="concatenation along the tiled axis")


# ------------------------------------------------------------------ views of tiled tensors
def view_case(op):
    def build(draw):
        nd = draw(st.integers(2, 4))
        shape = dims(draw, nd)
        x = values(draw, shape)
        d = draw(st.integers(0, nd - 1))
        if op in (aten.detach.default, aten.alias.default):
            args = ()
        elif op is aten.slice.Tensor:
            a = draw(st.integers(0, shape[d] - 1))
            args = (d, a, draw(st.integers(a + 1, shape[d])))
        elif op is aten.unsqueeze.default:
            args = (draw(st.integers(0, nd)),)
        elif op is aten.t.default:
            x = values(draw, shape[:2])
            args = ()
        elif op is aten.transpose.int:
            args = (d, draw(st.integers(0, nd - 1)))
        elif op is aten.permute.default:
            args = (draw(st.permutations(range(nd))),)
        elif op in (aten.view.default, aten._unsafe_view.default):
            x = values(draw, shape).contiguous()
            k = draw(st.integers(0, nd - 2))  # merge dims k and k+1, or split the merged one back
            merged = shape[:k] + (shape[k] * shape[k + 1],) + shape[k + 2 :]
            if draw(st.booleans()):
                args = (list(merged),)
            else:
                x = x.reshape(merged)
                args = (list(shape),)
        elif op is aten.expand.default:
            shape = tuple(1 if i == d else s for i, s in enumerate(shape))
            x = values(draw, shape)
            args = ([draw(st.integers(1, 3)) if i == d else s for i, s in enumerate(shape)],)
        else:  # split, split_with_sizes
            cut = draw(st.integers(1, shape[d]))
            args = (cut, d) if op is aten.split.Tensor else ([cut, shape[d] - cut] if cut < shape[d] else [cut], d)

        def fn(x):
            out = op(x, *args)
            return (
                tuple(aten.clone.default(o) for o in out) if isinstance(out, (tuple, list)) else aten.clone.default(out)
            )

        return Case(op, fn, (x,), (True,), exact=True, may_decline="a view along or across the tiled axis")

    return build


# ------------------------------------------------------------------ convolutions, BatchNorm, pooling
def _conv_geometry(draw):
    n, cin, H, W = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(4, 10)), draw(st.integers(2, 6))
    k, s, dl = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    p = draw(st.integers(0, k - 1))
    groups = draw(st.sampled_from([g for g in (1, cin) if cin % g == 0]))
    cout = groups * draw(st.integers(1, 2))
    if H + 2 * p < dl * (k - 1) + 1:
        H = dl * (k - 1) + 1
    if W + 2 * p < dl * (k - 1) + 1:
        W = dl * (k - 1) + 1
    return (n, cin, H, W), (cout, cin // groups, k, k), [s, s], [p, p], [dl, dl], groups


def convolution_case(draw):
    xs, ws, s, p, dl, g = _conv_geometry(draw)
    bias = draw(st.booleans())
    ins = (values(draw, xs), values(draw, ws)) + ((values(draw, (ws[0],)),) if bias else ())

    def fn(x, w, b=None):
        return aten.convolution.default(x, w, b, s, p, dl, False, [0, 0], g)

    return Case(aten.convolution.default, fn, ins, (_tiles_of(draw, ins[0]), False, False))


def _tiles_of(draw, x):
    """How a 4-D input arrives: whole, tiled by rows, or (N > 1) tiled by samples."""
    ways = [False, True] + (["batch"] if x.shape[0] > 1 else [])
    return draw(st.sampled_from(ways))


def convolution_backward_case(draw):
    xs, ws, s, p, dl, g = _conv_geometry(draw)
    xs = (draw(st.integers(1, 3)),) + xs[1:]
    x, w = values(draw, xs), values(draw, ws)
    y = aten.convolution.default(x, w, None, s, p, dl, False, [0, 0], g)
    go = values(draw, tuple(y.shape))
    mask = draw(st.sampled_from([[True, True, True], [True, False, False], [False, True, False], [False, True, True]]))

    def fn(go, x, w):
        return tuple(
            t
            for t in aten.convolution_backward.default(go, x, w, [ws[0]], s, p, dl, False, [0, 0], g, mask)
            if t is not None
        )

    return Case(aten.convolution_backward.default, fn, (go, x, w), (_tiles_of(draw, go), _tiles_of(draw, x), False))


def _bn_inputs(draw):
    shape = dims(draw, 4)
    c = shape[1]
    x = values(draw, shape, shifted=True)
    affine = draw(st.booleans())
    w = values(draw, (c,)) if affine else None
    b = values(draw, (c,)) if affine else None
    return (
        x,
        w,
        b,
        torch.zeros(c),
        torch.ones(c),
        draw(st.sampled_from([0.1, 0.0])),
        draw(st.sampled_from([1e-5, 1e-3])),
    )


def batch_norm_case(draw):
    x, w, b, rm, rv, mom, eps = _bn_inputs(draw)
    ins = (x, rm, rv) + ((w, b) if w is not None else ())

    def fn(x, rm, rv, w=None, b=None):
        return aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, True, mom, eps)

    return Case(aten._native_batch_norm_legit_functional.default, fn, ins, (_tiles_of(draw, x),) + (False,) * 4)


def batch_norm_backward_case(draw):
    # the saved statistics are inputs, as in the joint graph: the float64 reference then answers for
    # exactly these (float32) statistics, not for a float64 forward's
    x, w, b, rm, rv, mom, eps = _bn_inputs(draw)
    go = values(draw, tuple(x.shape))
    _, mean, invstd, _, _ = aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, True, mom, eps)
    mask = draw(st.sampled_from([[True, True, True], [True, False, False]])) if w is not None else [True, False, False]
    ins = (go, x, mean, invstd) + ((w,) if w is not None else ())

    def fn(go, x, mean, invstd, w=None):
        out = aten.native_batch_norm_backward.default(go, x, w, None, None, mean, invstd, True, eps, mask)
        return tuple(t for t in out if t is not None)

    tiled = (_tiles_of(draw, go), _tiles_of(draw, x)) + (False,) * (len(ins) - 2)
    return Case(aten.native_batch_norm_backward.default, fn, ins, tiled)


def _pool_geometry(draw):
    k, s, dl = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    p = draw(st.integers(0, k // 2))
    shape = dims(draw, 4, rows=(max(3, dl * (k - 1) + 1), 10))
    if shape[3] + 2 * p < dl * (k - 1) + 1:
        shape = shape[:3] + (dl * (k - 1) + 1,)
    return shape, [k, k], [s, s], [p, p], [dl, dl]


def max_pool_case(draw):
    shape, k, s, p, dl = _pool_geometry(draw)

    def fn(x):
        return aten.max_pool2d_with_indices.default(x, k, s, p, dl, False)

    return Case(aten.max_pool2d_with_indices.default, fn, (values(draw, shape),), (draw(st.booleans()),), exact=True)


def max_pool_backward_case(draw):
    shape, k, s, p, dl = _pool_geometry(draw)
    x = values(draw, shape)
    out, _ = aten.max_pool2d_with_indices.default(x, k, s, p, dl, False)
    go = values(draw, tuple(out.shape))

    def fn(go, x):
        _, idx = aten.max_pool2d_with_indices.default(x, k, s, p, dl, False)
        return aten.max_pool2d_with_indices_backward.default(go, x, k, s, p, dl, False, idx)

    return Case(aten.max_pool2d_with_indices_backward.default, fn, (go, x), (_tiles_of(draw, go), _tiles_of(draw, x)))


def _avg_options(draw):
    shape, k, s, p, _ = _pool_geometry(draw)
    return shape, k, s, p, draw(st.booleans()), draw(st.sampled_from([None, 2]))


def avg_pool_case(draw):
    shape, k, s, p, cip, div = _avg_options(draw)

    def fn(x):
        return aten.avg_pool2d.default(x, k, s, p, False, cip, div)

    why = "average pooling with padding not counted"
    return Case(aten.avg_pool2d.default, fn, (values(draw, shape),), (draw(st.booleans()),), may_decline=why)


def avg_pool_backward_case(draw):
    shape, k, s, p, cip, div = _avg_options(draw)
    x = values(draw, shape)
    go = values(draw, tuple(aten.avg_pool2d.default(x, k, s, p, False, cip, div).shape))

    def fn(go, x):
        return aten.avg_pool2d_backward.default(go, x, k, s, p, False, cip, div)

    why = "average pooling with padding not counted"
    return Case(
        aten.avg_pool2d_backward.default, fn, (go, x), (_tiles_of(draw, go), _tiles_of(draw, x)), may_decline=why
    )


SPATIAL_CASES = {
    aten.convolution.default: convolution_case,
    aten.convolution_backward.default: convolution_backward_case,
    aten._native_batch_norm_legit_functional.default: batch_norm_case,
    aten.native_batch_norm_backward.default: batch_norm_backward_case,
    aten.max_pool2d_with_indices.default: max_pool_case,
    aten.max_pool2d_with_indices_backward.default: max_pool_backward_case,
    aten.avg_pool2d.default: avg_pool_case,
    aten.avg_pool2d_backward.default: avg_pool_backward_case,
}


def cases():
    """Every op of the rule tables with its case builder (token and attention cases: :mod:`tiling_cases_tokens`)."""
    from tiling_cases_tokens import TOKEN_CASES

    out = {}
    for op, rule in ELEMENTWISE.items():
        if rule is pointwise:
            out[op] = pointwise_case(op)
        elif rule is reduction:
            out[op] = reduction_case(op)
        elif rule is cat:
            out[op] = cat_case
    for op in ALIAS_RULES:
        out[op] = view_case(op)
    out.update(SPATIAL_CASES)
    out.update(TOKEN_CASES)
    return out


RULE_TABLES = {
    "tiled_rules": ELEMENTWISE,
    "tiled_spatial": SPATIAL,
    "tiled_tokens": TOKENS,
    "tiled_sdpa": FUSED_ATTENTION,
    "tiled_views": ALIAS_RULES,
}
