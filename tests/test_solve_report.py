"""The typed report every solve returns: fields always present, frozen, and the schedule file's
"solver" object read and written both in this version's form and in older files' form."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import training_chain

from poet import solve
from poet.schedule import MinBudgets, PhaseRecord, SolveReport, load_schedule, save_schedule
from poet.solve.baselines import keep_all_peak


def _ram(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


@pytest.mark.parametrize("strategy", ["poet", "remat", "paging", "keep-all", "chen", "capuchin"])
def test_every_strategy_reports_every_field_and_the_file_keeps_them(strategy, tmp_path):
    g = training_chain(4, 2, skip=True)
    s = solve(g, memory=_ram(g, 0.3), runtime="2x", strategy=strategy, time_limit=30, find_min_budgets=False)
    r = s.report
    assert isinstance(r, SolveReport) and r.method and isinstance(r.message, str) and r.solve_seconds > 0
    assert isinstance(r.phases, tuple) and isinstance(r.min_budgets, MinBudgets)
    if strategy in ("poet", "remat", "paging"):
        assert r.phase("lower bound") is not None and r.structural_bound_energy_j is not None
        assert all(isinstance(p, PhaseRecord) and p.seconds >= 0 for p in r.phases)
    if s.steps and r.gap is not None:
        assert r.bound_energy_j <= s.totals.energy_j * (1 + 1e-9)
    if s.steps:
        save_schedule(s, tmp_path / "s.json")
        back = load_schedule(tmp_path / "s.json").report
        # what the solve reported comes back; its bound is now the file's word (checked_claims), not re-proven
        assert (back.method, back.message, back.energy_j, back.phases, back.min_budgets, back.milp) == (
            r.method,
            r.message,
            r.energy_j,
            r.phases,
            r.min_budgets,
            r.milp,
        )
        assert back.gap == pytest.approx(r.gap) if r.gap is not None else True


def test_the_report_is_frozen_and_names_its_fields():
    r = SolveReport(method="greedy", gap=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.gap = 0.0
    with pytest.raises(TypeError):
        r.with_(gapp=0.0)  # a misspelt field is an error, not a new key
    assert r.with_(gap=0.0).gap == 0.0 and r.gap == 0.01


def test_the_schedule_s_old_dict_view_is_read_only():
    g = training_chain(3, 1)
    s = solve(g, memory=keep_all_peak(g), strategy="keep-all")
    view = s.solver
    assert view["method"] == s.report.method == "keep-all"
    with pytest.raises(TypeError):
        view["message"] = "changed"  # would be lost silently if it were a copy
    assert s.report.message != "changed"


def test_an_older_file_s_solver_facts_are_read_into_fields_and_the_rest_kept(tmp_path):
    g = training_chain(3, 1)
    s = solve(g, memory=_ram(g, 0.3), runtime="2x", time_limit=30)
    path = tmp_path / "old.json"
    save_schedule(s, path)
    d = json.loads(path.read_text())
    # the flat dict of the version before SolveReport, with keys this one no longer writes
    d["solver"] = {
        "method": "milp-fast",
        "message": "optimal (proven relative gap 0.00e+00)",
        "gap": 0.0,
        "objective_energy_j": s.totals.energy_j,
        "bound_energy_j": s.totals.energy_j,
        "solve_seconds": 1.5,
        "variables": 120,
        "integer_variables": 100,
        "constraints": 300,
        "nonzeros": 900,
        "mip_seconds": 0.7,
        "backend": "highs",
        "guide_search_rounds": 4,
        "interval_search": {"cp_status": "FEASIBLE"},
        "min_runtime_s_lower_bound": 0.25,
    }
    path.write_text(json.dumps(d))
    r = load_schedule(path).report
    assert (r.method, r.gap, r.energy_j, r.solve_seconds) == ("milp-fast", 0.0, s.totals.energy_j, 1.5)
    assert r.milp is not None and (r.milp.variables, r.milp.nonzeros, r.milp.seconds) == (120, 900, 0.7)
    assert r.min_budgets.runtime_s_lower_bound == 0.25
    facts = r.strategy_facts
    assert facts["guide_search_rounds"] == 4 and facts["interval_search"]["cp_status"] == "FEASIBLE"
    again = r.to_dict()
    assert again["guide_search_rounds"] == 4 and again["nonzeros"] == 900  # nothing the file held is lost
    assert SolveReport.from_dict(again) == r
