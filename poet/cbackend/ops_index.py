"""Specs of indexing ops and their gradients (kernels: runtime/kernels_index.c).

Embedding's gradient and its tiled accumulation are one kernel, ``embedding_backward(acc, grad,
indices)`` (``acc`` absent untiled), as are mm and ``tile_mm_accumulate`` in :mod:`.ops_matmul`.
"""

from __future__ import annotations

from .opspec import CallSpec, arg, register


@register("aten.embedding.default")
def embedding(n) -> CallSpec:
    return CallSpec("embedding", (n.args[0], n.args[1]))


@register("aten.embedding_dense_backward.default")
def embedding_dense_backward(n) -> CallSpec:
    grad, indices, _num_weights, padding_idx, by_freq = n.args[:5]
    return CallSpec("embedding_backward", (None, grad, indices), (int(padding_idx), int(bool(by_freq))))


@register("poet.execute.tiled_ops.tile_embedding_grad_accumulate")
def tile_embedding_grad_accumulate(n) -> CallSpec:
    acc, grad, indices, _num_weights, padding_idx, by_freq = n.args[:6]
    return CallSpec("embedding_backward", (acc, grad, indices), (int(padding_idx), int(bool(by_freq))))


@register("aten.gather.default")
def gather(n) -> CallSpec:
    x, dim, index = n.args[:3]
    return CallSpec("gather", (x, index), (int(dim),))


@register("aten.scatter_add.default")
def scatter_add(n) -> CallSpec:
    x, dim, index, src = n.args[:4]
    return CallSpec("scatter_add", (x, index, src), (int(dim),))


@register("aten.index_select.default")
def index_select(n) -> CallSpec:
    x, dim, index = n.args[:3]
    return CallSpec("index_select", (x, index), (int(dim),))


@register("aten.index_add.default")
def index_add(n) -> CallSpec:
    x, dim, index, src = n.args[:4]
    return CallSpec("index_add", (x, index, src), (int(dim), float(arg(n, 4, "alpha", 1))))


@register("aten.select_backward.default")
def select_backward(n) -> CallSpec:
    grad, _sizes, dim, index = n.args[:4]
    return CallSpec("select_backward", (grad,), (int(dim), int(index)))


@register("aten.slice_backward.default")
def slice_backward(n) -> CallSpec:
    grad, _sizes, dim, start, end, step = n.args[:6]
    return CallSpec("slice_backward", (grad,), (int(dim), int(start), int(end), int(step)))
