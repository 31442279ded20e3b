"""The window re-solve (poet/solve/search/windows.py) and the CP-SAT backend (poet/solve/lp/cpsat.py)."""

from __future__ import annotations

import pytest

import poet
from poet.graph.tiling import build_tiled
from poet.graph.zoo import ModelLayers
from poet.graph.zoo_layers import DATA, NetBuilder
from poet.schedule import validate
from poet.schedule.core import Budget, Op, Step
from poet.solve.api import solve_costed
from poet.solve.lp import cpsat
from poet.solve.lp.highs import solve_highs
from poet.solve.milp.formulation import build
from poet.solve.options import SolveOptions
from poet.solve.policy import SolvePolicy
from poet.solve.problem import costed_graph, make_budget
from poet.solve.search.stream import stream_schedule
from poet.solve.search.windows import improve_windows, replay_window


def small_cnn(depth: int = 2) -> ModelLayers:
    """conv-ReLU ``depth`` times (a BatchNorm after the first when there are two or more), a classifier."""
    net = NetBuilder((3, 8, 8))
    x = net.conv("conv1", DATA, 4, 3, 1, 1)
    x = net.relu("relu1", net.batchnorm("bn1", x) if depth > 1 else x)
    for d in range(2, depth + 1):
        x = net.relu(f"relu{d}", net.conv(f"conv{d}", x, 4, 3, 1, 1))
    x = net.flatten("flatten", net.avgpool("avgpool", x, 8))
    net.linear("fc", x, 10)
    return ModelLayers("small_cnn", net.input_shape, tuple(net.layers))


def tiled(tiles: int, depth: int = 2):
    ml = small_cnn(depth)
    return costed_graph(build_tiled(ml, {layer.name: tiles for layer in ml.layers}).graph, "m4")


def stream(g, memory, runtime="3x"):
    """The one-pass schedule; ``runtime="tight"``: a deadline it meets with 0.01% to spare."""
    if runtime == "tight":
        loose, found = stream(g, memory, None)
        budget = Budget(loose.ram_bytes, found.runtime_s * 1.0001)
    else:
        budget = make_budget(g, memory, runtime)
    found = stream_schedule(g, budget)
    assert found.found
    return budget, found


@pytest.mark.parametrize(
    ("tiles", "memory", "runtime", "window"),
    [(2, "60%", "3x", 8), (4, "50%", "3x", 16), (4, "50%", "tight", 16), (4, "70%", None, 5), (8, "40%", "3x", 24)],
)
def test_window_resolve_never_worsens_and_stays_valid(tiles, memory, runtime, window):
    g = tiled(tiles)
    budget, found = stream(g, memory, runtime)
    before = validate(g, found.steps, budget)
    r = improve_windows(g, found.steps, budget, window=window, time_limit=10)
    after = validate(g, r.steps, budget)  # raises if invalid
    assert after.energy_j <= before.energy_j * (1 + 1e-12)
    assert after.energy_j == pytest.approx(before.energy_j - r.saved_j, rel=1e-9, abs=1e-15)
    assert r.windows_kept <= r.windows_tried
    if budget.runtime_s is not None:
        assert after.runtime_s <= budget.runtime_s * (1 + 1e-9)


def test_window_resolve_improves_the_one_pass_schedule_where_recomputing_is_cheaper():
    # 79 nodes on the m4 at half the keep-all peak: the one-pass rule pages every tile out and in;
    # windows of 16 stages recompute some of them instead (measured: 22% less energy)
    g = tiled(4)
    budget, found = stream(g, "50%")
    r = improve_windows(g, found.steps, budget, window=16, time_limit=60)
    assert r.windows_kept >= 1
    after = validate(g, r.steps, budget)
    assert after.energy_j < 0.9 * found.energy_j
    assert any(s.op == Op.COMPUTE for s in r.steps[len(g.nodes) :]) or len(r.steps) != len(found.steps)


def test_window_resolve_answers_within_its_time_and_stop():
    g = tiled(8)
    budget, found = stream(g, "40%")
    r = improve_windows(g, found.steps, budget, window=24, time_limit=0.0)
    assert r.why_stopped == "time limit" and r.steps == tuple(found.steps) and r.windows_tried == 0
    r = improve_windows(g, found.steps, budget, window=24, stop=lambda: True)
    assert r.why_stopped == "asked to stop" and r.windows_tried == 0
    r = improve_windows(g, found.steps, budget, window=24, patience=0)
    assert r.why_stopped == "0 windows in a row improved nothing" and r.windows_tried == 0


def test_window_resolve_refuses_steps_not_in_stage_form():
    g = tiled(2)
    budget, found = stream(g, "60%")
    steps = list(found.steps)
    # swap two first computations: node order is no longer the order of first computations
    i, j = _first_two_computes(steps)
    steps[i], steps[j] = steps[j], steps[i]
    r = improve_windows(g, steps, budget, window=8)
    assert r.why_stopped == "not in stage form" and r.saved_j == 0.0


def _first_two_computes(steps):
    idx = [k for k, s in enumerate(steps) if s.op == Op.COMPUTE]
    return idx[0], idx[1]


def test_replay_window_checks_every_precondition_and_the_ram_cap():
    g = tiled(2)
    first = [s for s in range(len(g.nodes)) if not g.preds[s]][0]
    assert replay_window(g, [Step(Op.COMPUTE, first, first)], set(), set(), 10**9) == ({first}, set())
    assert replay_window(g, [Step(Op.FREE, first, first)], set(), set(), 10**9) is None  # not resident
    assert replay_window(g, [Step(Op.PAGE_IN, first, first)], set(), set(), 10**9) is None  # never stored
    assert replay_window(g, [Step(Op.COMPUTE, first, first)], set(), set(), g.ram[first] - 1) is None  # RAM
    reader = g.succs[first][0]
    assert replay_window(g, [Step(Op.COMPUTE, reader, reader)], set(), set(), 10**9) is None  # input missing


def test_window_phase_runs_in_the_portfolio_and_its_answer_is_validated():
    g = tiled(4)
    # the plain one-pass schedule held (the one with recomputation, cheaper here, leaves the windows nothing
    # to keep: tests/test_stream_remat.py)
    policy = SolvePolicy(stream_min_nodes=10, tiled_portfolio_max_nodes=10, stream_remat_max_nodes=0)
    s = poet.solve(g, memory="50%", runtime="3x", time_limit=10, policy=policy, find_min_budgets=False)
    rec = s.report.phase("window re-solve")
    assert rec is not None and rec.facts["kept"] >= 1
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    one_pass = s.report.phase("one-pass paging").facts["energy_j"]
    assert s.totals.energy_j < one_pass


@pytest.mark.skipif(not cpsat.available(), reason="needs OR-Tools")
def test_cpsat_backend_is_a_relaxation_with_the_same_optimum_as_highs():
    g = tiled(2, depth=1)
    budget = make_budget(g, "85%", "3x")
    f = build(g, budget)
    h = solve_highs(f.problem, time_limit=60, gap=1e-7)
    c = cpsat.solve_cpsat(f.problem, time_limit=60, gap=1e-7)
    assert h.status == "optimal" and c.status == "optimal"
    assert c.bound <= h.objective * (1 + 1e-9)
    assert c.objective == pytest.approx(h.objective, rel=1e-6)


@pytest.mark.skipif(not cpsat.available(), reason="needs OR-Tools")
def test_cpsat_backend_through_solve_returns_a_validated_schedule():
    g = tiled(2, depth=1)
    s = poet.solve(g, memory="85%", runtime="3x", method="warm", backend="cpsat", time_limit=60, gap=1e-6)
    assert s.status == "optimal" and s.steps
    assert validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    h = poet.solve(g, memory="85%", runtime="3x", method="warm", backend="highs", time_limit=60, gap=1e-6)
    assert s.totals.energy_j == pytest.approx(h.totals.energy_j, rel=1e-5)


def test_unknown_backend_is_refused_with_the_choices():
    g = tiled(2, depth=1)
    with pytest.raises(Exception, match="cpsat"):
        poet.solve(g, memory="85%", runtime="3x", method="warm", backend="gurobi", time_limit=5)


def test_window_polish_improves_the_best_plan_or_leaves_it():
    # below stream_min_nodes no one-pass schedule is held: the polish works on the best plan's schedule
    # on a tiled graph (the front door's rules) the guide search leaves it a share of its time
    g = tiled(4)
    opts = SolveOptions(time_limit_s=20, method="heuristic", find_min_budgets=False, tiled=True)
    s = solve_costed(g, make_budget(g, "50%", "3x"), "poet", opts)
    rec = s.report.phase("window polish")
    assert rec is not None
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    assert rec.facts["tried"] >= 1
    if "saved_j" in rec.facts:  # the answer is the polished schedule, or one cheaper still (Capuchin's)
        assert s.totals.energy_j <= rec.energy_j - rec.facts["saved_j"] * (1 - 1e-9)
        assert s.report.method in ("window re-solve", "capuchin")


@pytest.mark.parametrize("seed", [1, 2, 3, 5, 8, 13])
def test_window_resolve_on_generated_graphs_never_worsens(seed):
    # generated DAGs (not tilings), three devices, serial and hidden paging, with and without deadlines
    device = ("m4", "m0", "a72")[seed % 3]
    g = costed_graph(f"layered:40:{seed}", device)
    for memory, runtime, paging in (("60%", "2x", "serial"), ("80%", None, "hidden")):
        budget = make_budget(g, memory, runtime, paging_time=paging)
        found = stream_schedule(g, budget)
        if not found.found:
            continue
        r = improve_windows(g, found.steps, budget, window=8, time_limit=3, window_time_limit=1)
        assert validate(g, r.steps, budget).energy_j <= found.energy_j * (1 + 1e-9)
