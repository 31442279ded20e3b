"""Tiles planned for less RAM than the budget (poet/solve/headroom.py): the search keeps the cheapest
validated answer, never a worse one, stays within its deadline, and runs only where it applies."""

import dataclasses
import time

import pytest

from poet.report.tiling import tiling_text
from poet.schedule import validate
from poet.solve import SolveOptions, SolvePolicy
from poet.solve.api import solve_problem
from poet.solve.headroom import search_headroom, skip_reason
from poet.solve.problem import tiled_problem
from poet.units import fmt_bytes

BUDGET = 262144  # vgg16_cifar on the m4: 125 nodes tiled for the whole budget, 133 for 7/8 or 3/4 of it


@pytest.fixture(scope="module")
def first():
    p = tiled_problem("vgg16_cifar", "m4", memory=BUDGET, runtime="3x")
    s = solve_problem(p, "poet", SolveOptions(time_limit_s=4, find_min_budgets=False))
    assert p.tiled and s.steps
    return p, s


def _search(p, s, seconds, **policy):
    pol = SolvePolicy(headroom_min_seconds=1.0, **policy)
    return search_headroom(
        p,
        s,
        "vgg16_cifar",
        lambda q, o: solve_problem(q, "poet", o),
        SolveOptions(time_limit_s=max(seconds, 1.0), find_min_budgets=False, policy=pol),
        deadline=time.perf_counter() + seconds,
        policy=pol,
        device="m4",
        batch_size=1,
        max_tile_nodes=None,
    )


def test_the_search_keeps_the_cheapest_validated_answer_and_never_a_worse_one(first):
    p, s = first
    h = _search(p, s, 10.0, headroom_max_plans=2)
    best_p, best, tried = h.problem, h.schedule, h.tried
    assert 1 <= len(tried) <= 2
    assert all(t.planned_ram_bytes < BUDGET for t in tried)
    assert best.totals.energy_j <= s.totals.energy_j * (1 + 1e-12)
    assert all(t.energy_j is None or t.energy_j >= best.totals.energy_j * (1 - 1e-12) for t in tried)
    # the answer is checked against its own graph, at the whole budget
    assert best_p.budget.ram_bytes == BUDGET and best.graph is best_p.graph
    assert validate(best_p.graph, best.steps, best_p.budget).energy_j == pytest.approx(best.totals.energy_j)
    if best is not s:  # planned for less, reported against the budget it is solved at
        assert h.planned_ram_bytes < BUDGET and best_p.plan.budget_bytes == BUDGET and best_p.plan.fits
    else:
        assert h.planned_ram_bytes == BUDGET
    # what poet solve prints: the tiling kept, every one tried, and no "below the tiled minimum"
    tiling = {**best_p.plan.summary(), "planned_ram_bytes": h.planned_ram_bytes}
    best.report = best.report.with_(tiling={**tiling, "headroom": [dataclasses.asdict(t) for t in tried]})
    text = tiling_text(best_p, best, None)
    assert f"tiles planned for {fmt_bytes(h.planned_ram_bytes)} of the {fmt_bytes(BUDGET)} budget" in text
    assert "below the tiled minimum" not in text and "to fit" in text


def test_a_deadline_already_past_leaves_the_first_answer(first):
    p, s = first
    h = _search(p, s, -1.0)
    assert h.schedule is s and h.problem is p and h.tried == () and h.planned_ram_bytes == BUDGET


def test_the_search_runs_only_on_auto_tiling_of_a_zoo_model_with_an_open_gap(first):
    p, s = first
    pol = SolvePolicy()
    assert s.status == "feasible" and s.report.gap > 0  # the m4's tiled graphs: gaps of a few % at least
    assert skip_reason(p, s, "vgg16_cifar", SolvePolicy(headroom_min_gap=0.0)) is None
    assert "proven within" in skip_reason(p, s, "vgg16_cifar", SolvePolicy(headroom_min_gap=1.0))
    assert "not a zoo model" in skip_reason(p, s, p.graph, pol)
    fixed = tiled_problem("vgg16_cifar", "m4", memory=BUDGET, runtime="3x", tile=4)
    assert skip_reason(fixed, s, "vgg16_cifar", pol) == "not auto tiling"
    untiled = tiled_problem("vgg16_cifar", "m4", memory="50MB", runtime="3x")
    assert skip_reason(untiled, s, "vgg16_cifar", pol) == "not auto tiling"
