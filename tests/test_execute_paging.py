"""Paging to real storage: verified reads, clean failures that leave the model untouched."""

from __future__ import annotations

import copy
import os

import pytest

torch = pytest.importorskip("torch")

from poet.execute import (  # noqa: E402
    Executor,
    PagingError,
    PagingStore,
    models,  # noqa: E402
    reference_schedule,
)
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    m = models.SmallResNet(channels=4, blocks=1, dropout=0.2).train()
    x = torch.randn(2, 3, 8, 8)
    y = torch.randint(0, 10, (2,))
    prog = export_training_graph(m, (x,), torch.nn.CrossEntropyLoss(), (y,))
    sched = reference_schedule(costed_program(prog, "m4"), "paging", every=4)
    assert sched.totals.page_outs > 0
    return m, prog, sched, (x, y)


def _snapshot(m):
    return (
        {k: v.detach().clone() for k, v in m.named_parameters()},
        {k: v.detach().clone() for k, v in m.named_buffers()},
    )


def _unchanged(m, snap):
    params, bufs = snap
    return (
        all(torch.equal(v, params[k]) for k, v in m.named_parameters())
        and all(torch.equal(v, bufs[k]) for k, v in m.named_buffers())
        and all(p.grad is None for p in m.parameters())
    )


def _fails_cleanly(setup, match, **executor_kw):
    m, prog, sched, batch = setup
    snap = _snapshot(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    rng = torch.get_rng_state()
    with pytest.raises(PagingError, match=match) as exc:
        Executor(prog, **executor_kw).run(sched, batch, optimizer=opt)
    assert _unchanged(m, snap)
    assert torch.equal(torch.get_rng_state(), rng)
    assert not opt.state
    return str(exc.value)


def test_missing_directory_fails_before_touching_the_model(setup, tmp_path):
    msg = _fails_cleanly(setup, "does not exist", paging_dir=tmp_path / "nope")
    assert str(tmp_path / "nope") in msg


def test_directory_that_is_a_file_fails(setup, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _fails_cleanly(setup, "not a directory", paging_dir=f)


def test_disk_full_mid_schedule_fails_cleanly(setup):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    msg = _fails_cleanly(setup, "No space left", swap_file="/dev/full")
    assert "cannot write page" in msg


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory_fails(setup, tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        _fails_cleanly(setup, "cannot write", paging_dir=d)
    finally:
        d.chmod(0o700)


def test_successful_paging_run_leaves_no_files_and_matches(setup, tmp_path):
    m, prog, sched, batch = setup
    m2 = copy.deepcopy(m)
    p2 = copy.copy(prog)
    p2.params, p2.buffers = dict(m2.named_parameters()), dict(m2.named_buffers())
    torch.manual_seed(3)
    res = Executor(p2, paging_dir=tmp_path).run(sched, batch)
    assert list(tmp_path.iterdir()) == []
    assert res.bytes_written == sched.totals.bytes_paged_out > 0
    assert res.bytes_read == sched.totals.bytes_paged_in
    assert res.measured_peak_bytes <= sched.budget.ram_bytes
    ref = copy.deepcopy(m)
    torch.manual_seed(3)
    torch.nn.CrossEntropyLoss()(ref(batch[0]), batch[1]).backward()
    for (k, p), q in zip(ref.named_parameters(), m2.parameters()):
        assert torch.equal(p.grad, q.grad), k


def test_swap_file_layout(setup, tmp_path):
    m, prog, sched, batch = setup
    swap = tmp_path / "poet.swap"
    res = Executor(prog, swap_file=swap).run(sched, batch, apply=False)
    assert res.bytes_written > 0
    assert not swap.exists()  # created by the store, removed afterwards


def test_store_verifies_size_and_checksum(tmp_path):
    store = PagingStore(tmp_path)
    t = torch.arange(100, dtype=torch.float32).reshape(10, 10).t()  # non-contiguous view
    mask = torch.rand(7) > 0.5
    n = store.write(5, (t, mask))
    assert n == 400 + 7
    back = store.read(5)
    assert torch.equal(back[0], t) and back[0].stride() == t.stride() and torch.equal(back[1], mask)
    path = store._pages[5].path
    data = bytearray(open(path, "rb").read())
    data[13] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(PagingError, match="corrupt"):
        store.read(5)
    open(path, "wb").write(bytes(data[:-3]))
    with pytest.raises(PagingError, match="expected"):
        store.read(5)
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_temporary_directory_is_removed():
    store = PagingStore()
    d = store.directory
    store.write(1, torch.ones(3))
    assert os.path.isdir(d)
    store.close()
    assert not os.path.exists(d)
