"""``poet compile`` and ``poet train --target`` from the command line: a plan file compiled, run and
checked; a tiled plan traced and tiled again; wrong input and a missing toolchain answered with a
message, never a traceback."""

from __future__ import annotations

import pytest
from toolchain import build_cache_dir, require  # noqa: F401  (fixture)

pytest.importorskip("torch")

from poet.cbackend.targets import HOST  # noqa: E402
from poet.cli import main  # noqa: E402

MLP = ["--model", "mlp", "--batch-size", "4", "--dropout", "0.2"]


@pytest.fixture
def host_ready(build_cache_dir, monkeypatch):  # noqa: F811
    require(HOST.missing())
    monkeypatch.setenv("POET_CACHE_DIR", str(build_cache_dir))


@pytest.fixture
def plan_file(tmp_path, host_ready):
    path = tmp_path / "plan.json"
    rc = main(["plan", *MLP, "--device", "m4", "--memory", "100%", "--time-limit", "10", "--quiet", "--out", str(path)])
    assert rc == 0 and path.exists()
    return path


def test_compile_a_plan_file_run_it_and_check_it(plan_file, tmp_path, capsys):
    out = tmp_path / "c"
    rc = main(["compile", "--schedule", str(plan_file), *MLP, "--out", str(out), "--run", "--check", "--steps", "2"])
    text = capsys.readouterr()
    assert rc == 0, text.err
    assert "against PyTorch: match within the bounds" in text.out
    assert "arena" in text.out and "step 2: loss" in text.out
    assert "building for host" in text.err and "running 2 step(s)" in text.err  # progress lines
    assert (out / "pk_model.c").exists() and (out / "Makefile").exists() and (out / "run" / "out.bin").exists()


def test_compile_refuses_another_model_an_existing_folder_and_a_missing_compiler(
    plan_file, tmp_path, capsys, monkeypatch
):
    rc = main(["compile", "--schedule", str(plan_file), "--model", "cnn", "--out", str(tmp_path / "x")])
    assert rc == 2 and "another" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    rc = main(["compile", "--schedule", str(plan_file), *MLP, "--out", str(tmp_path / "full")])
    assert rc == 2 and "--force" in capsys.readouterr().err
    monkeypatch.setattr(
        type(HOST),
        "missing",
        lambda self: "the host target needs a C compiler (cc); on Debian or Ubuntu: sudo apt-get install gcc libc6-dev",
    )
    rc = main(["compile", "--schedule", str(plan_file), *MLP, "--out", str(tmp_path / "y"), "--run"])
    err = capsys.readouterr().err
    assert rc == 2 and "apt-get install gcc" in err and "Traceback" not in err


def test_compile_says_what_is_wrong_with_a_schedule_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "poet-schedule/1"}')
    rc = main(["compile", "--schedule", str(bad), *MLP, "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.json" in err and "Traceback" not in err


def test_compile_of_a_tiled_plan_tiles_the_traced_step_again(tmp_path, capsys, host_ready):
    plan = tmp_path / "tiled.json"
    rc = main(
        [
            "plan",
            *MLP,
            "--device",
            "m4",
            "--memory",
            "250KB",  # two tiles need more than the untiled minimum for this small MLP
            "--tile",
            "2",
            "--time-limit",
            "10",
            "--quiet",
            "--out",
            str(plan),
        ]
    )
    assert rc == 0
    rc = main(["compile", "--schedule", str(plan), *MLP, "--out", str(tmp_path / "c"), "--check"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "against PyTorch: match within the bounds" in out


def test_train_on_the_host_target(tmp_path, capsys, host_ready):
    rc = main(
        [
            "train",
            *MLP,
            "--device",
            "m4",
            "--memory",
            "100%",
            "--steps",
            "3",
            "--check",
            "--target",
            "host",
            "--time-limit",
            "10",
            "--quiet",
            "--out",
            str(tmp_path / "t"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "step    3/3" in out and "(host)" in out and "match within the bounds" in out
    assert "runtime 4608 B" in out  # the plan left room for the compiled step's stack and statics
