"""The MILP phase's CP-SAT pass on small tiled graphs (poet/solve/phases/milp.py): it never leaves the
answer worse than the plan the phase started from (method "warm": the MILP always runs), the answer
stays valid, and where it does not apply the phase says why."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import poet
from poet.graph.tiling import build_tiled
from poet.schedule import validate
from poet.schedule.core import FEASIBLE, INFEASIBLE, OPTIMAL
from poet.solve.lp.problem import MatrixBuilder, MilpProblem, MilpResult
from poet.solve.phases import milp as milp_phase
from poet.solve.policy import SolvePolicy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import tiled_truth  # noqa: E402


def tiled_cnn(depth: int, tiles: int):
    ml = tiled_truth.cnn(depth)  # the small CNNs of bench/tiled_truth.py
    return build_tiled(ml, {layer.name: tiles for layer in ml.layers}).graph


def solve(graph, memory: str, limit: float, policy: SolvePolicy | None = None, **kw):
    # the reader-gap bound off: these few seconds are the MILP phase's to test, not the lower bound's
    policy = dataclasses.replace(policy or SolvePolicy(), reader_gap_share=0.0)
    return poet.solve(
        graph,
        "m4",
        memory=memory,
        runtime="3x",
        method="warm",
        time_limit=limit,
        find_min_budgets=False,
        policy=policy,
        **kw,
    )


def milp_record(s):
    return next(p for p in s.report.phases if p.name == "MILP")


@pytest.mark.parametrize("depth,tiles,memory", [(2, 2, "60%"), (1, 4, "60%"), (2, 2, "70%")])
def test_cpsat_first_never_worsens_the_plan_and_stays_valid(depth, tiles, memory):
    pytest.importorskip("ortools")
    s = solve(tiled_cnn(depth, tiles), memory, 6)
    rec = milp_record(s)
    assert "skipped" not in rec.facts and "cpsat_first" not in rec.facts  # CP-SAT ran first
    assert rec.facts["found_by"] in ("CP-SAT", "HiGHS", "neighbourhoods")
    if s.report.milp is not None:  # the report names the backend whose schedule the MILP phase returned
        assert (
            s.report.milp.backend
            == {"CP-SAT": "cpsat", "HiGHS": "highs", "neighbourhoods": "cpsat"}[rec.facts["found_by"]]
        )
    assert s.steps
    energy = validate(s.graph, s.steps, s.budget).energy_j
    assert energy == pytest.approx(s.totals.energy_j)
    assert energy <= rec.energy_j * (1 + 1e-9)  # the plan held when the MILP phase began (its warm start)
    assert s.report.bound_energy_j <= energy * (1 + 1e-9)


def test_cpsat_first_searches_neighbourhoods_of_the_warm_start_unless_the_policy_says_not():
    pytest.importorskip("ortools")
    g = tiled_cnn(2, 2)
    lns = milp_record(solve(g, "60%", 4))
    assert lns.facts["cpsat_search"] == "LNS only"  # the plan held is its warm start
    for policy in (SolvePolicy(tiled_cpsat_lns_only=False), SolvePolicy(tiled_cpsat_small_nodes=5)):
        full = solve(g, "60%", 4, policy=policy)
        assert milp_record(full).facts["cpsat_search"] == "default"
        validate(full.graph, full.steps, full.budget)


def test_guide_search_leaves_the_time_to_the_cpsat_pass():
    pytest.importorskip("ortools")
    s = solve(tiled_cnn(3, 2), "50%", 8)
    guide = next(p for p in s.report.phases if p.name == "guide search")
    assert guide.seconds <= SolvePolicy().tiled_cpsat_search_share * 8 + 0.5
    assert milp_record(s).facts["cpsat_search"] == "LNS only"
    validate(s.graph, s.steps, s.budget)


@pytest.mark.parametrize("spec", ["layered:30:3", "diamond:30:2"])
def test_cpsat_first_holds_the_time_limit_and_stays_valid_on_generated_graphs(spec, monkeypatch):
    """The pass forced onto generated (untiled) graphs: the answer is validated, never above the plan
    the phase started from, and the solve ends within its limit."""
    pytest.importorskip("ortools")
    monkeypatch.setattr(milp_phase, "cpsat_skip_reason", lambda state: None)
    t0 = time.perf_counter()
    s = poet.solve(spec, "m4", memory="70%", runtime="3x", method="warm", time_limit=5, find_min_budgets=False)
    assert time.perf_counter() - t0 < 5 + 3.0
    rec = milp_record(s)
    assert "cpsat_search" in rec.facts
    if s.steps:
        energy = validate(s.graph, s.steps, s.budget).energy_j
        assert rec.energy_j is None or energy <= rec.energy_j * (1 + 1e-9)


def test_cpsat_first_skipped_past_its_node_cap_with_the_reason():
    g = tiled_cnn(1, 2)
    s = solve(g, "75%", 4, policy=SolvePolicy(tiled_cpsat_max_nodes=5))
    assert "past policy.tiled_cpsat_max_nodes (5)" in milp_record(s).facts["cpsat_first"]
    validate(s.graph, s.steps, s.budget)


def test_cpsat_first_skipped_cleanly_without_ortools(monkeypatch):
    monkeypatch.setattr(milp_phase, "available", lambda: False)
    s = solve(tiled_cnn(1, 2), "75%", 4)
    assert "OR-Tools is not installed" in milp_record(s).facts["cpsat_first"]
    validate(s.graph, s.steps, s.budget)


def test_cpsat_first_not_on_an_untiled_graph():
    s = poet.solve("linear", "m4", memory="80%", runtime="3x", method="warm", time_limit=4, find_min_budgets=False)
    assert milp_record(s).facts["cpsat_first"] == "skipped: not a tiled graph"
    validate(s.graph, s.steps, s.budget)


def one_row_problem() -> MilpProblem:
    """min x0 + x1 s.t. x0 + x1 >= 1, binaries."""
    m = MatrixBuilder()
    cols = [m.var(0.0, 1.0, 1.0, True) for _ in range(2)]
    m.row(cols, [1.0, 1.0], 1.0, np.inf)
    return m.problem()


def test_usable_drops_a_schedule_outside_the_milp_but_keeps_the_bound():
    p = one_row_problem()
    bad = MilpResult(OPTIMAL, np.zeros(2), 0.0, 0.5, 0.0, 1.0, "OPTIMAL")
    r = milp_phase.usable(p, bad)
    assert r.x is None and r.objective is None and r.bound == 0.5 and r.status == FEASIBLE
    good = MilpResult(FEASIBLE, np.array([1.0, 0.0]), 1.0, 0.5, 0.5, 1.0, "FEASIBLE")
    assert milp_phase.usable(p, good) is good


def test_better_of_takes_the_cheaper_schedule_and_the_larger_bound():
    a = MilpResult(FEASIBLE, np.array([1.0, 1.0]), 2.0, 0.9, None, 1.0, "a")
    b = MilpResult(FEASIBLE, np.array([1.0, 0.0]), 1.0, 0.5, None, 2.0, "b")
    r = milp_phase.better_of(a, b, 1e-3)
    assert r.objective == 1.0 and r.bound == 0.9 and r.seconds == 3.0 and r.extra["found_by"] == "HiGHS"
    r = milp_phase.better_of(b, a, 1e-3)
    assert r.objective == 1.0 and r.extra["found_by"] == "CP-SAT"
    proven = MilpResult(FEASIBLE, np.array([1.0, 0.0]), 1.0, 1.0, None, 1.0, "c")
    assert milp_phase.better_of(proven, a, 1e-3).status == OPTIMAL
    none = MilpResult(INFEASIBLE, None, None, None, None, 1.0, "infeasible")
    assert milp_phase.better_of(none, a, 1e-3).status == INFEASIBLE
