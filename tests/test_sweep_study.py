"""Studies (several models x devices), study files, and grids refused before any work starts."""

from __future__ import annotations

import csv
import io
import json

import pytest

from poet.cli import main
from poet.sweep import (
    SweepError,
    SweepSpec,
    load_study,
    run_study,
    run_sweep,
    study_from_lists,
)
from poet.sweep.local import LocalBackend
from poet.sweep.study import saving_rows, spec_from, study_markdown, write_study_summary

GRID = {
    "memory": "40%,100%",
    "runtime": "1.5x",
    "strategies": "poet,remat,paging,keep-all",
    "time_limit": 30,
    "gap": 1e-6,
    "tile": "off",  # 40% is below linear's untiled minimum: auto would tile it (tests/test_sweep_tile.py)
}


def test_an_empty_list_is_refused_with_what_would_work(tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["sweep", "--model", "linear", "--device", "a72", "--strategies", ",", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "--strategies ',' names nothing" in err and "poet,remat" in err
    assert not out.exists()
    for opt in ("--runtime", "--memory", "--model", "--device"):
        args = {"--model": "linear", "--device": "a72", opt: " , "}
        rc = main(["sweep", *[x for k, v in args.items() for x in (k, v)], "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and f"{opt} '" in err and "names nothing" in err, (opt, err)
    assert not out.exists()


def test_an_absurd_grid_is_refused_at_once_with_its_point_count(tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["sweep", "--model", "linear", "--device", "a72", "--steps", "100000", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "1,800,000 points" in err and "at most 10,000" in err and "--steps" in err
    assert not out.exists()
    # a grid given as an API spec is checked the same way, before the directory is made
    spec = SweepSpec(
        model="linear",
        device="a72",
        memories=[f"{i / 100:.2f}%" for i in 1 + __import__("numpy").arange(5000)],
        runtimes=["1x", "2x", "3x"],
        strategies=["poet"],
    )
    with pytest.raises(SweepError, match="15,000 points"):
        run_sweep(spec, out, jobs=1, progress=False)
    assert not out.exists()
    with pytest.raises(SweepError, match="at least 1"):
        spec_from("linear", "a72", {"steps": 0})


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "st"
    sweeps = study_from_lists(["linear", "transformer"], ["m4", "a72"], GRID)
    log = io.StringIO()
    docs = run_study(sweeps, out, LocalBackend(jobs=2), stream=log)
    return out, sweeps, docs, log.getvalue()


def test_a_study_writes_one_sweep_directory_per_model_and_device(study):
    out, sweeps, docs, log = study
    assert [s.name for s in sweeps] == ["linear-m4", "linear-a72", "transformer-m4", "transformer-a72"]
    manifest = json.loads((out / "study.json").read_text())
    assert manifest["format"] == "poet-study/1" and [s["dir"] for s in manifest["sweeps"]] == [s.name for s in sweeps]
    for s, doc in zip(sweeps, docs):
        d = json.loads((out / s.name / "sweep.json").read_text())
        assert d["points"] == json.loads(json.dumps(doc["points"]))
        assert d["identity"] == {
            "model": s.spec.model,
            "device": s.spec.device,
            "paging_time": "serial",
            "batch_size": 1,
            "tile": "off",
        }
        with open(out / s.name / "sweep.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 2 * 4 and {r["device"] for r in rows} == {s.spec.device}
        assert all(r["status"] in ("optimal", "infeasible") for r in rows), rows  # small enough to prove all
    # one progress line per point, naming its sweep, with the points in flight
    lines = [ln for ln in log.splitlines() if ln.startswith("[")]
    assert len(lines) == 32 and "[32/32]" in log and "transformer@a72" in log and "in flight" in log


def test_the_study_summary_is_poets_saving_over_the_best_single_technique(study):
    out, _, docs, _ = study
    written = write_study_summary(out, docs)
    assert [p.name for p in written] == ["study.md", "study.csv"]
    with open(out / "study.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 2  # model x device x RAM budget x deadline
    for r, mine in zip(rows, saving_rows(docs)):
        doc = next(d for d in docs if d["identity"]["model"] == r["model"] and d["identity"]["device"] == r["device"])
        by = {(p["strategy"], p["memory"]): p for p in doc["points"]}
        singles = [
            float(by[(s, r["memory"])]["energy_j"])
            for s in ("remat", "paging")
            if by[(s, r["memory"])]["energy_j"] is not None
        ]
        poet = by[("poet", r["memory"])]["energy_j"]
        if singles and poet is not None:
            assert float(r["saving"]) == pytest.approx((min(singles) - poet) / min(singles))
            assert mine["saving"] >= -1e-6  # the joint optimum is never worse than either alone
        else:
            assert r["saving"] == ""
    md = (out / "study.md").read_text()
    assert md == study_markdown(docs) and md.count("\n| ") == 1 + 4  # header + one row per sweep


def test_a_study_resumes_and_a_finished_one_has_nothing_left(study):
    out, sweeps, _, _ = study
    log = io.StringIO()
    run_study(sweeps, out, LocalBackend(jobs=1), stream=log)
    assert log.getvalue().count("resuming: 8 of 8 points") == 4
    assert not [ln for ln in log.getvalue().splitlines() if ln.startswith("[")]


def test_a_study_file_gives_each_entry_its_grid(tmp_path):
    f = tmp_path / "study.toml"
    f.write_text(
        'runtime = "1.2x"\ntime_limit = 20\n'
        '[[sweep]]\nmodels = ["linear", "vgg16_cifar"]\ndevices = ["m4", "a72"]\nmemory = "30%..100%"\n'
        "steps = 3\n"
        '[[sweep]]\nmodels = ["bert"]\ndevices = ["a72"]\nmemory = ["30%", "60%"]\n'
        'runtime = ["1.2x", "2x"]\nstrategies = ["poet", "paging"]\n'
    )
    sweeps = load_study(f, {"gap": 1e-2})
    assert [s.name for s in sweeps] == ["linear-m4", "linear-a72", "vgg16_cifar-m4", "vgg16_cifar-a72", "bert-a72"]
    first, bert = sweeps[0].spec, sweeps[-1].spec
    assert first.memories == ["30%", "65%", "100%"] and first.runtimes == ["1.2x"] and first.time_limit_s == 20
    assert first.gap == 1e-2 and len(first.strategies) == 6  # from the command line / the defaults
    assert bert.memories == ["30%", "60%"] and bert.runtimes == ["1.2x", "2x"] and bert.strategies == ["poet", "paging"]


@pytest.mark.parametrize(
    "text,says",
    [
        ('models = ["linear"]\ndevices = ["a72"]\nmemroy = "50%"\n', "unknown key memroy"),
        ('models = ["linear"]\ndevices = ["a72", "a72"]\n', "twice"),
        ('models = "linear"\ndevices = ["a72"]\nsteps = "3"\n', "steps must be an integer"),
        ("models = []\n", "models must be a non-empty list"),
        ("time_limit = 3\n", "names no sweep"),
        ('models = ["linear"\n', "not valid TOML"),
        ('models = ["linear"]\ndevices = ["a72"]\nstrategies = []\n', "strategies '' names nothing"),
    ],
)
def test_a_bad_study_file_is_refused_naming_the_key(tmp_path, text, says):
    f = tmp_path / "s.toml"
    f.write_text(text)
    with pytest.raises(SweepError, match=says):
        load_study(f, {})


def test_a_study_never_writes_into_an_unrelated_directory(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    rc = main(
        [
            "sweep",
            "--model",
            "linear",
            "--device",
            "m4,a72",
            "--memory",
            "100%",
            "--runtime",
            "none",
            "--strategies",
            "keep-all",
            "--out",
            str(out),
            "--quiet",
            "--no-plots",
        ]
    )
    assert rc == 2 and "holds no study.json" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    rc = main(["sweep", "--study", str(tmp_path / "nope.toml"), "--model", "linear"])
    assert rc == 2 and "either --study FILE or --model" in capsys.readouterr().err


def dies_once(marks: str, spec_d, strategy, memory, runtime, graph=None):
    """A point task whose worker process dies on its first attempt (noted in a file per point)."""
    import os

    from poet.sweep.points import solve_point

    mark = os.path.join(marks, f"{strategy}-{memory}".replace("%", "pc"))
    first = not os.path.exists(mark)
    with open(mark, "a") as f:
        f.write("attempt\n")
    if first:
        os._exit(1)
    return solve_point(spec_d, strategy, memory, runtime, graph)


def test_a_point_whose_local_worker_dies_is_sent_again(tmp_path):
    from functools import partial

    marks = tmp_path / "marks"
    marks.mkdir()
    spec = SweepSpec(model="linear", device="a72", memories=["100%"], runtimes=["1.5x"], strategies=["capuchin"])
    doc = run_sweep(
        spec, tmp_path / "s", backend=LocalBackend(jobs=1, task=partial(dies_once, str(marks))), progress=False
    )
    (row,) = doc["points"]
    assert row["status"] == "heuristic" and row["energy_j"] and (tmp_path / "s" / row["schedule_file"]).is_file()
    assert (marks / "capuchin-100pc").read_text().count("attempt") == 2


def test_without_ray_the_cluster_option_says_what_to_install(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    out = tmp_path / "s"
    rc = main(
        [
            "sweep",
            "--model",
            "linear",
            "--device",
            "a72",
            "--memory",
            "100%",
            "--runtime",
            "none",
            "--strategies",
            "keep-all",
            "--cluster",
            "ray",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "needs the ray package" in err and "pip install -e '.[cluster]'" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "address,says",
    [
        ("nonsense", "is not an address"),
        ("ray://HEAD", "is not an address"),
        ("127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
    ],
)
def test_a_cluster_address_that_cannot_work_is_refused_at_once(tmp_path, capsys, address, says):
    import time

    out = tmp_path / "s"
    t0 = time.monotonic()
    rc = main(
        [
            "sweep",
            "--model",
            "linear",
            "--device",
            "a72",
            "--memory",
            "100%",
            "--runtime",
            "none",
            "--strategies",
            "keep-all",
            "--cluster",
            address,
            "--out",
            str(out),
        ]
    )
    assert rc == 2 and says in capsys.readouterr().err
    assert time.monotonic() - t0 < 30 and not out.exists()  # Ray itself would retry for minutes
