"""Every op of the demo CNNs' traced training steps, untiled and tiled, through its spec and C kernel.

For cnn, dwcnn and dwnet, whole and split into 2 and 4 tiles (every op with a tiling rule), each
node's kernel runs on the values the traced step computed for its inputs, and its outputs are
compared with the step's: bit for bit for the ops whose kernels follow aten's or the Python tile's
arithmetic exactly, within 1e-5 of the output's magnitude otherwise (sums in another order).  Where
float32 aten is itself inexact (BatchNorm's weight gradient under cancellation: 1.3e-3 from float64
on dwnet), the kernel may instead be within the bound of the op recomputed in float64.  Dropout's
kernel is compared with its Python reference (poet.cbackend.rng), torch's mask being another draw.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ckernel_specs import program_values, run_kernel, set_step_seed  # noqa: E402

from poet.cbackend import rng, vocabulary  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp, target_key  # noqa: E402
from poet.execute import models  # noqa: E402
from poet.execute.tiled import tile_program  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402

aten = torch.ops.aten
BOUND = 1e-5
EXACT = {
    "aten.relu.default",
    "aten.threshold_backward.default",
    "aten.hardtanh.default",
    "aten.hardtanh_backward.default",
    "aten.add.Tensor",
    "aten.div.Scalar",
    "aten.native_dropout_backward.default",
    "poet.execute.tiled_ops.tile_bn_apply",
    "poet.execute.tiled_ops.tile_bn_combine",
    "poet.execute.tiled_ops.tile_bn_grad_combine",
    "poet.execute.tiled_ops.tile_bn_grad_input",
    "poet.execute.tiled_ops.tile_sum_combine",
}


@pytest.fixture(scope="module", params=["cnn", "dwcnn", "dwnet"])
def program(request):
    model, loss, data = models.build(request.param)
    model.train()
    inputs, targets = data.batch()
    return request.param, export_training_graph(model, inputs, loss, targets)


def relative_error(got, want) -> float:
    if not want.is_floating_point():
        return 0.0 if torch.equal(got, want) else float("inf")
    scale = max(float(want.abs().max()), 1e-30) if want.numel() else 1.0
    both_nan = torch.isnan(got) & torch.isnan(want)
    diff = (got.double() - want.double()).abs()
    diff[both_nan] = 0
    return float(diff.max()) / scale if want.numel() else 0.0


def float64_outputs(node, values):
    """The aten op recomputed on float64 copies of its float32 inputs (None for a tile kernel)."""
    if not hasattr(node.target, "_schema"):
        return None

    def up(a):
        if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
            return a.detach().double()
        if isinstance(a, (list, tuple)):
            return type(a)(up(x) for x in a)
        return a

    args = [up(values[a]) if hasattr(a, "op") else up(a) for a in node.args]
    out = node.target(*args, **node.kwargs)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@pytest.mark.parametrize("tiles", [0, 2, 4])
def test_every_node_runs_through_its_kernel(program, tiles):
    name, prog = program
    p = prog if tiles == 0 else tile_program(prog, tiles, 0)[0]
    nodes, values = program_values(p)
    missing, checked = set(), 0
    for n in nodes:
        key = target_key(n.target)
        try:
            vocabulary.spec_for(n)
        except UnsupportedOp:
            missing.add(key)
            continue
        if n.target is aten.native_dropout.default:
            set_step_seed(5)
            want = rng.native_dropout(values[n.args[0]], float(n.args[1]), n.args[2], 5, rng.unit_of(n.name))
            _, got = run_kernel(n, values)
        else:
            want, got = run_kernel(n, values)
        ref64 = None
        for i, (w, g) in enumerate(zip(want, got)):
            if w is None:
                continue
            w = w.detach()
            err = relative_error(g, w)
            if key in EXACT:
                assert err == 0.0, f"{name} x{tiles} {n.name} ({key}) output {i}: {err:.2e} from torch's, not exact"
            if err > BOUND:
                ref64 = ref64 or float64_outputs(n, values)
                err = min(err, relative_error(g, ref64[i]) if ref64 else err)
            assert err <= BOUND, f"{name} x{tiles} {n.name} ({key}) output {i}: relative error {err:.2e}"
        checked += 1
    assert not missing, f"ops without a kernel: {sorted(missing)}"
    assert checked == len(nodes)
