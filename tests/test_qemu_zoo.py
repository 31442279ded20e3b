"""A zoo network on qemu-m4 under a RAM cap, the way ResNet-18 is compiled for its 32 KiB: the RAM region
holds the arena, the measured stack and the statics, so the schedule solved for the whole region is
solved again, tiled into channel groups, for what they leave; the emulator's results match PyTorch and
equal the host's (the same project) bit for bit, and the stack bound holds over the run."""

from __future__ import annotations

import numpy as np
import pytest

from poet.cbackend.compiler import compile_program
from poet.cbackend.layout import read_out
from poet.cbackend.lower_zoo import zoo_program
from poet.cbackend.target_table import get_target
from poet.graph.tiling import build_tiled
from poet.graph.tiling_plan import plan_tiling
from poet.solve.api import solve
from tests.toolchain import build_cache_dir, require, shared_kernels  # noqa: F401  (fixtures)
from tests.zoo_nets import block_net

# every compile here links the kernel libraries built once for the session (toolchain.py)
pytestmark = pytest.mark.usefixtures("shared_kernels")


def test_a_network_under_a_ram_cap_on_qemu_m4_is_tiled_into_channel_groups_to_fit(tmp_path):
    """The RAM region holds stack, statics and arena: the schedule solved for the whole region is solved
    again, tiled into channel groups, for what the measured stack and statics leave; the emulator's
    results equal the host's (the same project) bit for bit."""
    from poet.cbackend import qemu_m4

    if qemu_m4.missing():
        require(qemu_m4.missing())
    ml = block_net(channels=32, hw=(16, 16))  # a row of a 32-channel 16-wide map: 2 KiB; a conv tile: 8 KiB
    region = 9216
    assert not any(k.endswith(":channels") for k in plan_tiling(ml, region).counts)  # rows suffice for the region
    s = solve(
        build_tiled(ml, plan_tiling(ml, region).counts, 1).graph,
        "m4",
        memory=region,
        runtime=None,
        time_limit=8,
        find_min_budgets=False,
    )
    assert s.feasible, s.status
    zp = zoo_program(s.graph, seed=2, layers=ml)
    r = compile_program(zp, s, out=tmp_path / "q", target="qemu-m4", run=True, check=True, fit_time_limit_s=25)
    assert r.run.ok and r.check.ok, "\n".join(r.lines())
    assert r.check.worst("grad").relative < 1e-5
    need = r.ram_region
    m = r.build.memory
    assert m.ram_region == region and m.stack + m.data + m.arena + m.bss <= region
    assert r.arena_bytes <= need.arena_limit and m.stack == need.stack_bytes
    assert r.run.stack_used is not None and r.run.stack_used <= need.stack.bytes  # the bound holds
    assert len(r.fit.attempts) > 1 and any(k.endswith(":channels") for k in r.schedule.graph.meta["tiles"])
    # the same project on the host: the same bits
    host = get_target("host")
    hb = host.build(r.project.path, region)
    run = host.run(hb, tmp_path / "host-run", count=False, timeout_s=300)
    assert run.ok, run.problem()
    h = read_out(r.project.layout, tmp_path / "host-run" / "out.bin")
    assert h.losses == r.results.losses
    for name, g in r.results.grads[0].items():
        assert np.array_equal(g, h.grads[0][name]), name


def test_an_image_larger_than_the_board_is_mapped_and_its_project_run_on_the_host(tmp_path, monkeypatch, capsys):
    """ResNet-18's 44.7 MB of weights do not fit mps2-an386's 4 MiB of flash; here a board of 64 KiB of
    flash stands in for that: the link maps the step with flash widened (its RAM figures are real),
    the image is not run on the emulator, and the same project is run and checked on the host."""
    from poet.cbackend import m4_elf, qemu_m4
    from poet.cli import main
    from poet.graph.zoo import build_model
    from poet.schedule.io import save_schedule

    if qemu_m4.missing():
        require(qemu_m4.missing())
    monkeypatch.setattr(m4_elf, "FLASH_BYTES", 64 << 10)
    monkeypatch.setattr(qemu_m4, "FLASH_BYTES", 64 << 10)
    s = solve(build_model("linear", 2), "m4", memory="100%", runtime=None, time_limit=8, find_min_budgets=False)
    save_schedule(s, tmp_path / "s.json")
    out = tmp_path / "c"
    args = ["compile", "--schedule", str(tmp_path / "s.json"), "--target", "qemu-m4", "--out", str(out), "--check"]
    rc = main([*args, "--fit-time-limit", "20"])
    text = capsys.readouterr()
    assert rc == 2 and "cannot run on mps2-an386" in text.err and "ran on the host instead" in text.err
    assert "FLASH (" in text.out and "widened to map the step" in text.out
    assert "ran on host: ok" in text.out and "against PyTorch: match within the bounds" in text.out
    assert "RAM [0x20000000" in text.out
