"""Fixed-rule baselines: Chen's segment checkpointing and the Capuchin-style greedy."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poet
from poet.graph.core import CostedGraph, CostedNode
from poet.schedule.core import HEURISTIC, INFEASIBLE, Budget
from poet.schedule.validate import simulate, validate
from poet.solve.api import costed_graph
from poet.solve.baselines import capuchin_plan, chain_cut_points, chen_plans, keep_all_peak, segment_steps

ZOO_SAVING = ["resnet18_cifar", "vgg16_cifar", "resnet18", "resnet50", "vgg16", "bert"]


@pytest.fixture(scope="module")
def r18():
    return costed_graph("resnet18_cifar", "a72")


@pytest.mark.parametrize("model", ZOO_SAVING)
def test_chen_needs_clearly_less_ram_than_keep_all(model):
    g = costed_graph(model, "a72")
    ka = keep_all_peak(g)
    peaks = {name: simulate(g, segment_steps(g, cps)).totals.peak_ram_bytes for name, cps in chen_plans(g).items()}
    assert min(peaks.values()) <= 0.85 * ka, (model, ka, peaks)
    s = poet.solve(g, memory=min(peaks.values()), strategy="chen")
    assert s.status == HEURISTIC and s.totals.peak_ram_bytes <= 0.85 * ka


def test_chen_sqrt_plan_is_faithful_on_resnet18_cifar(r18):
    g = r18
    name, cps = next(iter(chen_plans(g).items()))
    assert name.startswith("sqrt(n)")
    assert set(cps) <= set(chain_cut_points(g))
    assert 5 <= len(cps) <= 12  # ~sqrt(69) segments
    steps = segment_steps(g, cps)
    t = validate(g, steps, Budget(10**12))
    assert t.peak_ram_bytes < 0.6 * keep_all_peak(g)  # 2.36 MB vs 4.75 MB
    # every forward node is recomputed at most once (one extra forward pass at most), nothing else
    counts = {}
    for s in steps:
        if s.op == "compute":
            counts[s.node] = counts.get(s.node, 0) + 1
    assert max(counts.values()) <= 2
    assert all(g.nodes[i].kind == "forward" for i, c in counts.items() if c > 1)
    assert t.recomputes <= len(g.forward_ids())
    # the checkpoints themselves are never recomputed
    assert all(counts[c] == 1 for c in cps)


def test_chen_is_honest_about_budgets(r18):
    g = r18
    best = min(simulate(g, segment_steps(g, c)).totals.peak_ram_bytes for c in chen_plans(g).values())
    s = poet.solve(g, memory=best - 1, strategy="chen")
    assert s.status == INFEASIBLE and not s.steps and "RAM" in s.report.message
    # recomputation costs time: at exactly one plain pass no plan fits
    s = poet.solve(g, memory=best, runtime="1.0x", strategy="chen")
    assert s.status == INFEASIBLE and "needs" in s.report.message
    s = poet.solve(g, memory=best, runtime="2x", strategy="chen")
    assert s.status == HEURISTIC and s.totals.runtime_s <= s.budget.runtime_s


@pytest.mark.parametrize("device", ["a72", "m4"])
def test_capuchin_fits_tight_budgets_with_valid_schedules(r18, device):
    g = costed_graph("resnet18_cifar", device)
    s = poet.solve(g, memory="40%", runtime="2x", strategy="capuchin")
    assert s.status == HEURISTIC
    assert s.totals.peak_ram_bytes <= s.budget.ram_bytes < keep_all_peak(g)
    assert s.totals.runtime_s <= s.budget.runtime_s
    assert s.totals.page_outs + s.totals.recomputes > 0
    assert s.energy_j < 1.2 * g.plain_energy_j


def test_capuchin_choice_follows_costs():
    # On the A72 paging a tensor costs millijoules while recomputing a conv costs joules:
    # swapping wins.  On the M4 the SD card is expensive and recomputing cheap layers wins.
    a72 = poet.solve("resnet18_cifar", "a72", memory="40%", runtime="2x", strategy="capuchin")
    m4 = poet.solve("resnet18_cifar", "m4", memory="40%", runtime="2x", strategy="capuchin")
    assert a72.report.strategy_facts["swap_evictions"] > a72.report.strategy_facts["recompute_evictions"]
    assert m4.report.strategy_facts["recompute_evictions"] > 0


def test_capuchin_is_honest_about_budgets(r18):
    g = r18
    s = poet.solve(g, memory="60%", runtime="1.0x", strategy="capuchin")  # no time for anything extra
    assert s.status == INFEASIBLE and not s.steps
    s = poet.solve(g, memory=g.min_ram_bytes() - 1, strategy="capuchin")
    assert s.status == INFEASIBLE
    s = poet.solve(g, memory="100%", runtime="1.0x", strategy="capuchin")  # keep-all fits: nothing evicted
    assert s.status == HEURISTIC and s.report.strategy_facts["evictions"] == 0
    assert s.energy_j == pytest.approx(g.plain_energy_j)


@pytest.mark.parametrize("mode", ["serial", "overlap", "hidden"])
def test_capuchin_respects_paging_time_models(mode):
    g = costed_graph("resnet18_cifar", "a72")
    s = poet.solve(g, memory="45%", runtime="1.1x", strategy="capuchin", paging_time=mode)
    if s.steps:
        assert s.totals.runtime_s <= s.budget.runtime_s * (1 + 1e-6)
        assert s.totals.peak_ram_bytes <= s.budget.ram_bytes
    else:
        assert s.status == INFEASIBLE


def _random_graph(seed: int, n_fwd: int) -> CostedGraph:
    """Random training-like DAG: forward chain with skips, backward reading random forward outputs."""
    rnd = random.Random(seed)

    def node(name, kind):
        return CostedNode(
            name,
            kind,
            rnd.randint(0, 5) * 100,
            rnd.uniform(0.1, 2),
            rnd.uniform(0.1, 3),
            rnd.uniform(0.01, 1),
            rnd.uniform(0.01, 2),
            rnd.uniform(0.01, 1),
            rnd.uniform(0.01, 2),
        )

    nodes = [node(f"f{i}", "forward") for i in range(n_fwd)]
    edges = set()
    for i in range(1, n_fwd):
        edges.add((i - 1, i))
        if i >= 2 and rnd.random() < 0.3:
            edges.add((rnd.randrange(0, i - 1), i))
    for j in range(n_fwd):
        b = n_fwd + j
        nodes.append(node(f"b{j}", "backward"))
        edges.add((b - 1, b))
        for _ in range(rnd.randint(0, 2)):
            edges.add((rnd.randrange(0, n_fwd), b))
    return CostedGraph(f"rand{seed}", tuple(nodes), tuple(sorted(edges)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(2, 9),
    frac=st.floats(0.05, 1.2),
    rt=st.sampled_from([None, 1.0, 1.3, 3.0]),
    mode=st.sampled_from(["serial", "overlap", "hidden"]),
)
def test_fixed_rules_are_valid_or_honestly_infeasible(seed, n, frac, rt, mode):
    g = _random_graph(seed, n)
    ram = max(1, int(frac * keep_all_peak(g)))
    runtime = None if rt is None else rt * g.plain_runtime_s
    for strategy in ("chen", "capuchin", "keep-all"):
        s = poet.solve(g, memory=ram, runtime=runtime, strategy=strategy, paging_time=mode)  # validated inside
        if s.steps:
            assert s.totals.peak_ram_bytes <= ram
            if runtime is not None:
                assert s.totals.runtime_s <= runtime * (1 + 1e-6)
        else:
            assert s.status == INFEASIBLE and s.report.message
    # plain backprop always fits its own peak, and the greedy then evicts nothing
    s = poet.solve(g, memory=keep_all_peak(g), runtime=runtime, strategy="capuchin", paging_time=mode)
    assert s.steps and s.energy_j == pytest.approx(g.plain_energy_j)


def test_capuchin_plan_stops_when_nothing_is_left():
    g = _random_graph(3, 6)
    found = capuchin_plan(g, Budget(ram_bytes=1, runtime_s=None))
    assert found.evictions <= found.candidates and found.stopped is None
    validate(g, found.steps, Budget(10**12))


def test_capuchin_stopped_by_its_time_limit_says_so_and_returns_no_schedule(r18):
    # resnet18_cifar at its smallest RAM needs dozens of eviction rounds; with no time for them the
    # strategy stops, claims nothing ("no_solution", not "infeasible") and never returns the
    # unfinished plan, which does not fit
    budget = int(r18.min_ram_bytes() * 1.1)
    full = poet.solve(r18, memory=budget, strategy="capuchin")
    assert full.steps and full.report.strategy_facts["rounds"] > 5
    s = poet.solve(r18, memory=budget, strategy="capuchin", time_limit=1e-9)
    assert s.status == "no_solution" and not s.steps
    assert "time limit" in s.report.message and "longer time limit" in s.report.message
    found = capuchin_plan(r18, Budget(budget), time_limit=1e-9)
    assert found.stopped and found.rounds == 1
