"""Views of tiled tensors: detach, slice, split, unsqueeze, transposes, reshapes and expands, tile by tile.

A view whose tiled axis survives (not sliced, split or expanded along it, and a
reshape that keeps the axes before it and merges or splits it with later
ones) is applied to every tile and stays a view (no bytes); any other view
returns ``None`` and the rewriter joins the tiles first.
"""

from __future__ import annotations

import math
import operator

import torch

from .tiled_emit import fx_value, norm_dim
from .tiled_values import Layout, Tiled, TupleVal

aten = torch.ops.aten


def alias_passthrough(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled) or len(n.all_input_nodes) != 1:
        return None
    tiles = [rw.view(n.target, (t,) + tuple(n.args[1:])) for t in v.tiles]
    return Tiled(v.layout, tiles, v.shape, v.dtype, fx_value(n))


def alias_slice(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    dim = norm_dim(n.args[1] if len(n.args) > 1 else 0, len(v.shape))
    if dim == v.layout.dim:
        return None
    tiles = [rw.view(n.target, (t,) + tuple(n.args[1:])) for t in v.tiles]
    return Tiled(v.layout, tiles, tuple(fx_value(n).shape), v.dtype, fx_value(n))


def alias_split(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    dim = norm_dim(n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0), len(v.shape))
    if dim == v.layout.dim:
        return None
    parts = [rw.view(n.target, (t,) + tuple(n.args[1:])) for t in v.tiles]
    items = {}
    for j, o in enumerate(fx_value(n)):
        items[j] = Tiled(v.layout, [rw.view(operator.getitem, (p, j)) for p in parts], tuple(o.shape), v.dtype, o)
    return TupleVal(items)


def alias_unsqueeze(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    d = norm_dim(n.args[1], len(v.shape) + 1)
    newdim = v.layout.dim + (1 if d <= v.layout.dim else 0)
    tiles = [rw.view(n.target, (t, d)) for t in v.tiles]
    return Tiled(Layout(newdim, v.layout.bounds, v.layout.axis), tiles, tuple(fx_value(n).shape), v.dtype, fx_value(n))


def alias_permute(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    nd = len(v.shape)
    if n.target is aten.t.default:
        perm = [1, 0] if nd == 2 else [0]
    elif n.target is aten.transpose.int:
        perm = list(range(nd))
        i, j = norm_dim(n.args[1], nd), norm_dim(n.args[2], nd)
        perm[i], perm[j] = perm[j], perm[i]
    else:
        perm = [norm_dim(d, nd) for d in n.args[1]]
    newdim = perm.index(v.layout.dim)
    tiles = [rw.view(n.target, (t,) + tuple(n.args[1:])) for t in v.tiles]
    return Tiled(Layout(newdim, v.layout.bounds, v.layout.axis), tiles, tuple(fx_value(n).shape), v.dtype, fx_value(n))


def alias_view(rw, n):
    """A reshape that keeps the dims before the tiled one and merges or splits the tiled dim with later ones."""
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    old, new = list(v.shape), list(fx_value(n).shape)
    d = v.layout.dim
    lead = math.prod(old[:d])
    cands = [e for e in range(len(new)) if math.prod(new[:e]) == lead]
    if not cands:
        return None
    e = next((c for c in cands if new[c] == old[d]), next((c for c in cands if new[c] > 1), cands[0]))
    bounds = v.layout.bounds
    if new[e] == old[d]:
        nb = bounds
    elif new[e] > old[d] and new[e] % old[d] == 0 and math.prod(old[d:]) == math.prod(new[e:]):
        f = new[e] // old[d]
        if math.prod(old[d + 1 :]) % f:
            return None
        nb = tuple(x * f for x in bounds)
    elif old[d] % new[e] == 0:
        f = old[d] // new[e]
        if any(x % f for x in bounds) or math.prod(new[e + 1 :]) % f:
            return None
        nb = tuple(x // f for x in bounds)
    else:
        return None
    tiles = []
    for i, t in enumerate(v.tiles):
        shp = list(new)
        shp[e] = nb[i + 1] - nb[i]
        tiles.append(rw.view(n.target, (t, shp)))
    return Tiled(Layout(e, nb, v.layout.axis), tiles, tuple(new), v.dtype, fx_value(n))


def alias_expand(rw, n):
    v = rw.env[n.args[0]]
    if not isinstance(v, Tiled):
        return None
    sizes = list(n.args[1])
    if len(sizes) != len(v.shape) or sizes[v.layout.dim] not in (-1, v.shape[v.layout.dim]):
        return None
    tiles = []
    for i, t in enumerate(v.tiles):
        s = list(sizes)
        a0, b0 = v.layout.rows(i)
        s[v.layout.dim] = b0 - a0
        tiles.append(rw.view(n.target, (t, s)))
    return Tiled(v.layout, tiles, tuple(fx_value(n).shape), v.dtype, fx_value(n))


ALIAS_RULES = {
    aten.detach.default: alias_passthrough,
    aten.alias.default: alias_passthrough,
    aten.slice.Tensor: alias_slice,
    aten.unsqueeze.default: alias_unsqueeze,
    aten.t.default: alias_permute,
    aten.transpose.int: alias_permute,
    aten.permute.default: alias_permute,
    aten.view.default: alias_view,
    aten._unsafe_view.default: alias_view,
    aten.expand.default: alias_expand,
    aten.split.Tensor: alias_split,
    aten.split_with_sizes.default: alias_split,
}
