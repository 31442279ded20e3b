"""Instruction counts of compiled steps on the emulator: per-node costs measured once predict what
any schedule of the program executes, per kind, and every qemu-m4 run prints the two side by side."""

from __future__ import annotations

from dataclasses import replace

import pytest
from toolchain import build_cache_dir, qemu_m4_ready  # noqa: F401  (fixtures)

torch = pytest.importorskip("torch")

import poet  # noqa: E402
from poet.cbackend import instructions  # noqa: E402
from poet.cbackend.compiler import compile_program  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402

pytestmark = pytest.mark.usefixtures("qemu_m4_ready")

STACK_AND_RUNTIME = 8 << 10  # the emulator's RAM region holds the stack and the runtime's statics too


@pytest.fixture(scope="module")
def mlp():
    nn = torch.nn
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 32, bias=False), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(32, 4, bias=False))
    return export_training_graph(model, (torch.randn(48, 16),), nn.MSELoss(), (torch.randn(48, 4),), name="mlp")


@pytest.fixture(scope="module")
def model(mlp, build_cache_dir):  # noqa: F811
    mp = pytest.MonkeyPatch()
    mp.setenv("POET_CACHE_DIR", str(build_cache_dir))
    try:
        return instructions.measure_program(mlp)
    finally:
        mp.undo()


def test_calibration_measures_every_node_in_every_role(mlp, model):
    g = mlp.graph
    assert model.node_names == tuple(n.name for n in g.nodes)
    for nd, n in zip(model.nodes, g.nodes):
        assert nd.kernels > 0 and nd.first >= nd.again > 0
        assert nd.page_out > n.output_bytes and nd.page_in > n.output_bytes  # a CRC-32 over every byte
        assert nd.free_poisoned > nd.free > 0
    assert model.first_page_extra > 0 and model.update_in_ram > 0 and model.update_in_flash > 0
    assert model.update_in_ram == model.update_in_ram_later  # no momentum: every iteration updates alike
    assert 0 <= model.update_last_extra < 20  # the last iteration leaves the loop differently
    # graph outputs are copied at their node's first computation: the loss and the weight gradients
    copies = {n for n, nd in zip(model.node_names, model.nodes) if nd.first > nd.again + 50}
    assert "mse_loss" in copies and len(copies) == 4


@pytest.mark.parametrize("strategy", ["keep-all", "paging", "remat"])
def test_a_run_executes_exactly_the_predicted_instructions(mlp, model, tmp_path, strategy):
    g = costed_program(mlp, "m4")
    peak = poet.solve(g, memory="100%", strategy="keep-all").totals.peak_ram_bytes
    tight = g.min_ram_bytes() + (peak - g.min_ram_bytes()) // 3
    s = poet.solve(g, memory=(peak if strategy == "keep-all" else tight), runtime="100x", strategy=strategy)
    assert s.feasible
    if strategy != "keep-all":
        assert s.totals.page_outs if strategy == "paging" else s.totals.recomputes
    s = s.with_(budget=replace(s.budget, ram_bytes=s.budget.ram_bytes + STACK_AND_RUNTIME))
    r = compile_program(mlp, s, out=tmp_path / "p", target="qemu-m4", run=True, check=True, instruction_model=model)
    assert r.ok, r.lines()
    cmp = r.instructions
    assert cmp is not None and len(cmp.measured) == 1
    assert cmp.predicted == cmp.measured  # same program, same batch: every kind to the instruction
    text = "\n".join(r.lines())
    assert "predicted" in text and "measured" in text and "page_out" in text


def test_later_iterations_on_other_batches_stay_close(mlp, model, tmp_path):
    g = costed_program(mlp, "m4")
    s = poet.solve(g, memory="100%", strategy="keep-all")
    s = s.with_(budget=replace(s.budget, ram_bytes=s.budget.ram_bytes + STACK_AND_RUNTIME))
    gen = torch.Generator().manual_seed(5)
    batches = [mlp.example_batch] + [(torch.randn(48, 16, generator=gen), torch.randn(48, 4, generator=gen))] * 2
    out = tmp_path / "p"
    r = compile_program(mlp, s, out=out, target="qemu-m4", run=True, batches=batches, instruction_model=model)
    assert r.ok and len(r.instructions.measured) == 3
    assert abs(r.instructions.total_error) < 0.01


def test_measuring_again_gives_the_same_counts_and_the_cache_answers(mlp, model, build_cache_dir, monkeypatch):  # noqa: F811
    monkeypatch.setenv("POET_CACHE_DIR", str(build_cache_dir))
    again = instructions.measure_program(mlp, cache=False)  # every count repeats exactly, run to run
    assert again == model
    said = []
    assert instructions.measure_program(mlp, progress=said.append) == model
    assert said == ["per-node instructions of mlp from the cache"]


def test_momentum_is_measured_as_the_run_uses_it(mlp, tmp_path, build_cache_dir, monkeypatch):  # noqa: F811
    monkeypatch.setenv("POET_CACHE_DIR", str(build_cache_dir))
    with_momentum = instructions.measure_program(mlp, momentum=0.9)
    assert with_momentum.momentum == 0.9 and with_momentum.update_in_ram_later > with_momentum.update_in_ram
    g = costed_program(mlp, "m4")
    s = poet.solve(g, memory="100%", strategy="keep-all")
    momentum_buffer = g.meta["fixed_ram"]["grads"]
    s = s.with_(budget=replace(s.budget, ram_bytes=s.budget.ram_bytes + STACK_AND_RUNTIME + momentum_buffer))
    batches = [mlp.example_batch] * 3
    out = tmp_path / "p"
    r = compile_program(mlp, s, out=out, target="qemu-m4", run=True, batches=batches, momentum=0.9)
    cmp = r.instructions
    assert r.ok and cmp.predicted[0] == cmp.measured[0]  # later iterations compute on updated weights
    updates = [it["update"] for it in cmp.measured]
    assert updates == [it["update"] for it in cmp.predicted]
    assert updates[0] < updates[1]  # the first iteration only sets the momentum buffer
