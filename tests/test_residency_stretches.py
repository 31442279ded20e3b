"""The residency bound stretch by stretch (poet/solve/residency_stretches.py): never above an exact optimum,
however the moments are cut; one stretch is the whole residency ILP; the clock and the stop honoured."""

import json
import sys
from pathlib import Path

import pytest
from conftest import bound_case, stage_optimum

from poet.solve.problem import costed_graph, make_budget
from poet.solve.residency_bound import ResidencyILP, last_readers_by, residency_bound
from poet.solve.residency_stretches import stretch_weights, stretched_residency_bound, stretches_of

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import tiled_truth  # noqa: E402


@pytest.mark.parametrize("seed", range(45))
def test_stretched_bound_never_exceeds_the_exact_optimum(seed):
    g, b, strategy, _ = bound_case(seed)
    best = stage_optimum(g, b, strategy)
    whole = residency_bound(g, b, time_limit=20, **strategy).bound
    for size in (1, 2, 3, 5):
        res = stretched_residency_bound(g, b, time_limit=20, size=size, **strategy)
        assert res.ended == "solved" and res.stretches == len(stretches_of(len(g.nodes), size))
        assert res.bound is not None and res.bound >= g.plain_energy_j * (1 - 1e-9)
        if best is None:
            continue  # no schedule: an infinite bound is right, a finite one merely weak
        assert res.bound <= best * (1 + 1e-7)
        # each stretch's ILP relaxes the whole one: solved to optimality, their sum is at most its optimum
        assert res.bound <= whole * (1 + 1e-7)


@pytest.mark.parametrize("seed", [0, 5, 13, 44])
def test_one_stretch_is_the_whole_residency_ilp(seed):
    g, b, strategy, _ = bound_case(seed)
    whole = residency_bound(g, b, time_limit=20, **strategy).bound
    one = stretched_residency_bound(g, b, time_limit=20, size=len(g.nodes), **strategy)
    assert one.stretches == 1 and one.bound == pytest.approx(whole, rel=1e-9)
    assert last_readers_by(g, len(g.nodes) - 1) == list(g.last_reader)


@pytest.mark.parametrize("name", ["cnn2-t2", "cnn1-t4", "cnn2-t4", "resnet-t2", "transformer-t4-80"])
def test_stretched_bound_stays_below_the_tiled_truth(name):
    # the rows' proven optima (or the cheapest schedule known) at or above the bound, cut at 5 and 40 gaps
    row = json.loads((BENCH / "tiled_truth.json").read_text())[name]
    best = min([row["optimum_j"]] + [run["energy_j"] for run in row.get("search_runs", [])])
    s = tiled_truth.solve_row(name, method="heuristic", time_limit=2)
    for size in (5, 40):
        res = stretched_residency_bound(s.graph, s.budget, time_limit=4, size=size)  # valid when cut short too
        assert res.bound is not None and s.graph.plain_energy_j <= res.bound <= best * (1 + 1e-7)


def test_a_stretch_sees_only_its_moments():
    # a 60-node training chain cut at moments 20..40: tensors past their last reader in the stretch are not alive,
    # nothing before moment 20 or after 40 gets a column
    g = costed_graph("chain:60:1", "m4")
    b = make_budget(g, "40%", "3x")
    ilp = ResidencyILP(g, b, remat=True, paging=True, max_depth=8, span=(20, 40), charged=frozenset())
    ilp.build(10**9)
    assert {t for _, t in ilp.y} <= set(range(20, 41)) and {t for _, t in ilp.events} <= set(range(20, 40))
    assert all(g.last_reader[q] > t or ilp.last[q] > t for q, t in ilp.y)
    assert all(max(r for r in g.succs[q] if r <= 40) > t for q, t in ilp.y)
    assert not ilp.pageout  # no page-out is this stretch's to price
    with pytest.raises(ValueError, match="within 0..59"):
        ResidencyILP(g, b, remat=True, paging=True, max_depth=8, span=(50, 60))


def test_clock_stop_and_bad_sizes():
    g, b, strategy, _ = bound_case(2)
    late = stretched_residency_bound(g, b, time_limit=0.0, size=2, **strategy)
    assert late.ended == "time limit" and late.bound is None and late.solved == 0
    stopped = stretched_residency_bound(g, b, size=2, stop=lambda: True, **strategy)
    assert stopped.ended == "stopped" and stopped.bound is None
    assert stretches_of(10, 4) == [(0, 4), (4, 8), (8, 9)]
    assert stretches_of(2, 5) == [(0, 1)]
    with pytest.raises(ValueError, match="at least one gap"):
        stretches_of(10, 0)


def test_stretches_solved_in_child_processes_give_the_same_bound():
    # two workers: each stretch in `python -m poet.solve.lp.bound_process`, its LP relaxation first; solved
    # to optimality there, the same sum as solving each here
    s = tiled_truth.solve_row("cnn2-t2", method="heuristic", time_limit=2)
    here = stretched_residency_bound(s.graph, s.budget, time_limit=60, size=15)
    there = stretched_residency_bound(s.graph, s.budget, time_limit=60, size=15, workers=2)
    assert here.solved == there.solved == here.stretches == 3
    assert there.bound == pytest.approx(here.bound, rel=1e-6) and here.bound > s.graph.plain_energy_j
    with pytest.raises(ValueError, match="workers must be at least 1"):
        stretched_residency_bound(s.graph, s.budget, workers=0)


def test_stretch_weights_count_the_tensors_alive_in_each_stretch():
    g = costed_graph("chain:60:1", "m4")
    b = make_budget(g, "40%", "3x")
    spans = stretches_of(len(g.nodes), 7)
    for (t0, t1), w in zip(spans, stretch_weights(g, spans)):
        alive = ResidencyILP(g, b, remat=True, paging=True, max_depth=8, span=(t0, t1)).alive()
        assert w == max(1, sum(len(alive[t]) for t in range(t0, t1 + 1)))


def test_the_residency_bound_phase_takes_a_graph_past_its_node_cap_stretch_by_stretch():
    # cnn2-t2 (41 nodes) with the whole ILP's node cap at 30: the lower-bound phase does not build it, the
    # residency-bound phase sums 10-gap stretches, and the solve reports the larger bound and its gap
    from dataclasses import replace

    from poet.schedule import validate
    from poet.solve.policy import DEFAULT_POLICY

    policy = replace(DEFAULT_POLICY, residency_max_nodes=30, residency_stretch_moments=10)
    s = tiled_truth.solve_row("cnn2-t2", method="heuristic", time_limit=20, policy=policy)
    phases = {p.name: p for p in s.report.phases}
    early, late = phases["lower bound"].facts, phases["residency bound"].facts
    assert "residency_bound_energy_j" not in early
    assert late["stretches"] == 4 and late["stretches_solved"] == 4 and late["stretches_ended"] == "solved"
    part = late["stretched_bound_energy_j"]
    assert early["bound_energy_j"] < part <= validate(s.graph, s.steps, s.budget).energy_j
    assert s.report.bound_energy_j == pytest.approx(part)
    assert s.report.gap == pytest.approx((s.totals.energy_j - part) / s.totals.energy_j, rel=1e-6)
    # within residency_stretch_min_gap of the bound already: the phase leaves the time to the others
    lazy = replace(policy, residency_stretch_min_gap=1.0)
    s = tiled_truth.solve_row("cnn2-t2", method="heuristic", time_limit=20, policy=lazy)
    late = next(p for p in s.report.phases if p.name == "residency bound")
    assert "residency_stretch_min_gap" in late.facts["skipped"]
