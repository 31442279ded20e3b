"""The C kernels that move elements between views, against torch, bit for bit: copy (clone of any
layout), cat / stack (and the tile joins), masked_fill / where, tril."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from ckernel_cases import empty_layouts, layouts, randn  # noqa: E402

from poet.cbackend import hostlib  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402


def values(shape, dtype, seed=0):
    if dtype == torch.bool:
        return randn(*shape, seed=seed) > 0
    if dtype in (torch.int64, torch.int32):
        return torch.randint(-50, 50, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return randn(*shape, seed=seed, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4)])
def test_copy_any_layout_any_dtype(shape, dtype):
    x0 = values(shape, dtype)
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(shape, dtype)):
        hostlib.call("copy", [x], [out])
        assert torch.equal(out, x0), (nx, no)


def test_copy_keeps_nan_payloads_and_signed_zeros():
    x = torch.tensor([float("nan"), -0.0, float("-inf")])
    out = torch.empty(3)
    hostlib.call("copy", [x], [out])
    assert out.view(torch.int32).tolist() == x.view(torch.int32).tolist()


def test_copy_shape_and_dtype_mismatch_are_errors():
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("copy", [torch.zeros(3)], [torch.zeros(4)])
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("copy", [torch.zeros(3)], [torch.zeros(3, dtype=torch.float64)])


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_cat_every_layout(dim, dtype):
    shape = [2, 3, 4]
    parts0 = []
    for k in (1, 3, 2):
        shape[dim] = k
        parts0.append(values(tuple(shape), dtype, seed=k))
    want = torch.cat(parts0, dim)
    for combo in itertools.product(*[list(layouts(p)) for p in parts0]):
        parts = [v for _, v in combo]
        for no, out in empty_layouts(want.shape, dtype):
            hostlib.call("cat", parts, [out], [dim, len(parts)])
            assert torch.equal(out, want), ([n for n, _ in combo], no)


def test_cat_skips_legacy_empty_inputs_and_checks_sizes():
    a, b = randn(2, 3, seed=1), randn(4, 3, seed=2)
    out = torch.empty(6, 3)
    hostlib.call("cat", [a, torch.empty(0), b], [out], [0, 3])
    assert torch.equal(out, torch.cat([a, torch.empty(0), b]))
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("cat", [a, b], [torch.empty(5, 3)], [0, 2])  # the parts do not fill the output
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("cat", [a, b], [out], [0, 3])  # count disagrees with the tensors given


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim):
    parts0 = [randn(3, 4, seed=k) for k in range(3)]
    want = torch.stack(parts0, dim)
    for combo in itertools.product(*[list(layouts(p)) for p in parts0]):
        for no, out in empty_layouts(want.shape):
            hostlib.call("stack", [v for _, v in combo], [out], [dim, 3])
            assert torch.equal(out, want), no


@pytest.mark.parametrize("dim", [0, 1])
def test_tile_assemble_and_gather_are_cats(dim):
    tiles = [randn(*((3, 4) if dim == 0 else (4, 3)), seed=k) for k in range(3)]
    for fn in (tiled_ops.tile_assemble, tiled_ops.tile_gather):
        for k in (1, 3):
            want = fn(tiles[:k], dim)
            out = torch.empty(want.shape)
            hostlib.call("cat", tiles[:k], [out], [dim, k])
            assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_masked_fill_scalar_tensor_and_where(dtype):
    x0, other0 = values((3, 5), dtype, seed=3), values((3, 5), dtype, seed=4)
    mask0 = randn(3, 5, seed=5) > 0.3
    fill = -7.0 if dtype != torch.bool else 1.0
    for (nx, x), (nm, mask), (no, out) in itertools.product(layouts(x0), layouts(mask0), empty_layouts((3, 5), dtype)):
        hostlib.call("masked_fill", [x, mask, None], [out], [fill])
        want = x0.masked_fill(mask0, fill if dtype != torch.int64 else int(fill))
        assert torch.equal(out, want), ("scalar", nx, nm, no)
        hostlib.call("masked_fill", [other0, mask, x], [out], [0.0])  # where(mask, x, other)
        assert torch.equal(out, torch.where(mask0, x0, other0)), ("where", nx, nm, no)


def test_masked_fill_with_broadcast_views_as_the_lowering_passes_them():
    """A causal mask [n, n] and a 0-dim value viewed with the scores' shape [b, h, n, n] (stride 0)."""
    scores = randn(2, 3, 4, 4, seed=6)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    out = torch.empty_like(scores)
    hostlib.call("masked_fill", [scores, (~causal).expand_as(scores), None], [out], [float("-inf")])
    assert torch.equal(out, scores.masked_fill(~causal, float("-inf")))
    value = torch.tensor(2.5)
    hostlib.call("masked_fill", [scores, (~causal).expand_as(scores), value.expand_as(scores)], [out], [0.0])
    assert torch.equal(out, scores.masked_fill(~causal, value))


def test_masked_fill_refuses_a_mask_that_is_not_bool_and_unbroadcast_views():
    x = randn(3, 4)
    with pytest.raises(hostlib.KernelError, match="bad dtype"):
        hostlib.call("masked_fill", [x, torch.zeros(3, 4), None], [torch.empty(3, 4)], [0.0])
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        hostlib.call("masked_fill", [x, torch.zeros(4, dtype=torch.bool), None], [torch.empty(3, 4)], [0.0])


@pytest.mark.parametrize("diagonal", [0, -1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 4, 3)])
def test_tril(shape, dtype, diagonal):
    x0 = values(shape, dtype, seed=7)
    for (nx, x), (no, out) in itertools.product(layouts(x0), empty_layouts(shape, dtype)):
        hostlib.call("tril", [x], [out], [diagonal])
        assert torch.equal(out, torch.tril(x0, diagonal)), (nx, no)
