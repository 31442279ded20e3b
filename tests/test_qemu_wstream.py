"""A ``--weights stream`` step on qemu-m4: the RAM region (the budget) holds the stack, statics, arena and
the staging buffer, and nothing else of the model -- its weights are read from ``weights.bin`` through
semihosting, its gradients and updated weights written back there; the results match PyTorch and the
bytes moved equal the schedule's priced traffic."""

from __future__ import annotations

import pytest

from poet.cbackend.compiler import compile_program
from poet.cbackend.lower_zoo import zoo_program
from poet.graph.tiling import build_tiled
from poet.graph.zoo import build_model
from poet.solve.api import solve
from tests.test_cbackend_wstream_zoo import ROW_TILES, _plain_net
from tests.toolchain import build_cache_dir, require_qemu_m4, shared_kernels  # noqa: F401  (fixtures)

# every compile here links the kernel libraries built once for the session (toolchain.py)
pytestmark = pytest.mark.usefixtures("shared_kernels")


def _stream_on_qemu(graph, region: int, staging: int, tmp_path, layers=None):
    require_qemu_m4()
    s = solve(graph, "m4", memory=region, time_limit=10, find_min_budgets=False, weights="stream", staging=staging)
    assert s.feasible, s.status
    zp = zoo_program(s.graph, seed=5, layers=layers)
    r = compile_program(zp, s, out=tmp_path / "q", target="qemu-m4", run=True, check=True, fit_time_limit_s=25)
    assert r.run.ok and r.check.ok and not r.not_run, "\n".join(r.lines())
    assert r.weight_traffic.moved == r.weight_traffic.priced, "\n".join(r.weight_traffic.lines())
    m = r.build.memory
    assert m.ram_region == region and m.ram <= region
    assert m.bss >= staging  # the staging buffer is in the RAM region
    assert r.project.layout.param_bytes == 0 and m.external <= 8  # no weight or gradient in the image
    assert r.run.instructions and r.run.stack_used <= r.ram_region.stack.bytes
    mi = r.measured_instructions  # measured per kind, and predicted from each node measured in a calibration run
    assert mi is not None and mi["compute"] > mi["update"] > 0 and sum(mi.values()) <= r.run.instructions
    assert r.instructions is not None and abs(r.instructions.total_error) < 0.01, "\n".join(r.instructions.lines())
    return r


def test_the_mlp_streams_its_weights_on_qemu_m4(tmp_path):
    r = _stream_on_qemu(build_model("linear", 2), 8192, 256, tmp_path)
    assert r.weight_traffic.moved.reads > 5000  # 256-B chunks: every layer read many times over


def test_a_stream_schedule_solved_again_to_fit_the_region_is_still_streamed(tmp_path):
    # at 4,096 B the schedule's arena does not fit beside the stack: the re-solve prices the weights as
    # the schedule did (it used to solve a graph with the weights in flash)
    r = _stream_on_qemu(build_model("linear", 2), 4096, 256, tmp_path)
    assert len(r.fit.attempts) > 1 and r.schedule.graph.placement == "stream"
    assert r.schedule.graph.weights.staging_bytes == 256


def test_a_row_tiled_conv_net_streams_its_weights_on_qemu_m4(tmp_path):
    L = _plain_net()
    r = _stream_on_qemu(build_tiled(L, ROW_TILES, 2).graph, 8192, 100, tmp_path, layers=L)
    assert r.check.worst("param").relative < 1e-5
