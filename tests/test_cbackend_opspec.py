"""The op-spec registry's keys: what the lowering looks a traced FX call up by."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poet.cbackend.opspec import target_key  # noqa: E402

aten = torch.ops.aten


@pytest.mark.parametrize(
    "op, key",
    [
        (aten.relu.default, "aten.relu.default"),
        (aten.add.Tensor, "aten.add.Tensor"),
        (aten.sum.dim_IntList, "aten.sum.dim_IntList"),
        (aten.mean.dim, "aten.mean.dim"),
        (aten._native_batch_norm_legit_functional.default, "aten._native_batch_norm_legit_functional.default"),
    ],
)
def test_aten_overload_keys_name_the_overload_once(op, key):
    assert target_key(op) == key


def test_python_tile_kernels_are_keyed_by_qualified_name():
    from poet.execute import tiled_ops

    assert target_key(tiled_ops.tile_conv) == "poet.execute.tiled_ops.tile_conv"
