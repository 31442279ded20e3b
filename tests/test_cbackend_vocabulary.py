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


def test_value_dtype_follows_long_chains_of_untraced_nodes():
    """A tiled step's new nodes carry no traced value: their dtype is their first tensor argument's,
    however far back (a tiled BERT step has chains of 18)."""
    from poet.cbackend.opspec import scalar_for, value_dtype

    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, dtype=torch.float32)
    n = x
    for _ in range(40):
        n = g.call_function(aten.neg.default, (n,))
    assert value_dtype(n) == "float32"
    assert scalar_for(value_dtype(n), 0.35) == 0.35
    assert scalar_for("unknown", 0.35) == 0.35 and scalar_for("int64", 3.0) == 3
