"""A zoo network on qemu-m4 under a RAM cap, the way ResNet-18 is compiled for its 32 KiB: the RAM region
holds the arena, the measured stack and the statics, so the schedule solved for the whole region is
solved again, tiled into channel groups, for what they leave; the emulator's results match PyTorch and
equal the host's (the same project) bit for bit, and the stack bound holds over the run."""

from __future__ import annotations

import numpy as np

from poet.cbackend.compiler import compile_program
from poet.cbackend.layout import read_out
from poet.cbackend.lower_zoo import zoo_program
from poet.cbackend.target_table import get_target
from poet.graph.tiling import build_tiled
from poet.graph.tiling_plan import plan_tiling
from poet.solve.api import solve
from tests.toolchain import require
from tests.zoo_nets import block_net


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
