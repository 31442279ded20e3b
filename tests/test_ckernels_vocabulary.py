"""The C backend's op registry: keys of FX targets, and every op the demo CNNs trace has a kernel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poet.cbackend import opspec  # noqa: E402
from poet.execute import tiled_ops  # noqa: E402

aten = torch.ops.aten


def test_target_key_names_the_overload_once():
    assert opspec.target_key(aten.relu.default) == "aten.relu.default"
    assert opspec.target_key(aten.add.Tensor) == "aten.add.Tensor"
    assert opspec.target_key(aten.sum.dim_IntList) == "aten.sum.dim_IntList"
    assert opspec.target_key(aten.convolution_backward.default) == "aten.convolution_backward.default"
    assert opspec.target_key(tiled_ops.tile_conv) == "poet.execute.tiled_ops.tile_conv"
