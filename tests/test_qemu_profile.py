"""``poet profile --target qemu-m4``: a device profile in instructions that every planner reads."""

from __future__ import annotations

import sys
import textwrap

import pytest
from toolchain import build_cache_dir, qemu_m4_ready, shared_kernels  # noqa: F401  (fixtures)

torch = pytest.importorskip("torch")

import poet  # noqa: E402
from poet.cli import main  # noqa: E402
from poet.hardware import load_device  # noqa: E402
from poet.hardware.device import DeviceError  # noqa: E402

MODEL = """
import torch
import torch.nn as nn


class Data:
    def __init__(self):
        self.g = torch.Generator().manual_seed(1)

    def batch(self):
        return (torch.randn(24, 8, generator=self.g),), (torch.randn(24, 3, generator=self.g),)


def mlp():
    torch.manual_seed(0)
    layers = [nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 3, bias=False)]
    return nn.Sequential(*layers), nn.MSELoss(), Data()
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, build_cache_dir):  # noqa: F811
    """The profile of a small MLP, measured once for the module (the folder holds the model's module)."""
    from toolchain import require_qemu_m4

    require_qemu_m4()
    folder = tmp_path_factory.mktemp("profile")
    (folder / "qprof_mlp.py").write_text(textwrap.dedent(MODEL))
    mp = pytest.MonkeyPatch()
    mp.setenv("POET_CACHE_DIR", str(build_cache_dir))
    mp.chdir(folder)
    mp.syspath_prepend(str(folder))
    try:
        out = folder / "mlp.toml"
        rc = main(["profile", "--target", "qemu-m4", "--model", "qprof_mlp:mlp", "--out", str(out), "--quiet"])
        assert rc == 0
        yield folder, out
    finally:
        mp.undo()
        sys.modules.pop("qprof_mlp", None)


def plan_of(folder, device, **kw):
    sys.path.insert(0, str(folder))
    try:
        import qprof_mlp

        model, loss_fn, data = qprof_mlp.mlp()
        (x,), (y,) = data.batch()
        return poet.plan(model, (x,), loss_fn, targets=(y,), device=device, **kw)
    finally:
        sys.path.remove(str(folder))


def test_the_profile_says_what_is_measured_and_what_declared(profiled):
    _, path = profiled
    text = path.read_text()
    for phrase in ("Measured:", "Declared:", "clock_hz = 64000000.0", "measured =", "declared ="):
        assert phrase in text
    dev = load_device(path)
    table = dev.instructions
    assert table is not None and table.clock_hz == 64e6 and table.joules_per_instruction > 0
    (prog,) = table.programs
    assert prog.name == "qprof_mlp:mlp" and len(prog.nodes) == 9  # mm relu mm mse_loss(+bwd) mm mm thr_bwd mm
    for c in prog.nodes.values():
        assert c.compute >= c.recompute > 0 and c.page_in > 0 and c.page_out > 0 and c.free > 0
    assert dev.families  # the fallback for graphs the table does not have


def test_a_plan_with_the_profile_is_priced_in_instructions(profiled):
    folder, path = profiled
    table = load_device(path).instructions
    nodes = table.programs[0].nodes
    pl = plan_of(folder, str(path), memory="100%", strategy="keep-all")
    g = pl.graph
    assert g.meta["priced_by"] == "instructions of qprof_mlp:mlp"
    for nd in g.nodes:
        c = nodes[nd.name]
        assert nd.compute_time_s == pytest.approx(c.compute / 64e6, rel=1e-12)
        assert nd.compute_energy_j == pytest.approx(c.compute * table.joules_per_instruction, rel=1e-12)
        paged = nd.ram_bytes * table.joules_per_byte_paged
        assert nd.pageout_energy_j == pytest.approx(c.page_out * table.joules_per_instruction + paged, rel=1e-12)
    # a graph the profile did not measure is priced by the families fitted to the same measurements
    other = load_device(path)
    assert poet.solve("linear", other, memory="100%", strategy="keep-all").feasible


@pytest.mark.usefixtures("shared_kernels")  # measured again, in its own cache, but not built again
def test_declared_values_are_the_users(profiled, tmp_path):
    folder, _ = profiled
    out = tmp_path / "fast.toml"
    rc = main(["profile", "--target", "qemu-m4", "--model", "qprof_mlp:mlp", "--out", str(out), "--quiet",
               "--clock-hz", "128e6", "--joules-per-instruction", "2e-10", "--joules-per-byte", "1e-8"])  # fmt: skip
    assert rc == 0
    table = load_device(out).instructions
    assert (table.clock_hz, table.joules_per_instruction, table.joules_per_byte_paged) == (128e6, 2e-10, 1e-8)
    assert "given: clock_hz, joules_per_instruction, joules_per_byte_paged" in out.read_text()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--out", "x.toml"], "give --model"),
        (["--model", "cnn"], "give --out"),
        (["--model", "cnn", "--out", "x.toml", "--clock-hz", "-5"], "positive"),
    ],
)
def test_bad_profile_requests_are_refused(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--target", "qemu-m4", "--quiet", *args]) == 2
    assert says in capsys.readouterr().err


def test_host_profiles_refuse_the_instruction_options(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--out", "x.toml", "--memory", "200KB"]) == 2
    assert "--target qemu-m4" in capsys.readouterr().err


@pytest.mark.parametrize(
    "edit, says",
    [
        (("clock_hz = 64000000.0", "clock_hz = 0"), "clock_hz must be a finite positive number"),
        (("free = ", "free = -"), "must be a count of instructions"),
    ],
)
def test_a_damaged_instruction_table_is_refused(profiled, tmp_path, edit, says):
    _, path = profiled
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text().replace(*edit, 1))
    with pytest.raises(DeviceError, match=says):
        load_device(bad)


def test_a_tiled_plan_is_priced_from_the_tiled_step_measured(tmp_path, build_cache_dir, monkeypatch):  # noqa: F811
    monkeypatch.setenv("POET_CACHE_DIR", str(build_cache_dir))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cnn.toml"
    args = ["--model", "cnn", "--batch-size", "2", "--memory", "90KB", "--out", str(out), "--quiet"]
    assert main(["profile", "--target", "qemu-m4", *args]) == 0
    names = [p.name for p in load_device(out).instructions.programs]
    assert names == ["cnn", "cnn, tiled for 90000 B"]
    from poet.cbackend.target_types import RUNTIME_RAM_BYTES
    from poet.demo_models import load

    torch.manual_seed(0)
    model, loss_fn, data = load("cnn", batch_size=2, seed=0, dropout=0.1)
    x, y = data.batch()
    pl = poet.plan(model.train(), x, loss_fn, targets=y, device=str(out), memory="90KB", optimizer="sgd",
                   runtime_ram_bytes=RUNTIME_RAM_BYTES, time_limit=10)  # fmt: skip
    assert pl.tiling is not None and pl.tiling.tiled
    assert pl.graph.meta["priced_by"] == "instructions of cnn, tiled for 90000 B"


def test_a_model_the_kernels_do_not_cover_is_refused_naming_the_op(tmp_path, capsys, monkeypatch):
    (tmp_path / "qprof_bad.py").write_text(
        textwrap.dedent(MODEL).replace("nn.ReLU()", "nn.Softplus()").replace("def mlp", "def bad")
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        rc = main(["profile", "--target", "qemu-m4", "--model", "qprof_bad:bad", "--out", "x.toml", "--quiet"])
    finally:
        sys.modules.pop("qprof_bad", None)
    assert rc == 2
    err = capsys.readouterr().err
    assert "no kernel for" in err and "softplus" in err and not (tmp_path / "x.toml").exists()
