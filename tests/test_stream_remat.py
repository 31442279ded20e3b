"""The one-pass rule with recomputation (poet.solve.search.stream_remat): valid schedules priced as the
validator prices them, recomputation where it is cheaper than paging, the clock and the stop honoured, and
in the portfolio never worse than the plain one-pass rule."""

from __future__ import annotations

import pytest

import poet
from poet.graph.core import CostedGraph, CostedNode
from poet.graph.tiling import build_tiled
from poet.graph.zoo import ModelLayers
from poet.graph.zoo_layers import DATA, NetBuilder
from poet.schedule import validate
from poet.schedule.core import Budget, Op
from poet.solve.policy import SolvePolicy
from poet.solve.problem import costed_graph, make_budget
from poet.solve.search.order import (
    affinity_order,
    recency_order,
    reordered,
    stream_remat_recency,
    stream_remat_reordered,
)
from poet.solve.search.stream import stream_schedule
from poet.solve.search.stream_remat import stream_remat_schedule


def conv_bn_relu(depth: int) -> ModelLayers:
    """conv-BatchNorm-ReLU ``depth`` times, a classifier: the tiles recomputation is for (BN, ReLU)."""
    net = NetBuilder((3, 8, 8))
    x = DATA
    for d in range(1, depth + 1):
        x = net.relu(f"relu{d}", net.batchnorm(f"bn{d}", net.conv(f"conv{d}", x, 4, 3, 1, 1)))
    net.linear("fc", net.flatten("flatten", net.avgpool("avgpool", x, 8)), 10)
    return ModelLayers("conv_bn_relu", net.input_shape, tuple(net.layers))


def tiled(tiles: int, depth: int = 2) -> CostedGraph:
    ml = conv_bn_relu(depth)
    return costed_graph(build_tiled(ml, {layer.name: tiles for layer in ml.layers}).graph, "m4")


def checked(g: CostedGraph, budget: Budget, **kw):
    """The pass's schedule, replayed by the validator: its energy and runtime are the validator's."""
    found = stream_remat_schedule(g, budget, **kw)
    if not found.found:
        return found, None
    totals = validate(g, found.steps, budget)
    assert totals.energy_j == pytest.approx(found.energy_j, rel=1e-9)
    assert totals.runtime_s == pytest.approx(found.runtime_s, rel=1e-9)
    assert totals.peak_ram_bytes <= budget.ram_bytes
    return found, totals


GRAPHS = [
    ("layered:60:1", "m4"),
    ("unet:60:2", "m4"),
    ("fan:60:1", "m4"),
    ("chain:300:1", "m4"),
    ("resnet18_cifar", "m4"),
    ("unet:60:2", "a72"),
]


@pytest.mark.parametrize(("spec", "device"), GRAPHS)
def test_schedules_are_valid_on_generated_graphs_at_tight_budgets(spec, device):
    g = costed_graph(spec, device)
    for frac in ("30%", "50%", "80%"):
        for runtime in (None, "3x"):
            budget = make_budget(g, frac, runtime)
            plain = stream_schedule(g, budget)
            found, totals = checked(g, budget)
            if plain.found and not found.found:
                assert found.over_deadline or budget.runtime_s is None  # it may overrun, never miss silently
            for depth in (1, 5):
                checked(g, budget, max_depth=depth)


@pytest.mark.parametrize(("tiles", "depth", "frac"), [(2, 2, "60%"), (4, 2, "50%"), (4, 3, "40%"), (8, 2, "40%")])
def test_schedules_are_valid_on_tiled_graphs(tiles, depth, frac):
    g = tiled(tiles, depth)
    budget = make_budget(g, frac, "3x")
    if budget.ram_bytes < g.min_ram_bytes():
        pytest.skip("below the tiled graph's minimum")
    _, totals = checked(g, budget)
    assert totals is not None
    for mode in ("hidden", "overlap"):  # the runtime as the validator counts it in each paging model
        checked(g, Budget(budget.ram_bytes, None, mode))


def _node(name: str, kind: str, ram: int, flop_j: float, page_j: float) -> CostedNode:
    return CostedNode(name, kind, ram, flop_j, flop_j, page_j, page_j, page_j, page_j)


def recompute_case() -> CostedGraph:
    """conv -> relu -> (a long stretch of big nodes) -> a backward node reading relu and conv.

    The relu output is cheap to compute (1e-6 J) and dear to page (1 J each way); the conv output is dear to
    compute and must come back anyway for the backward node.  Under RAM pressure the pass should drop the relu
    output and recompute it from the conv output, not page it."""
    nodes = [_node("conv", "forward", 100, 10.0, 1.0), _node("relu", "forward", 100, 1e-6, 1.0)]
    edges = [(0, 1)]
    for i in range(6):  # a stretch that needs the RAM: 300 B each
        nodes.append(_node(f"big{i}", "forward", 300, 1.0, 3.0))
        edges.append((len(nodes) - 2 if i else 1, len(nodes) - 1))
    nodes.append(_node("bwd", "backward", 100, 1.0, 1.0))
    last = len(nodes) - 1
    edges += [(last - 1, last), (0, last), (1, last)]
    return CostedGraph("recompute_case", tuple(nodes), tuple(edges))


def test_recomputes_a_cheap_tensor_instead_of_paging_it():
    g = recompute_case()
    budget = Budget(650)  # the conv and relu outputs cannot stay through the stretch
    plain = stream_schedule(g, budget)
    found, totals = checked(g, budget)
    assert plain.found and found.found
    relu = 1
    assert not any(s.op == Op.PAGE_OUT and s.node == relu for s in found.steps)
    assert [s.op for s in found.steps if s.node == relu].count(Op.COMPUTE) == 2
    assert totals.recomputes >= 1 and totals.energy_j < plain.energy_j - 1.0


def test_keeps_paging_where_recomputing_is_dearer():
    g = recompute_case()
    # the relu dearer to compute than to page: no recomputation
    nodes = list(g.nodes)
    nodes[1] = _node("relu", "forward", 100, 50.0, 1.0)
    g = CostedGraph("dear", tuple(nodes), g.edges)
    found, totals = checked(g, Budget(650))
    assert totals.recomputes == 0
    assert totals.energy_j == pytest.approx(stream_schedule(g, Budget(650)).energy_j)


def test_clock_and_stop_are_honoured():
    g = costed_graph("chain:300:1", "m4")
    budget = make_budget(g, "40%")
    timed_out = stream_remat_schedule(g, budget, time_limit=-1.0)
    assert not timed_out.found and not timed_out.over_deadline and timed_out.resident_pairs is None
    stopped = stream_remat_schedule(g, budget, stop=lambda: True)
    assert not stopped.found and not stopped.over_deadline
    ticks = iter(range(10**6))
    late = stream_remat_schedule(g, budget, time_limit=5.0, clock=lambda: float(next(ticks)) * 10)
    assert not late.found  # the clock is read while it runs, not only at the start


@pytest.mark.parametrize(("tiles", "frac"), [(4, "50%"), (8, "40%")])
def test_portfolio_holds_the_cheapest_of_the_one_pass_schedules(tiles, frac):
    g = tiled(tiles)
    policy = SolvePolicy(stream_min_nodes=10, tiled_portfolio_max_nodes=10)  # the one-pass route alone
    s = poet.solve(g, memory=frac, runtime="3x", time_limit=3, policy=policy, find_min_budgets=False)
    facts = s.report.phase("one-pass paging").facts
    plain, remat, moved = facts["energy_j"], facts["recompute_energy_j"], facts["reordered_energy_j"]
    deep = facts["depth_first_energy_j"]
    assert None not in (plain, remat, moved, deep)
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(s.totals.energy_j)
    assert s.totals.energy_j <= min(plain, remat, moved, deep) * (1 + 1e-12)
    candidates = [(plain, None), (remat, "recompute"), (moved, "recompute, reordered")]
    candidates.append((deep, "recompute, depth-first"))
    assert facts.get("held") == min(candidates, key=lambda e: e[0])[1]


ORDERS = [
    (affinity_order, stream_remat_reordered),
    (lambda g: recency_order(g, 1), stream_remat_recency),
    (lambda g: recency_order(g, -1), stream_remat_recency),
]


@pytest.mark.parametrize(("spec", "device"), GRAPHS[:4] + [("layered:300:3", "m4")])
@pytest.mark.parametrize(("order_of", "rule"), ORDERS)
def test_orders_are_topological_and_their_schedules_are_valid(spec, device, order_of, rule):
    g = costed_graph(spec, device)
    order = order_of(g)
    assert sorted(order) == list(range(len(g.nodes)))
    place = {v: i for i, v in enumerate(order)}
    assert all(place[a] < place[b] for a, b in g.edges)
    r = reordered(g, order)
    assert [nd.name for nd in r.nodes] == [g.nodes[v].name for v in order]
    assert r.plain_energy_j == pytest.approx(g.plain_energy_j)
    for frac in ("30%", "60%"):
        budget = make_budget(g, frac, "3x")
        found = rule(g, budget)
        if found.found:
            totals = validate(g, found.steps, budget)  # on the graph's own ids
            assert totals.energy_j == pytest.approx(found.energy_j, rel=1e-9)
            assert totals.runtime_s == pytest.approx(found.runtime_s, rel=1e-9)


def test_affinity_order_places_readers_of_the_same_tensors_together():
    # a fans out to b and c, which read only a; d reads b.  The graph's order is a, b, d, c: c follows b
    nodes = [_node(x, "forward", 100, 1.0, 1.0) for x in "abdc"]
    g = CostedGraph("fan", tuple(nodes), ((0, 1), (0, 3), (1, 2)))
    assert affinity_order(g) == [0, 1, 3, 2]


def test_depth_first_order_carries_each_tile_through_the_layers_that_read_it():
    """Each BatchNorm statistics tile right after the convolution tile it reads (the affinity order computes
    every convolution tile first), and the next convolution's tile as soon as the ReLU tiles it reads are
    placed; the direction sets the sweep."""
    g = tiled(4)
    names = [g.nodes[v].name for v in recency_order(g, 1)]
    assert names[:8] == [f"{x}[{i}/4]" for i in range(4) for x in ("conv1", "bn1.stats")]
    # conv2's first tile reads relu1's tiles 0 and 1 (a 3x3 kernel): it comes right after them
    assert names.index("conv2[0/4]") == names.index("relu1[1/4]") + 1
    down = [g.nodes[v].name for v in recency_order(g, -1)]
    assert down[:4] == [f"conv1[{i}/4]" for i in (3, 2, 1, 0)]
    affinity = [g.nodes[v].name for v in affinity_order(g)]
    assert affinity.index("bn1.stats[0/4]") > affinity.index("conv1[3/4]")
    with pytest.raises(ValueError, match="direction must be 1 or -1"):
        recency_order(g, 0)


def test_depth_first_pass_is_never_above_its_two_directions():
    g = tiled(8)
    budget = make_budget(g, "40%", "3x")
    found = stream_remat_recency(g, budget)
    assert found.found
    each = [stream_remat_schedule(reordered(g, recency_order(g, d)), budget).energy_j for d in (1, -1)]
    assert found.energy_j == pytest.approx(min(each), rel=1e-12)
    assert validate(g, found.steps, budget).energy_j == pytest.approx(found.energy_j, rel=1e-9)


@pytest.mark.parametrize("rule", [stream_remat_reordered, stream_remat_recency])
def test_reordered_passes_honour_the_clock_the_stop_and_the_overlap_model(rule):
    g = costed_graph("chain:300:1", "m4")
    budget = make_budget(g, "40%")
    assert not rule(g, budget, time_limit=-1.0).found
    assert not rule(g, budget, stop=lambda: True).found
    assert affinity_order(g, stop=lambda: True) is None
    assert recency_order(g, 1, stop=lambda: True) is None
    ticks = iter(range(10**6))
    assert recency_order(g, 1, t_end=5.0, clock=lambda: float(next(ticks)) * 10) is None
    assert not rule(g, Budget(budget.ram_bytes, None, "overlap")).found


def test_variants_get_no_time_past_the_limit(monkeypatch):
    """The plain pass may use the grace; the variants that only improve on it start only within the limit,
    so the phase overruns it by one grace at most, not one per pass."""
    import time

    from poet.solve.api import solve_costed
    from poet.solve.options import SolveOptions
    from poet.solve.phases import one_pass

    offset = [0.0]
    plain = one_pass.stream_schedule

    def slow_plain(*args, **kw):  # the plain pass "takes" the whole limit and a bit of the grace
        found = plain(*args, **kw)
        offset[0] += 4.0
        return found

    monkeypatch.setattr(one_pass, "stream_schedule", slow_plain)
    g = tiled(4)
    budget = make_budget(g, "50%", "3x")
    policy = SolvePolicy(stream_min_nodes=10, tiled_portfolio_max_nodes=10)  # the one-pass route alone

    def solved(clock):
        opts = SolveOptions(time_limit_s=3, policy=policy, find_min_budgets=False, tiled=True, clock=clock)
        s = solve_costed(g, budget, "poet", opts)
        return s, s.report.phase("one-pass paging").facts

    s, facts = solved(lambda: time.perf_counter() + offset[0])
    assert facts["variants_skipped"] == "the time limit was reached"
    skipped = ("recompute_energy_j", "reordered_energy_j", "depth_first_energy_j")
    assert all(facts[k] is None for k in skipped) and "held" not in facts
    assert s.steps and validate(s.graph, s.steps, s.budget).energy_j == pytest.approx(facts["energy_j"])
    monkeypatch.setattr(one_pass, "stream_schedule", plain)
    s, facts = solved(time.perf_counter)  # with time left the variants run
    assert "variants_skipped" not in facts and facts["recompute_energy_j"] is not None
