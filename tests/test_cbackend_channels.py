"""Zoo networks tiled by channel groups, compiled and run on the host: gradients match PyTorch and
equal, bit for bit, the same network tiled by rows only (a group regroups the sums, never reorders
them).  tests/test_qemu_zoo.py runs one under a RAM cap on qemu-m4."""

from __future__ import annotations

import numpy as np
import pytest

from poet.cbackend import hostlib
from poet.cbackend.compiler import compile_program
from poet.cbackend.lower_zoo import zoo_program
from poet.graph.tiling import build_tiled
from poet.graph.zoo import DATA, ModelLayers
from poet.graph.zoo_layers import NetBuilder
from poet.solve.api import solve
from tests.toolchain import build_cache_dir, require, shared_host_kernels  # noqa: F401  (fixtures)
from tests.zoo_nets import block_net

# every compile here links the kernel libraries built once for the session (toolchain.py)
pytestmark = pytest.mark.usefixtures("shared_host_kernels")


@pytest.fixture(scope="module", autouse=True)
def _cc():
    try:
        hostlib.compiler()
    except hostlib.KernelError as e:
        require(str(e))


ROWS = {n: 3 for n in ("conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "conv3", "bn3", "add", "relu3")}
GROUPS = {
    "conv1:channels": 2,
    "relu1:channels": 4,
    "conv2:channels": 2,
    "bn2:channels": 2,
    "relu2:channels": 2,
    "conv3:channels": 4,
    "add:channels": 2,
    "relu3:channels": 2,
}


def _run(ml, tiles, tmp_path, name, b=2):
    g = build_tiled(ml, tiles, b).graph
    s = solve(g, "m4", memory="100%", runtime=None, time_limit=8, find_min_budgets=False)
    assert s.feasible, s.status
    zp = zoo_program(s.graph, seed=4, layers=ml)
    r = compile_program(zp, s, out=tmp_path / name, run=True, check=True, fit_time_limit_s=20)
    assert r.run.ok, r.run.problem()
    assert r.check.ok, "\n".join(r.check.lines())
    return r


def test_channel_groups_match_pytorch_and_the_row_tiling_bit_for_bit(tmp_path):
    ml = block_net()
    rows = _run(ml, ROWS, tmp_path, "rows")
    both = _run(ml, {**ROWS, **GROUPS}, tmp_path, "both")
    assert both.check.worst("grad").relative < 1e-5
    kinds = set(both.project.tables.kernels)
    assert {"zoo_conv_weight_grad", "zoo_conv_grad_input", "zoo_bn_grad", "zoo_avgpool_partial"} <= kinds
    a, c = rows.results, both.results
    assert a.losses == c.losses
    for name, g in a.grads[0].items():
        assert np.array_equal(g, c.grads[0][name]), name


def test_whole_batchnorm_over_channel_groups_and_a_flatten_of_them(tmp_path):
    """A BatchNorm not split itself reads the groups of the convolution before it; a classifier flattens
    a map split into channel groups, and its gradient goes back into those groups."""
    net = NetBuilder((2, 4, 4))
    x = net.relu("relu1", net.batchnorm("bn1", net.conv("conv1", DATA, 6, 3, 1, 1)))
    net.linear("fc", net.flatten("flatten", x), 3)
    ml = ModelLayers("flat_net", net.input_shape, tuple(net.layers))
    r = _run(ml, {"conv1:channels": 3, "relu1:channels": 2}, tmp_path, "flat", b=3)
    assert {"zoo_unflatten", "zoo_bn_grad"} <= set(r.project.tables.kernels)
    assert r.check.worst("grad").relative < 1e-5
