"""The indexing C kernels against torch on strided layouts: embedding (+ its gradient and the tiled
accumulation), gather / scatter_add, index_select / index_add, select_backward, slice_backward.

All of them move or add elements in the order aten's CPU kernels do, so they must equal torch bit
for bit (torch.equal), except the gradient scaled by frequency, where aten may fuse a multiply-add.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import U32, assert_within, empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten


def ids(*shape, high: int, seed: int = 0, dtype=torch.int64):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("idx_shape", [(5,), (2, 7), ()])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_every_layout(idx_shape, dtype):
    w0, idx0 = randn(11, 6, seed=1), ids(*idx_shape, high=11, seed=2, dtype=dtype)
    want = aten.embedding(w0, idx0)
    for (nw, w), (ni, idx), (no, out) in itertools.product(layouts(w0), layouts(idx0), empty_layouts(want.shape)):
        hostlib.call("embedding", [w, idx], [out])
        assert torch.equal(out, want), (nw, ni, no)


def test_embedding_index_out_of_range_is_an_error():
    w = randn(4, 3)
    for bad in (4, -1):
        with pytest.raises(hostlib.KernelError, match="bad arguments"):
            hostlib.call("embedding", [w, torch.tensor([0, bad])], [torch.empty(2, 3)])


@pytest.mark.parametrize("padding_idx", [-1, 3])
def test_embedding_dense_backward_equals_aten(padding_idx):
    idx0 = ids(3, 9, high=8, seed=3)  # repeated indices: the order of the sums matters
    g0 = randn(3, 9, 5, seed=4)
    want = aten.embedding_dense_backward(g0, idx0, 8, padding_idx, False)
    for (ng, g), (ni, idx), (no, out) in itertools.product(layouts(g0), layouts(idx0), empty_layouts((8, 5))):
        hostlib.call("embedding_backward", [None, g, idx], [out], [padding_idx, 0])
        assert torch.equal(out, want), (ng, ni, no)


def test_embedding_backward_scaled_by_frequency():
    idx, g = ids(20, high=6, seed=5), randn(20, 4, seed=6)
    want = aten.embedding_dense_backward(g, idx, 6, -1, True)
    out = torch.empty(6, 4)
    hostlib.call("embedding_backward", [None, g, idx], [out], [-1, 1])
    exact = aten.embedding_dense_backward(g.double(), idx, 6, -1, True)
    assert_within(out, exact, 20 * U32 * aten.embedding_dense_backward(g.abs().double(), idx, 6, -1, True), "by freq")
    assert_within(out, want, 4 * U32 * want.abs() + 1e-30, "vs aten")


@pytest.mark.parametrize("first", [True, False])
def test_tile_embedding_grad_accumulate_equals_the_python_tile(first):
    idx, g = ids(2, 6, high=7, seed=7), randn(2, 6, 3, seed=8)
    acc = None if first else randn(7, 3, seed=9)
    want = tiled_ops.tile_embedding_grad_accumulate(acc, g, idx, 7, -1, False)
    for no, out in empty_layouts((7, 3)):
        hostlib.call("embedding_backward", [acc, g, idx], [out], [-1, 0])
        assert torch.equal(out, want), no


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_and_its_gradient_scatter_add(dim):
    x0 = randn(4, 5, seed=10)
    index0 = ids(3, 4, high=x0.shape[dim], seed=11)
    want = torch.gather(x0, dim, index0)
    for (nx, x), (ni, index), (no, out) in itertools.product(layouts(x0), layouts(index0), empty_layouts(want.shape)):
        hostlib.call("gather", [x, index], [out], [dim])
        assert torch.equal(out, want), (nx, ni, no)
    src0 = randn(3, 4, seed=12)
    want = torch.scatter_add(x0, dim, index0, src0)  # repeated indices in a row: sums in order
    for (ns_, src), (no, out) in itertools.product(layouts(src0), empty_layouts(want.shape)):
        hostlib.call("scatter_add", [x0, index0, src], [out], [dim])
        assert torch.equal(out, want), (ns_, no)


def test_gather_index_out_of_range_is_an_error():
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("gather", [randn(2, 3), torch.tensor([[0, 3]])], [torch.empty(1, 2)], [1])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_and_its_gradient_index_add(dim):
    x0 = randn(3, 4, 5, seed=13)
    index0 = ids(6, high=x0.shape[dim], seed=14)
    want = torch.index_select(x0, dim, index0)
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(want.shape)):
        hostlib.call("index_select", [x, index0], [out], [dim])
        assert torch.equal(out, want), (nx, no)
    src0 = randn(*want.shape, seed=15)
    want = torch.index_add(x0, dim, index0, src0)
    for (ns_, src), (no, out) in itertools.product(layouts(src0), empty_layouts(want.shape)):
        hostlib.call("index_add", [x0, index0, src], [out], [dim, 1.0])
        assert torch.equal(out, want), (ns_, no)


@pytest.mark.parametrize("dim, index", [(0, 1), (1, -1), (2, 0)])
def test_select_backward(dim, index):
    sizes = [3, 4, 5]
    g0 = randn(*[s for d, s in enumerate(sizes) if d != dim], seed=16)
    want = aten.select_backward(g0, sizes, dim, index)
    for (ng, g), (no, out) in itertools.product(layouts(g0), empty_layouts(sizes)):
        hostlib.call("select_backward", [g], [out], [dim, index])
        assert torch.equal(out, want), (ng, no)


@pytest.mark.parametrize("dim, start, end, step", [(0, 1, 3, 1), (1, 0, 7, 2), (1, -5, 100, 3), (0, 0, 2**63 - 1, 1)])
def test_slice_backward(dim, start, end, step):
    sizes = [4, 7]
    like = torch.empty(sizes)
    g0 = randn(*aten.slice(like, dim, start, end, step).shape, seed=17)
    want = aten.slice_backward(g0, sizes, dim, start, end, step)
    for (ng, g), (no, out) in itertools.product(layouts(g0), empty_layouts(sizes)):
        hostlib.call("slice_backward", [g], [out], [dim, start, end, step])
        assert torch.equal(out, want), (ng, no)
