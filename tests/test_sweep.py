"""Budget sweeps: the joint optimum is never beaten by a single technique, resume, reuse, safety."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from conftest import training_chain

from poet.graph.io import save_graph
from poet.solve.api import SolveOptions, make_budget, solve_costed
from poet.sweep import COLUMNS, SweepError, SweepSpec, load_sweep, parse_memory_range, reusable, run_sweep

STRATS = ["poet", "remat", "paging", "keep-all", "chen", "capuchin"]
MEMS = ["45%", "60%", "75%", "90%", "100%"]
RTS = ["1.0x", "1.3x", "2x", "none"]


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    g = training_chain(6, seed=7, skip=True)
    p = tmp_path_factory.mktemp("g") / "chain.json"
    save_graph(g, p)
    return p, g


def _spec(path, **kw):
    d = dict(model=str(path), device=None, memories=MEMS, runtimes=RTS, strategies=STRATS, time_limit_s=30, gap=1e-6)
    d.update(kw)
    return SweepSpec(**d)


@pytest.fixture(scope="module")
def sweep(graph_file, tmp_path_factory):
    path, g = graph_file
    out = tmp_path_factory.mktemp("sweep") / "s"
    log = io.StringIO()
    doc = run_sweep(_spec(path), out, jobs=2, stream=log)
    return out, doc, g, log.getvalue()


def test_csv_has_every_point_and_the_documented_columns(sweep):
    out, doc, g, log = sweep
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0].keys()) == COLUMNS
    for c in (
        "model",
        "device",
        "strategy",
        "ram_budget_bytes",
        "runtime_budget_s",
        "status",
        "energy_j",
        "compute_energy_j",
        "paging_energy_j",
        "runtime_s",
        "peak_ram_bytes",
        "recomputes",
        "page_ins",
        "page_outs",
        "solve_seconds",
        "gap",
    ):
        assert c in COLUMNS
    assert len(rows) == len(STRATS) * len(MEMS) * len(RTS)
    assert {r["key"] for r in rows} == {f"{s}|{m}|{t}" for s in STRATS for m in MEMS for t in RTS}
    assert json.loads((out / "sweep.json").read_text())["format"] == "poet-sweep/1"
    for r in rows:
        assert r["status"] in ("optimal", "feasible", "infeasible", "no_solution", "heuristic"), r
        if r["energy_j"]:
            assert int(r["peak_ram_bytes"]) <= int(r["ram_budget_bytes"])
            assert float(r["energy_j"]) == pytest.approx(float(r["compute_energy_j"]) + float(r["paging_energy_j"]))
            assert (out / r["schedule_file"]).is_file()
    # progress went to the given stream: done/total counters and an ETA
    assert f"[{len(rows)}/{len(rows)}]" in log and "ETA" in log


def test_joint_optimum_is_never_above_a_single_technique(sweep):
    out, doc, g, _ = sweep
    by = {r["key"]: r for r in doc["points"]}
    checked = 0
    for m in MEMS:
        for t in RTS:
            p = by[f"poet|{m}|{t}"]
            for single in ("remat", "paging", "keep-all"):
                r = by[f"{single}|{m}|{t}"]
                if r["energy_j"] is None:
                    continue
                assert p["energy_j"] is not None, f"{single} fits {m}/{t} but POET has no schedule"
                assert p["status"] == "optimal"
                assert p["energy_j"] <= r["energy_j"] * (1 + 2e-6), (m, t, single)
                checked += 1
            # the fixed rules are schedules too: they can only cost at least the optimum here
            for h in ("chen", "capuchin"):
                r = by[f"{h}|{m}|{t}"]
                if r["energy_j"] is not None:
                    assert p["energy_j"] is not None
    assert checked >= 10
    # and somewhere the joint schedule is strictly better than both single techniques
    assert any(
        by[f"poet|{m}|{t}"]["energy_j"] is not None
        and all(
            by[f"{s}|{m}|{t}"]["energy_j"] is None
            or by[f"{s}|{m}|{t}"]["energy_j"] > by[f"poet|{m}|{t}"]["energy_j"] * (1 + 1e-4)
            for s in ("remat", "paging")
        )
        for m in MEMS
        for t in RTS
    )


def test_reused_points_match_a_direct_solve(sweep):
    out, doc, g, _ = sweep
    reused = [r for r in doc["points"] if r.get("reused_from")]
    assert len(reused) >= 10
    for r in reused[:: max(1, len(reused) // 5)]:  # five or six of them, spread over the grid
        b = make_budget(g, r["memory"], None if r["runtime"] == "none" else r["runtime"], "serial")
        s = solve_costed(g, b, r["strategy"], SolveOptions(gap=1e-6, find_min_budgets=False))
        assert s.status in ("optimal", "infeasible")
        assert (s.status == "infeasible") == (r["status"] == "infeasible"), r["key"]
        if s.status == "optimal":
            assert r["energy_j"] == pytest.approx(s.energy_j, rel=1e-5), r["key"]


def test_reuse_rules_are_conservative():
    plain = 10.0
    base = dict(
        status="optimal",
        energy_j=11.0,
        peak_ram_bytes=500,
        runtime_s=5.0,
        recomputes=1,
        page_ins=0,
        page_outs=0,
        schedule_file="x.json",
        ram_budget_bytes=600,
        runtime_budget_s=6.0,
        strategy="poet",
        key="poet|a|b",
    )
    # looser optimal, fits: reused; for remat only because it pages nothing
    assert reusable("poet", 550, 5.5, [base], plain)[1] == "optimal"
    assert reusable("remat", 550, 5.5, [base], plain)[1] == "optimal"
    assert reusable("paging", 550, 5.5, [base], plain) is None  # it recomputes
    # does not fit, or the source was tighter, or not proven: not reused
    assert reusable("poet", 450, 5.5, [base], plain) is None
    assert reusable("poet", 700, 7.0, [base], plain) is None
    assert reusable("poet", 550, 5.5, [{**base, "status": "feasible"}], plain) is None
    # a remat optimum says nothing about poet (poet may do better)
    assert reusable("poet", 550, 5.5, [{**base, "strategy": "remat"}], plain) is None
    # lower bound: energy equal to one plain pass is optimal anywhere it fits
    lb = {**base, "energy_j": plain, "recomputes": 0, "ram_budget_bytes": 500, "runtime_budget_s": 5.0}
    assert reusable("paging", 10**6, math.inf, [lb], plain)[1] == "optimal"
    # proven infeasibility spreads to tighter budgets and contained strategies only
    inf = {**base, "status": "infeasible", "energy_j": None}
    assert reusable("paging", 500, 5.0, [inf], plain)[1] == "infeasible"
    assert reusable("poet", 700, 5.0, [inf], plain) is None
    assert reusable("chen", 100, 1.0, [inf], plain) is None


def test_resume_skips_finished_points(sweep, graph_file, tmp_path):
    src, doc, g, _ = sweep
    path, _ = graph_file
    out = tmp_path / "resume"
    out.mkdir()
    d = json.loads((src / "sweep.json").read_text())
    keep = [r for r in d["points"] if not r["key"].startswith("poet|")]  # as if interrupted
    for r in keep:
        r["solve_seconds"] = 12345.0  # marks the points that must not be solved again
    d["points"] = keep
    (out / "sweep.json").write_text(json.dumps(d))
    import shutil

    shutil.copytree(src / "schedules", out / "schedules")
    log = io.StringIO()
    doc2 = run_sweep(_spec(path), out, jobs=1, stream=log)
    assert "resuming" in log.getvalue()
    rows = {r["key"]: r for r in doc2["points"]}
    assert len(rows) == len(STRATS) * len(MEMS) * len(RTS)
    assert all(rows[r["key"]]["solve_seconds"] == 12345.0 for r in keep)
    # only the missing POET points were processed in this run
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("[")]
    assert len(lines) == len(MEMS) * len(RTS) and all(" poet " in ln for ln in lines)
    # a second run has nothing left to do
    log = io.StringIO()
    run_sweep(_spec(path), out, jobs=1, stream=log)
    assert not [ln for ln in log.getvalue().splitlines() if ln.startswith("[")]


def test_refuses_to_write_into_unrelated_directories(graph_file, tmp_path):
    path, _ = graph_file
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    spec = _spec(path, memories=["100%"], runtimes=["none"], strategies=["keep-all"])
    with pytest.raises(SweepError, match="refusing"):
        run_sweep(spec, out, jobs=1, progress=False)
    run_sweep(spec, out, jobs=1, progress=False, force=True)
    assert (out / "notes.txt").read_text() == "precious"
    # a sweep of another model/device is not silently mixed in or overwritten
    other = tmp_path / "other"
    run_sweep(spec, other, jobs=1, progress=False)
    spec2 = _spec(path, memories=["100%"], runtimes=["none"], strategies=["keep-all"], paging_time="hidden")
    with pytest.raises(SweepError, match="holds a sweep"):
        run_sweep(spec2, other, jobs=1, progress=False)
    # a file where the directory should be
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(SweepError, match="not a directory"):
        run_sweep(spec, f, jobs=1, progress=False)
    assert load_sweep(other)["identity"]["paging_time"] == "serial"


@pytest.mark.parametrize(
    "bad,says",
    [(dict(method="nosuch"), "unknown method"), (dict(gap=1.5), "relative gap"), (dict(time_limit_s=-1), "time limit")],
)
def test_bad_solver_options_are_refused_before_the_directory_is_made(graph_file, tmp_path, bad, says):
    from poet.units import BudgetError

    path, _ = graph_file
    with pytest.raises(BudgetError, match=says):
        run_sweep(_spec(path, memories=["100%"], runtimes=["none"], **bad), tmp_path / "s", jobs=1, progress=False)
    assert not (tmp_path / "s").exists()


def test_memory_range_parsing():
    assert parse_memory_range("10%..100%", 10) == [f"{v}%" for v in range(10, 101, 10)]
    assert parse_memory_range("50%..50%", 4) == ["50%"]
    assert parse_memory_range("20%, 3MB") == ["20%", "3MB"]
    with pytest.raises(SweepError):
        parse_memory_range("100%..10%", 3)
    with pytest.raises(SweepError):
        parse_memory_range("1MB..3MB", 3)


def test_retry_never_replaces_a_schedule_by_a_worse_result(sweep, graph_file, tmp_path):
    src, doc, g, _ = sweep
    path, _ = graph_file
    import shutil

    out = tmp_path / "retry"
    shutil.copytree(src, out)
    d = json.loads((out / "sweep.json").read_text())

    # which points a parallel sweep reuses depends on the order its workers finish: prefer a
    # solved point, but a reused one is re-solved by --retry just the same
    def pick(strategy, **match):
        cands = [
            r
            for r in d["points"]
            if r["strategy"] == strategy and r["energy_j"] is not None and all(r[k] == v for k, v in match.items())
        ]
        return min(cands, key=lambda r: bool(r.get("reused_from")))

    target = pick("poet", runtime="2x")
    target["status"], target["energy_j"] = "feasible", target["energy_j"] * 0.5  # an (impossible) better schedule
    other = pick("paging")
    other["status"], other["energy_j"] = "feasible", other["energy_j"] * 2.0  # a worse one: retry improves it
    (out / "sweep.json").write_text(json.dumps(d))
    doc2 = run_sweep(_spec(path), out, jobs=2, retry=True, progress=False)
    rows = {r["key"]: r for r in doc2["points"]}
    # the optimal re-solve replaces the earlier unproven row either way
    assert rows[target["key"]]["status"] == "optimal"
    assert rows[other["key"]]["status"] == "optimal"
    assert rows[other["key"]]["energy_j"] == pytest.approx(other["energy_j"] / 2.0)
