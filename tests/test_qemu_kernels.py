"""The C kernels on the emulated Cortex-M4F against the same C built for the host: bit-identical
results on strided layouts, per-call instruction counts, and paging through semihosting files."""

from __future__ import annotations

import pytest
from toolchain import build_cache_dir, qemu_m4_ready  # noqa: F401  (fixtures)

torch = pytest.importorskip("torch")

from poet.cbackend import hostlib, probe, qemu_m4  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp  # noqa: E402
from poet.cbackend.traced_calls import traced_calls  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402

pytestmark = pytest.mark.usefixtures("qemu_m4_ready")


def bits(t):
    """A tensor's bytes: equal bits, not merely equal values (-0.0, NaN payloads)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def layouts(shape, g):
    base = torch.randn(*shape, generator=g)
    yield base
    if len(shape) >= 2:
        yield base.transpose(0, 1).contiguous().transpose(0, 1)  # first two dimensions swapped in memory
    big = torch.randn(*(2 * s + 1 for s in shape), generator=g)
    yield big[tuple(slice(1, 1 + 2 * s, 2) for s in shape)]  # every other element of a larger tensor
    yield torch.randn(1, *shape[1:], generator=g).expand(*shape)  # a broadcast (stride 0) input


def cases():
    """(kernel, inputs, output shapes, scalars): every kernel on several layouts."""
    g = torch.Generator().manual_seed(0)
    out = []
    for shape in [(7,), (5, 6), (2, 3, 4, 5)]:
        for x in layouts(shape, g):
            out.append(("relu", (x,), [shape], ()))
            grad = torch.randn(*shape, generator=g)
            out.append(("threshold_backward", (grad, x), [shape], (0.0,)))
            out.append(("threshold_backward", (grad, x), [shape], (0.25,)))
    return out


def test_emulator_and_host_builds_agree_bit_for_bit():
    calls, host_outputs = [], []
    hostlib.set_rng_seed(0)  # the probe firmware's step seed (dropout), whatever earlier tests set
    for kernel, inputs, shapes, scalars in cases():
        emu = tuple(torch.full(s, float("nan")) for s in shapes)
        host = tuple(torch.full(s, float("nan")) for s in shapes)
        calls.append(probe.KernelCall(kernel, inputs, emu, scalars))
        hostlib.call(kernel, list(inputs), list(host), list(scalars))
        host_outputs.append(host)
    before = [tuple(t.clone() for t in c.inputs) for c in calls]
    result = probe.run_on_qemu(calls)
    assert len(result.instructions) == len(calls)
    for c, host, inputs in zip(calls, host_outputs, before):
        for e, h in zip(c.outputs, host):
            assert torch.equal(bits(e), bits(h)), c.kernel
        for now, then in zip(c.inputs, inputs):
            assert torch.equal(bits(now), bits(then)), f"pk_{c.kernel} wrote an input"


def traced_step(name):
    """Small training steps whose every op the kernels cover (or say which they lack)."""
    nn = torch.nn
    torch.manual_seed(0)
    if name == "mlp-mse":
        model = nn.Sequential(nn.Linear(12, 16, bias=False), nn.ReLU(), nn.Linear(16, 5, bias=False))
        return export_training_graph(model, (torch.randn(6, 12),), nn.MSELoss(), (torch.randn(6, 5),), name=name)
    if name == "mlp-ce":
        model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
        y = torch.randint(0, 5, (6,))
        return export_training_graph(model, (torch.randn(6, 12),), nn.CrossEntropyLoss(), (y,), name=name)
    if name == "cnn":
        from poet.demo_models import build

        model, loss_fn, data = build("cnn", batch_size=2)
        (x,), (y,) = data.batch()
        return export_training_graph(model.train(), (x,), loss_fn, (y,), name=name)
    raise ValueError(name)


@pytest.mark.parametrize("name", ["mlp-mse", "mlp-ce", "cnn"])
def test_every_call_of_a_traced_step_is_bit_identical(name):
    """Each kernel call of a real training step, on the values the step gives it, on both builds."""
    prog = traced_step(name)
    try:
        calls = traced_calls(prog)
    except UnsupportedOp as e:
        pytest.skip(f"the kernels for this step have not landed yet: {e}")
    host = []
    hostlib.set_rng_seed(0)  # the probe firmware's step seed; an earlier test may have set another
    for c in calls:
        outs = [None if o is None else o.clone() for o in c.probe.outputs]
        hostlib.call(c.call.kernel, list(c.probe.inputs), outs, list(c.probe.scalars))
        host.append(outs)
    probe.run_on_qemu([c.probe for c in calls])
    for c, outs in zip(calls, host):
        for e, h in zip(c.probe.outputs, outs):
            if e is not None:
                assert torch.equal(bits(e), bits(h)), f"pk_{c.call.kernel} of node {c.node} ({c.call.fx_name})"


def test_each_call_is_counted_alone():
    g = torch.Generator().manual_seed(1)
    small, large = torch.randn(64, generator=g), torch.randn(2 * 64, generator=g)
    calls = [
        probe.KernelCall("relu", (small,), (torch.empty(64),)),
        probe.KernelCall("relu", (large,), (torch.empty(128),)),
        probe.KernelCall("relu", (small,), (torch.empty(64),)),
    ]
    r = probe.run_on_qemu(calls)
    n_small, n_large, again = r.instructions
    assert n_small == again > 0  # the same call counts the same, wherever it runs
    per_element = (n_large - n_small) / 64
    assert 1 <= per_element and abs(n_small - 64 * per_element) < 0.2 * n_small  # linear in the elements
    assert r.overhead > 0 and r.run.instructions > sum(r.instructions)


def test_a_kernel_error_stops_the_probe_with_its_status():
    x = torch.randn(4)
    with pytest.raises(probe.ProbeError, match="exited with code 11"):  # 10 + PK_EARGS
        probe.run_on_qemu([probe.KernelCall("relu", (x, x), (torch.empty(4),))])


PAGING = r"""
#include <stdint.h>
#include "pk_platform.h"
#include "pk_sections.h"

#define PAGE 4096u
static uint32_t page[PAGE / 4] PK_ARENA;

static uint32_t word(uint32_t p, uint32_t i) { return p * 2654435761u ^ (i * 40503u + 7u); }

/* pages 0..N-1 written to pages.bin out of order, read back in another, each word checked */
int main(void) {
    int f = pk_file_open("pages.bin", PK_RW);
    if (f < 0) return 2;
    for (uint32_t k = 0; k < NPAGES; k++) {
        uint32_t p = (k * 7u) % NPAGES;
        for (uint32_t i = 0; i < PAGE / 4; i++) page[i] = word(p, i);
        if (pk_file_write(f, p * PAGE, page, PAGE) != 0) return 3;
    }
    for (uint32_t k = 0; k < NPAGES; k++) {
        uint32_t p = (k * 11u + 3u) % NPAGES;
        for (uint32_t i = 0; i < PAGE / 4; i++) page[i] = 0;
        if (pk_file_read(f, p * PAGE, page, PAGE) != 0) return 4;
        for (uint32_t i = 0; i < PAGE / 4; i++) if (page[i] != word(p, i)) return 5;
    }
    if (pk_file_read(f, NPAGES * PAGE - 8, page, 16) == 0) return 6; /* past the end */
    pk_file_close(f);
    return 0;
}
"""


def test_paging_through_semihosting_files_round_trips(tmp_path):
    n_pages = 64  # 256 KiB through a 4 KiB page in RAM
    (tmp_path / "main.c").write_text(f"#define NPAGES {n_pages}u\n" + PAGING)
    b = qemu_m4.build(tmp_path, 16 << 10)
    out = qemu_m4.run(b, tmp_path, timeout_s=60)
    assert out.ok, out.problem()
    data = (tmp_path / "pages.bin").read_bytes()
    assert len(data) == n_pages * 4096
    import numpy as np

    words = np.frombuffer(data, dtype=np.uint32).reshape(n_pages, 1024).astype(np.uint64)
    p, i = np.arange(n_pages, dtype=np.uint64)[:, None], np.arange(1024, dtype=np.uint64)[None, :]
    want = ((p * 2654435761) % 2**32) ^ ((i * 40503 + 7) % 2**32)
    assert (words == want).all()
