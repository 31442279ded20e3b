"""Capuchin's published hybrid policy: valid or honestly infeasible, and it chooses by time."""

import dataclasses

import pytest
from conftest import random_dag, training_chain

from poet import solve
from poet.graph.core import CostedGraph
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.baselines.capuchin_paper import capuchin_paper_plan


@pytest.mark.parametrize("mode", ["serial", "overlap", "hidden"])
@pytest.mark.parametrize("seed", range(5))
def test_capuchin_paper_is_valid_or_honestly_infeasible(seed, mode):
    g = random_dag(seed, 12)
    ram = int(g.min_ram_bytes() + 0.3 * (keep_all_peak(g) - g.min_ram_bytes()))
    s = solve(g, memory=ram, runtime="2x", paging_time=mode, strategy="capuchin-paper")
    if s.steps:
        assert s.status == "heuristic"
        t = validate(g, s.steps, Budget(ram_bytes=ram, runtime_s=2 * g.plain_runtime_s, paging_time=mode))
        assert t.peak_ram_bytes <= ram
    else:
        assert s.status in ("infeasible", "no_solution") and s.report.message


def _priced(g: CostedGraph, *, page_time: float, page_energy: float) -> CostedGraph:
    nodes = [
        dataclasses.replace(
            nd,
            pagein_time_s=page_time,
            pageout_time_s=page_time,
            pagein_energy_j=page_energy,
            pageout_energy_j=page_energy,
        )
        for nd in g.nodes
    ]
    return CostedGraph(g.name, tuple(nodes), g.edges)


def test_the_published_policy_chooses_by_time_where_the_variant_chooses_by_energy():
    # paging is fast but costly in energy: Capuchin (time only) swaps, the energy variant recomputes
    g = _priced(training_chain(4, 2), page_time=1e-4, page_energy=50.0)
    ram = g.min_ram_bytes()
    paper = solve(g, memory=ram, strategy="capuchin-paper")
    variant = solve(g, memory=ram, strategy="capuchin")
    assert paper.steps and variant.steps
    assert paper.totals.page_outs > 0 and variant.totals.page_outs == 0
    assert paper.totals.energy_j > variant.totals.energy_j


def test_with_hidden_paging_every_eviction_is_a_free_swap():
    g = training_chain(4, 5)
    ram = g.min_ram_bytes()
    steps, info = capuchin_paper_plan(g, Budget(ram_bytes=ram, paging_time="hidden"))
    assert info["recompute_evictions"] == 0 and info["swap_evictions"] > 0
    assert validate(g, steps, Budget(ram_bytes=ram, paging_time="hidden")).recomputes == 0


def test_capuchin_paper_ignores_the_deadline_and_is_judged_against_it():
    g = _priced(training_chain(4, 2), page_time=5.0, page_energy=0.01)
    ram = g.min_ram_bytes()
    s = solve(g, memory=ram, runtime="1.01x", strategy="capuchin-paper")
    assert s.status == "infeasible" and "needs" in s.report.message
