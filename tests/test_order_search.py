"""The order search (poet.solve.search.order_search and its phase): moves keep the order topological and
never raise the energy, the schedule of the best order is the validator's, a search is seeded, resumable
and pickled without its graph, the clock and the stop end it, and in the portfolio it only replaces the
one-pass schedule with a cheaper validated one."""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import pytest
from test_stream_remat import conv_bn_relu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import tiled_truth  # noqa: E402

import poet
from poet.graph.tiling import build_tiled
from poet.schedule import validate
from poet.solve.phases.order_search import OrderSearchPhase
from poet.solve.policy import SolvePolicy
from poet.solve.problem import costed_graph, make_budget
from poet.solve.search.order import first_computed_order, recency_order, reordered, stream_remat_in_order
from poet.solve.search.order_search import OrderSearch
from poet.solve.search.stream_remat import stream_remat_schedule


def tiled(tiles: int, depth: int = 3):
    ml = conv_bn_relu(depth)
    return costed_graph(build_tiled(ml, {layer.name: tiles for layer in ml.layers}).graph, "m4")


def start(g, budget, direction=1):
    order = recency_order(g, direction)
    found = stream_remat_in_order(g, budget, order, None, None, time.perf_counter)
    assert found.found
    return order, found


def topological(g, order) -> bool:
    place = {v: i for i, v in enumerate(order)}
    return sorted(order) == list(range(len(g.nodes))) and all(place[a] < place[b] for a, b in g.edges)


CASES = [
    (tiled(4), "40%"),
    (tiled(8, 2), "35%"),
    (costed_graph("layered:80:2", "m4"), "50%"),
    (costed_graph("unet:60:2", "m4"), "40%"),
]


@pytest.mark.parametrize(("g", "frac"), CASES)
def test_first_computed_order_is_the_order_a_pass_ran_in(g, frac):
    budget = make_budget(g, frac, "3x")
    for direction in (1, -1):
        order, found = start(g, budget, direction)
        assert first_computed_order(found.steps, len(g.nodes)) == order
    assert first_computed_order(found.steps, len(g.nodes) + 1) is None  # a node never computed


@pytest.mark.parametrize(("g", "frac"), CASES)
def test_moves_keep_the_order_topological_and_never_raise_the_energy(g, frac):
    budget = make_budget(g, frac, "3x")
    order, found = start(g, budget)
    search = OrderSearch(g, budget, order, found.energy_j, seed=3, patience=150)
    search.run(60.0)
    assert search.idle >= 150  # it ended on its patience, not the clock
    assert topological(g, search.order)
    assert search.energy_j <= found.energy_j
    # the energy it holds is the pass's in its order, and the schedule is valid, priced as the validator does
    again = stream_remat_schedule(reordered(g, search.order), budget)
    assert again.energy_j == pytest.approx(search.energy_j, rel=1e-12)
    best = search.result()
    totals = validate(g, best.steps, budget)
    assert totals.energy_j == pytest.approx(search.energy_j, rel=1e-9)
    assert totals.peak_ram_bytes <= budget.ram_bytes
    assert totals.runtime_s <= budget.runtime_s * (1 + 1e-9)


def test_the_search_lowers_the_energy_of_a_tiled_network():
    """On a tiled conv-BN-ReLU net at a tight budget the depth-first order is not a local optimum."""
    g = tiled(8, 2)
    budget = make_budget(g, "35%", "3x")
    order, found = start(g, budget)
    search = OrderSearch(g, budget, order, found.energy_j, seed=0, patience=400)
    search.run(120.0)
    assert search.kept >= 1
    assert search.energy_j < found.energy_j * (1 - 1e-6)


def test_a_search_is_seeded_resumable_and_pickled_without_its_graph():
    g = tiled(4)
    budget = make_budget(g, "40%", "3x")
    order, found = start(g, budget)
    whole = OrderSearch(g, budget, order, found.energy_j, seed=7, patience=10**6)
    whole.run(600.0, patience=120)
    parts = OrderSearch(g, budget, order, found.energy_j, seed=7, patience=10**6)
    parts.run(600.0, patience=50)
    copy = pickle.loads(pickle.dumps(parts))
    assert copy.g is None and copy.order == parts.order
    copy.g = g
    copy.run(600.0, patience=120)  # the idle moves are counted across calls
    if whole.idle == 120 and copy.idle == 120:
        assert copy.order == whole.order and copy.energy_j == whole.energy_j and copy.moves == whole.moves


def test_adopt_takes_only_a_cheaper_order():
    g = tiled(4)
    budget = make_budget(g, "40%", "3x")
    order, found = start(g, budget)
    cheap = OrderSearch(g, budget, order, found.energy_j, seed=0)
    costly = OrderSearch(g, budget, recency_order(g, -1), 2 * found.energy_j, seed=1)  # as it were dearer
    kept = list(cheap.order)
    cheap.adopt(costly)  # a dearer order is not taken
    assert cheap.order == kept
    costly.adopt(cheap)
    assert costly.order == kept and costly.energy_j == cheap.energy_j and costly.order is not cheap.order


def test_the_clock_the_stop_the_target_and_a_bad_order():
    g = tiled(4)
    budget = make_budget(g, "40%", "3x")
    order, found = start(g, budget)
    s = OrderSearch(g, budget, order, found.energy_j)
    s.run(0.0)
    assert s.moves == 0
    s.run(60.0, stop=lambda: True)
    assert s.moves == 0
    ticks = iter(range(10**6))
    s.run(5.0, clock=lambda: float(next(ticks)))  # each clock reading a second later: a few moves at most
    assert s.moves <= 5
    reached = OrderSearch(g, budget, order, found.energy_j, target_energy=found.energy_j)
    assert reached.reached and reached.done
    reached.run(60.0)
    assert reached.moves == 0
    with pytest.raises(ValueError, match="each of the graph's"):
        OrderSearch(g, budget, order[:-1], found.energy_j)
    with pytest.raises(ValueError, match="each of the graph's"):
        OrderSearch(g, budget, order[:-1] + order[:1], found.energy_j)


def test_in_the_portfolio_it_only_replaces_the_one_pass_schedule_with_a_cheaper_valid_one():
    g = tiled(8, 2)
    # the one-pass route first, no residency bound (it would take the time on a graph this small)
    policy = SolvePolicy(stream_min_nodes=10, residency_max_nodes=0, residency_stretch_max_nodes=0)
    s = poet.solve(g, memory="35%", runtime="3x", time_limit=10, policy=policy, find_min_budgets=False)
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    one_pass = s.report.phase("one-pass paging").facts
    facts = s.report.phase("order search").facts  # (the one-pass schedule is the cheapest held here)
    held = min(e for k, e in one_pass.items() if k.endswith("energy_j") and e is not None)
    assert facts["start_energy_j"] == pytest.approx(held, rel=1e-9)
    assert facts["rounds"] >= 1 and facts["moves"] >= 1
    assert facts["search_energy_j"] < facts["start_energy_j"]  # on this graph the order search gains
    assert facts["energy_j"] == pytest.approx(facts["search_energy_j"], rel=1e-9)  # the validator's
    assert s.totals.energy_j <= facts["energy_j"] * (1 + 1e-12)


def test_the_phase_skips_where_it_cannot_help():
    small = costed_graph("layered:60:1", "m4")  # not tiled, under stream_min_nodes: no one-pass schedule
    s = poet.solve(small, memory="60%", runtime="3x", time_limit=5, find_min_budgets=False)
    assert s.report.skipped("order search") == "no one-pass schedule held"
    g = tiled(4)
    s = poet.solve(g, memory="40%", time_limit=5, paging_time="overlap", find_min_budgets=False)
    assert s.report.skipped(OrderSearchPhase.name) is not None


@pytest.mark.parametrize(("g", "frac"), CASES)
def test_a_ceiling_cuts_only_passes_that_cost_more(g, frac):
    budget = make_budget(g, frac, "3x")
    h = reordered(g, recency_order(g, 1))
    full = stream_remat_schedule(h, budget)
    assert stream_remat_schedule(h, budget, ceiling_j=full.energy_j) == full  # at its own energy: the same
    cheaper = full.energy_j - 0.5 * (full.energy_j - g.plain_energy_j)
    cut = stream_remat_schedule(h, budget, ceiling_j=cheaper)
    assert not cut.found or cut.energy_j > cheaper  # it may end just past it, never below
    assert not stream_remat_schedule(h, budget, ceiling_j=0.5 * g.plain_energy_j).found


def test_a_schedule_in_another_order_below_the_bound_claims_no_gap():
    """The bounds are for schedules in the graph's order: the one-pass rule in another order can be
    cheaper than all of them (here the affinity order's, on the tiled linear model at 1,500 B), and then
    the answer says so, with no gap and no optimality, its bound the plain energy (which bounds any
    order)."""
    s = poet.solve("linear", "m4", memory="1500", gap=0.05, method="heuristic", time_limit=60)
    r = s.report
    lower = s.report.phase("lower bound").facts["bound_energy_j"]
    assert r.method == "one-pass paging" and s.totals.energy_j < lower
    assert s.status == "feasible" and r.gap is None
    assert r.bound_energy_j == pytest.approx(s.graph.plain_energy_j)
    assert "another order" in r.message and "optimality unknown" in r.message


def test_the_one_pass_schedule_is_the_answer_when_it_beats_the_milps():
    """bench/tiled_truth.py's resnet-t2 (47 nodes): the MILP phase runs and finds a schedule, and the
    one-pass rule in a searched order is cheaper; the answer is the cheaper, and the report names both."""
    s = tiled_truth.solve_row("resnet-t2", method="auto", time_limit=10)
    r = s.report
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    searched = r.phase("order search").facts
    assert s.totals.energy_j == pytest.approx(searched["energy_j"], rel=1e-9)
    if r.phase("MILP") is not None and r.phase("MILP").facts.get("status") in ("feasible", "optimal"):
        assert (r.incumbent, r.method) == ("one-pass paging", "one-pass paging")
        assert r.superseded_method.startswith("milp") and "beat the MILP's" in r.message
        assert r.gap is not None and r.bound_energy_j <= s.totals.energy_j
