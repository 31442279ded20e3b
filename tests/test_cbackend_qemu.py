"""A compiled step on the emulated Cortex-M4: the same results as the host build, bit for bit, in a RAM
region of exactly the budget; the paper's setting keeps the gradients outside it."""

from __future__ import annotations

import pytest
from toolchain import build_cache_dir, qemu_m4_ready  # noqa: F401  (fixtures)

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402

from poet import demo_models as models  # noqa: E402
from poet.cbackend.compiler import compile_program  # noqa: E402
from poet.execute.reference import reference_schedule  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402

pytestmark = pytest.mark.usefixtures("qemu_m4_ready")

STACK_AND_RUNTIME = 8 << 10  # the RAM region also holds the stack and the runtime's statics


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    m = models.MLP(d_in=8, hidden=16, layers=2, num_classes=4, dropout=0.3)
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    return export_training_graph(m.train(), (x,), nn.CrossEntropyLoss(), (y,))


@pytest.fixture(scope="module")
def icount(mlp, build_cache_dir):  # noqa: F811
    """The instruction model of the step, measured once (every qemu-m4 run is compared with it)."""
    from poet.cbackend.instructions import measure_program

    mp = pytest.MonkeyPatch()
    mp.setenv("POET_CACHE_DIR", str(build_cache_dir))
    try:
        return measure_program(mlp)
    finally:
        mp.undo()


def _schedule(prog, kind, fixed=None):
    g = costed_program(prog, "m4", fixed_ram_bytes=fixed)
    peak = reference_schedule(g, kind, every=2).totals.peak_ram_bytes
    return reference_schedule(g, kind, every=2, ram_bytes=peak + STACK_AND_RUNTIME)


@pytest.mark.parametrize("kind", ["paging", "remat"])
def test_host_and_emulator_write_the_same_bits(mlp, icount, kind, tmp_path):
    s = _schedule(mlp, kind)
    batches = [mlp.example_batch] * 2
    outs = {}
    for target in ("host", "qemu-m4"):
        res = compile_program(
            mlp,
            s,
            out=tmp_path / target,
            target=target,
            run=True,
            check=True,
            batches=batches,
            instruction_model=icount,
        )
        assert res.run.ok, res.run.problem()
        assert res.check.ok, res.check.lines()
        outs[target] = (tmp_path / target / "run" / "out.bin").read_bytes()
        if target == "qemu-m4":
            assert abs(res.instructions.total_error) < 0.05  # predicted beside measured, every run
            mem = res.build.memory
            assert mem.ram_region == s.budget.ram_bytes and mem.ram <= mem.ram_region
            assert mem.arena == res.arena_bytes
    assert outs["host"] == outs["qemu-m4"]  # loss, gradients, parameters and buffers, bit for bit


def test_the_papers_setting_keeps_gradients_outside_the_ram_budget(mlp, icount, tmp_path):
    s = _schedule(mlp, "keep", fixed=0)  # activations only: parameters in flash, gradients external
    res = compile_program(mlp, s, out=tmp_path / "p", target="qemu-m4", run=True, check=True, instruction_model=icount)
    assert res.run.ok and res.check.ok, res.check.lines()
    mem = res.build.memory
    assert mem.external >= res.project.layout.param_bytes  # the gradients
    assert mem.data < res.project.layout.param_bytes  # the parameters are not in RAM
