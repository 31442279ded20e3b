"""Layouts the C kernel tests feed every kernel: the same values as a contiguous tensor, with its
dimensions stored in reverse order, and as a strided slice of a bigger buffer (storage offset,
gaps between elements); outputs in the same layouts, prefilled with NaN so an element a kernel
leaves unwritten shows."""

from __future__ import annotations

import torch

U32 = 2.0**-24  # unit roundoff of float32


def layouts(x: torch.Tensor):
    """``(name, view)`` pairs holding ``x``'s values in each layout."""
    yield "contiguous", x.contiguous()
    if x.dim() >= 2:
        rev = list(range(x.dim()))[::-1]
        yield "reversed", x.permute(rev).contiguous().permute(rev)
    big = torch.zeros([2 * s + 1 for s in x.shape], dtype=x.dtype)
    sliced = big[tuple(slice(1, 1 + 2 * s, 2) for s in x.shape)]
    sliced.copy_(x)
    yield "sliced", sliced


def empty_layouts(shape, dtype=torch.float32):
    """``(name, tensor)`` output buffers of ``shape`` in each layout, every element NaN (or -1)."""
    fill = float("nan") if dtype.is_floating_point else -1
    yield from layouts(torch.full(shape, fill, dtype=dtype))


def randn(*shape, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)


def assert_within(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor | float, what: str = "") -> None:
    """``|got - want| <= bound`` elementwise (want in float64), with the worst element named."""
    err = (got.double() - want.double()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64)
    bad = err > bound
    assert not torch.isnan(got).any() or torch.isnan(want).any(), f"{what}: NaN in the result"
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{what}: |error| {err.flatten()[i].item():.3g} > bound "
            f"{bound.expand_as(err).flatten()[i].item():.3g} at flat index {i}"
        )
