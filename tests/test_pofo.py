"""POFO's dynamic program for chains: optimal against the exhaustive search, valid, and a clear
refusal of graphs that are not chains."""

import dataclasses

import pytest
from bruteforce import brute_force_energy
from conftest import random_dag, relu_chain, training_chain

from poet import solve
from poet.graph.core import CostedGraph
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.baselines.chain import NotAChain, read_chain
from poet.solve.baselines.pofo import pofo_plan

CHAINS = [(training_chain, n, seed) for n in (2, 3, 4) for seed in range(6)] + [
    (relu_chain, n, seed) for n in (1, 2) for seed in range(6)
]


def _budgets(g):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return sorted({int(lo + f * (hi - lo)) for f in (0.0, 0.25, 0.6, 1.0)})


def _time_as_energy(g: CostedGraph) -> CostedGraph:
    """The same chain with each operation's energy set to its time: least energy = least serial time."""
    nodes = [
        dataclasses.replace(
            nd, compute_energy_j=nd.compute_time_s, pagein_energy_j=nd.pagein_time_s, pageout_energy_j=nd.pageout_time_s
        )
        for nd in g.nodes
    ]
    return CostedGraph(g.name, tuple(nodes), g.edges)


@pytest.mark.parametrize("maker,n,seed", CHAINS)
def test_pofo_least_energy_equals_the_exhaustive_search_on_small_chains(maker, n, seed):
    # POFO offloads activations, never gradients (as published): the oracle gets the same freedom
    g = maker(n, seed)
    for ram in _budgets(g):
        best = brute_force_energy(g, ram, None, pageable=set(g.forward_ids()))
        plan = pofo_plan(g, ram, objective="energy")
        assert plan.exact
        if best is None:
            assert not plan.steps
            continue
        totals = validate(g, plan.steps, Budget(ram_bytes=ram))
        assert totals.energy_j == pytest.approx(best, rel=1e-7), (maker.__name__, n, seed, ram)
        assert plan.objective == pytest.approx(totals.energy_j, rel=1e-6)  # the tables price what runs
        assert totals.energy_j >= brute_force_energy(g, ram, None) - 1e-9  # and no schedule beats the oracle


@pytest.mark.parametrize("maker,n,seed", CHAINS[::3])
def test_pofo_fastest_schedule_equals_the_exhaustive_search(maker, n, seed):
    g = maker(n, seed)
    as_energy = _time_as_energy(g)
    for ram in _budgets(g):
        best = brute_force_energy(as_energy, ram, None, pageable=set(g.forward_ids()))
        plan = pofo_plan(g, ram, objective="time", paging_time="serial")
        if best is None:
            assert not plan.steps
            continue
        totals = validate(g, plan.steps, Budget(ram_bytes=ram, paging_time="serial"))
        assert totals.runtime_s == pytest.approx(best, rel=1e-6)


def test_pofo_with_hidden_paging_time_offloads_instead_of_recomputing():
    g = training_chain(4, 3)
    ram = g.min_ram_bytes()
    hidden = pofo_plan(g, ram, objective="time", paging_time="hidden")
    totals = validate(g, hidden.steps, Budget(ram_bytes=ram, paging_time="hidden"))
    assert totals.recomputes == 0 and totals.page_outs > 0  # paging takes no time: never recompute
    assert totals.runtime_s == pytest.approx(g.plain_runtime_s)


def test_a_coarse_memory_resolution_stays_within_the_budget():
    g = training_chain(4, 1)
    for ram in _budgets(g):
        plan = pofo_plan(g, ram, objective="energy", max_slots=7)
        if plan.steps:
            assert validate(g, plan.steps, Budget(ram_bytes=ram)).peak_ram_bytes <= ram
        assert not plan.exact or plan.slots <= 7


def test_pofo_strategy_on_a_zoo_chain_is_valid_and_judged_against_the_deadline():
    s = solve("vgg16_cifar", "m4", memory="1.0MB", runtime="1.5x", strategy="pofo")
    assert s.status == "heuristic" and s.steps
    assert validate(s.graph, s.steps, s.budget).peak_ram_bytes <= 1_000_000
    tight = solve("vgg16_cifar", "m4", memory=s.graph.min_ram_bytes(), runtime="1.0001x", strategy="pofo")
    assert tight.status == "infeasible" and not tight.steps


def test_pofo_refuses_a_residual_network_naming_its_first_branch_point():
    s = solve("resnet18_cifar", "m4", memory="40%", strategy="pofo")
    assert s.status == "infeasible" and not s.steps
    assert "not a chain" in s.report.message
    assert "node 2 (relu1) has more than one successor" in s.report.message


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_are_refused_with_the_node_named(seed):
    g = random_dag(seed, 9)
    with pytest.raises(NotAChain, match=r"node \d+ \(n\d+\)"):
        read_chain(g)
    s = solve(g, memory=keep_all_peak(g), strategy="pofo")
    assert s.status == "infeasible" and "not a chain: node" in s.report.message


def test_the_zoo_chains_are_read_as_chains():
    from poet.solve.api import costed_graph

    for model in ("linear", "vgg16", "vgg16_cifar"):
        c = read_chain(costed_graph(model, "m4"))
        assert c.layers * 2 == len(costed_graph(model, "m4").nodes)
    with pytest.raises(NotAChain, match="more than one successor"):
        read_chain(costed_graph("bert", "m4"))


def test_pofo_stops_when_asked():
    s = solve("vgg16", "jetsontx2", memory="100%", strategy="pofo", stop=lambda: True)
    assert s.status == "no_solution" and "stop request" in s.report.message
