"""poet.plan, the saved poet-schedule/1 file, training loops and the plan/train commands."""

from __future__ import annotations

import argparse
import copy

import pytest

torch = pytest.importorskip("torch")

import poet  # noqa: E402
from poet import demo_models as models  # noqa: E402
from poet.planner import Plan, plan  # noqa: E402


def _cnn():
    torch.manual_seed(0)
    m = models.SmallResNet(channels=4, blocks=1, dropout=0.2).train()
    data = models.ImageData(batch_size=4, size=8, seed=1)
    return m, torch.nn.CrossEntropyLoss(), data


def test_plan_inspect_save_run(tmp_path):
    m, lf, data = _cnn()
    (x,), (y,) = data.batch()
    ref = copy.deepcopy(m)
    pl = poet.plan(m, (x,), loss_fn=lf, targets=(y,), device="m4", memory="1MB", runtime="2x", strategy="keep-all")
    assert isinstance(pl, Plan) and pl.feasible
    text = str(pl)
    assert "aten ops" in text and "m4" in text
    pl.save(tmp_path / "plan.json")
    loaded = poet.load_schedule(tmp_path / "plan.json")
    assert loaded.steps == pl.schedule.steps
    assert loaded.graph.fixed_ram_bytes == pl.graph.fixed_ram_bytes > 0
    torch.manual_seed(5)
    res = pl.run()
    torch.manual_seed(5)
    ref_loss = lf(ref(x), y)
    ref_loss.backward()
    assert torch.equal(res.loss, ref_loss)
    for (k, p), q in zip(ref.named_parameters(), m.parameters()):
        assert torch.equal(p.grad, q.grad), k
    assert "predicted" in res.table()


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_training_loss_curve_identical_to_plain_pytorch(opt_name):
    m, lf, data = _cnn()
    ref = copy.deepcopy(m)
    make = (
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
        if opt_name == "sgd"
        else (lambda ps: torch.optim.Adam(ps, lr=1e-2))
    )
    opt, ropt = make(m.parameters()), make(ref.parameters())
    g0 = data.g.get_state()
    batch = data.batch()
    pl = plan(m, batch[0], lf, targets=batch[1], memory="60%", strategy="paging", optimizer=opt, time_limit=10)
    if not pl.feasible:
        pl = plan(m, batch[0], lf, targets=batch[1], memory="100%", strategy="keep-all", optimizer=opt)
    torch.manual_seed(11)
    losses = []
    for step in range(3):
        if step:
            batch = data.batch()
        losses.append(pl.train_step(*batch, optimizer=opt).loss.item())
    data.g.set_state(g0)
    torch.manual_seed(11)
    plain = []
    for _ in range(3):
        (x,), (y,) = data.batch()
        ropt.zero_grad(set_to_none=True)
        loss = lf(ref(x), y)
        loss.backward()
        ropt.step()
        plain.append(loss.item())
    assert losses == plain
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    for a, b in zip(m.buffers(), ref.buffers()):
        assert torch.equal(a, b)


def test_layer_granularity_plan():
    m, lf, data = _cnn()
    (x,), (y,) = data.batch()
    pl = plan(m, x, lf, targets=y, memory="100%", strategy="keep-all", granularity="layer")
    assert pl.program.granularity == "layer"
    assert len(pl.graph) < pl.program.aten_units
    res = pl.run(apply=False)
    assert res.within_budget


def _cli(argv):
    from poet.cli import plan as plan_command
    from poet.cli import train as train_command

    p = argparse.ArgumentParser(prog="poet")
    sub = p.add_subparsers(dest="command")
    plan_command.register(sub)
    train_command.register(sub)
    a = p.parse_args(argv)
    return a.func(a)


def test_cli_train_check(capsys):
    rc = _cli(
        [
            "train",
            "--model",
            "mlp",
            "--steps",
            "3",
            "--check",
            "--strategy",
            "keep-all",
            "--batch-size",
            "4",
            "--optimizer",
            "adam",
            "--lr",
            "0.01",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "step    3/3" in out and "loss curve identical: True" in out
    # m4 (the default) is not a profile of this machine: the ratios are said to compare two machines
    assert "the timed steps took" in out and "of their median" in out  # steps 2-3: the machine's spread
    assert "m4 is not a profile of this machine" in out and "poet profile --model mlp --out host.toml" in out


def test_cli_plan_writes_schedule(tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = _cli(["plan", "--model", "mlp", "--batch-size", "4", "--strategy", "keep-all", "--run", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert out.exists() and poet.load_schedule(out).steps
    assert "measured" in text


def test_cli_plan_shows_the_solver_progress_and_answers_again_from_the_cache(capsys):
    argv = ["plan", "--model", "mlp", "--batch-size", "4", "--memory", "90%", "--time-limit", "20"]
    assert _cli(argv) == 0
    first = capsys.readouterr()
    assert "solving (lower bound)" in first.err and "from the cache" not in first.out
    assert _cli(argv + ["--quiet"]) == 0
    second = capsys.readouterr()
    assert "solving" not in second.err
    assert "from the cache (solved in" in second.out
    assert first.out.splitlines()[3] == second.out.splitlines()[3]  # the same predicted totals
    assert _cli(argv + ["--quiet", "--no-cache"]) == 0
    assert "from the cache" not in capsys.readouterr().out


def test_cli_train_bad_paging_dir(tmp_path, capsys):
    rc = _cli(
        ["train", "--model", "mlp", "--steps", "1", "--strategy", "keep-all", "--paging-dir", str(tmp_path / "missing")]
    )
    # keep-all never pages, so the run succeeds; a paging strategy must fail cleanly
    assert rc == 0
    from poet.execute import reference_schedule

    m, lf, data = models.build("mlp", batch_size=4)
    pl = plan(m, *data.batch()[0], lf, targets=data.batch()[1], strategy="keep-all", paging_dir=tmp_path / "x")
    pl.schedule = reference_schedule(pl.graph, "paging", every=4)
    before = [p.detach().clone() for p in m.parameters()]
    from poet.execute import PagingError

    with pytest.raises(PagingError):
        pl.run()
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_a_user_module_is_found_in_the_current_directory_and_a_missing_one_is_named(tmp_path, monkeypatch, capsys):
    import sys

    from poet.cli import main

    (tmp_path / "my_net_for_poet.py").write_text(
        "import torch\n"
        "from poet import demo_models as models\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return (models.MLP(d_in=8, hidden=16, layers=2), torch.nn.CrossEntropyLoss(),\n"
        "            models.VectorData(batch_size=4, d_in=8, seed=0))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["plan", "--model", "my_net_for_poet:build", "--device", "m4", "--quiet", "--no-cache"]) == 0
    assert "optimal" in capsys.readouterr().out
    assert main(["plan", "--model", "no_such_module_here:build", "--device", "m4"]) == 2
    err = capsys.readouterr().err
    assert "cannot import 'no_such_module_here'" in err and "Traceback" not in err
    assert main(["plan", "--model", "my_net_for_poet:nothing", "--device", "m4"]) == 2
    assert "has no function 'nothing'" in capsys.readouterr().err
