"""`poet report` and the sweep/schedule figures."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from conftest import training_chain

import poet
from poet.cli import report as commands
from poet.cli import sweep as sweep_command
from poet.report import plots, tables
from poet.report.plots import CATEGORIES, schedule_matrix
from poet.schedule.io import save_schedule
from poet.sweep import SweepSpec, run_sweep


def _parser():
    p = argparse.ArgumentParser(prog="poet")
    sub = p.add_subparsers()
    sweep_command.register(sub)
    commands.register(sub)
    return p


@pytest.fixture(scope="module")
def paged_schedule():
    g = training_chain(6, seed=0, skip=True)
    s = poet.solve(g, memory="60%", runtime="3x", strategy="poet")
    assert s.steps and s.totals.page_outs and s.totals.recomputes  # both techniques, so every colour shows
    return s


def test_register_adds_sweep_and_report():
    p = _parser()
    a = p.parse_args(
        [
            "sweep",
            "--model",
            "linear",
            "--device",
            "a72",
            "--memory",
            "50%..100%",
            "--steps",
            "3",
            "--runtime",
            "1.2x,2x",
            "--jobs",
            "1",
            "--time-limit",
            "5",
            "--paging-time",
            "overlap",
        ]
    )
    assert a.func is sweep_command.cmd_sweep and a.paging_time == "overlap" and a.steps == 3
    a = p.parse_args(["report", "x.json", "--out", "d"])
    assert a.func is commands.cmd_report


def test_schedule_matrix_marks_every_event(paged_schedule):
    s = paged_schedule
    M, stages = schedule_matrix(s)
    n = len(s.graph.nodes)
    assert M.shape == (len(stages), n)
    code = {c: k for k, c in enumerate(CATEGORIES)}
    # each node's first computation shows once; recomputes / pages appear where the steps have them
    assert (M == code["compute"]).sum() + (M == code["page-out"]).sum() >= n - s.totals.page_outs
    if s.totals.recomputes:
        assert (M == code["recompute"]).any()
    if s.totals.page_ins:
        assert (M == code["page-in"]).sum() == s.totals.page_ins
    if s.totals.page_outs:
        assert (M == code["page-out"]).any() and (M == code["on storage only"]).any()
    assert np.all((M >= 0) & (M < len(CATEGORIES)))


def test_report_command_writes_tables_and_both_plots(paged_schedule, tmp_path, capsys):
    f = tmp_path / "s.json"
    save_schedule(paged_schedule, f)
    out = tmp_path / "rep"
    a = _parser().parse_args(["report", str(f), "--out", str(out)])
    assert a.func(a) == 0
    for name in (
        "report.md",
        "nodes.csv",
        "schedule_picture.png",
        "schedule_picture.svg",
        "schedule_ram.png",
        "schedule_ram.svg",
    ):
        assert (out / name).stat().st_size > 0, name
    text = capsys.readouterr().out
    assert "energy" in text and "peak RAM" in text
    assert (out / "nodes.csv").read_text().splitlines()[0].startswith("id,name,kind,ram_bytes")
    # running again overwrites its own report; an unrelated non-empty directory is refused
    assert a.func(a) == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    a = _parser().parse_args(["report", str(f), "--out", str(other)])
    with pytest.raises(FileExistsError):
        a.func(a)
    assert (other / "keep.txt").read_text() == "x"


def test_report_of_an_infeasible_schedule(tmp_path):
    s = poet.solve(training_chain(4, seed=1), memory=1, strategy="chen")
    md = tables.schedule_markdown(s)
    assert "No schedule" in md


def test_sweep_plots_and_report_of_a_sweep_directory(tmp_path, capsys):
    g = training_chain(5, seed=11, skip=True)
    gp = tmp_path / "g.json"
    from poet.graph.io import save_graph

    save_graph(g, gp)
    out = tmp_path / "sw"
    spec = SweepSpec(
        model=str(gp),
        device=None,
        memories=["60%", "80%", "100%"],
        runtimes=["1.5x", "3x"],
        strategies=["poet", "remat", "paging", "keep-all", "chen", "capuchin"],
        time_limit_s=20,
    )
    doc = run_sweep(spec, out, jobs=2, progress=False)
    written = commands.render_sweep(out, doc)
    names = {p.name for p in written}
    for stem in ("energy_vs_ram", "energy_vs_runtime", "point_picture", "point_ram"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
    md = (out / "summary.md").read_text()
    assert "| RAM budget |" in md and "poet" in md
    # `poet report DIR` redraws, also for an explicitly chosen point
    a = _parser().parse_args(["report", str(out), "--point", "keep-all|100%|3x"])
    assert a.func(a) == 0
    assert "Deadline 3x" in capsys.readouterr().out


def test_plot_helpers_handle_sweeps_with_one_deadline(tmp_path):
    doc = {
        "identity": {"model": "m", "device": "d", "paging_time": "serial"},
        "context": {
            "plain_energy_j": 1.0,
            "plain_runtime_s": 1.0,
            "keep_all_peak_bytes": 100,
            "min_ram_bytes": 10,
            "fixed_ram_bytes": 0,
        },
        "points": [
            {
                "key": f"poet|{m}|none",
                "strategy": "poet",
                "memory": m,
                "runtime": "none",
                "ram_budget_bytes": b,
                "runtime_budget_s": None,
                "runtime_budget_x": None,
                "status": "optimal",
                "energy_j": e,
            }
            for m, b, e in (("50%", 50, 1.5), ("100%", 100, 1.0))
        ],
    }
    assert plots.energy_vs_runtime(doc, tmp_path) == []
    assert len(plots.energy_vs_ram(doc, tmp_path)) == 2
