"""The C backend's op registry: registry keys of FX targets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poet.cbackend.opspec import target_key  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten


@pytest.mark.parametrize(
    "target, key",
    [
        (aten.relu.default, "aten.relu.default"),
        (aten.add.Tensor, "aten.add.Tensor"),  # the overload name is written once
        (aten.where.self, "aten.where.self"),
        (aten.sum.dim_IntList, "aten.sum.dim_IntList"),
        (tiled_ops.tile_mm_accumulate, "poet.execute.tiled_ops.tile_mm_accumulate"),
    ],
)
def test_target_key_names_each_overload_once(target, key):
    assert target_key(target) == key
