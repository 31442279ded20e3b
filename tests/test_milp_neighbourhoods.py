"""The neighbourhood search on the MILP's columns (poet/solve/milp/neighbourhoods.py) and its rounds with
CP-SAT in the MILP phase: it never worsens the solution it starts from, what it returns is a solution of
the MILP whose schedule the validator accepts at the price the MILP says, it refuses a start that is not a
solution, and it holds its time limit and a stop."""

from __future__ import annotations

import dataclasses
import sys
import time
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import poet
from poet.schedule import validate
from poet.solve.lp.problem import max_violation
from poet.solve.milp import build, decode, plan_to_start
from poet.solve.milp.neighbourhoods import ColumnIndex, improve_by_neighbourhoods
from poet.solve.policy import SolvePolicy
from poet.solve.search.greedy import best_greedy
from poet.solve.stage.emit import emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import tiled_truth  # noqa: E402

pytest.importorskip("ortools")  # the search solves its sub-MILPs on CP-SAT


def tiled(name: str):
    """A bench/tiled_truth.py row's graph and its RAM budget."""
    return tiled_truth.instance_graph(name), tiled_truth.INSTANCES[name][2]


@cache
def instance(name: str):
    """The costed graph, budget and MILP of a bench/tiled_truth.py row, and a first solution of the MILP:
    the greedy rules' cheapest plan (on these rows far above the best known)."""
    graph, memory = tiled(name)
    s = poet.solve(graph, "m4", memory=memory, runtime="3x", method="heuristic", time_limit=5, find_min_budgets=False)
    return (s.graph, s.budget, *first_solution(s.graph, s.budget))


def first_solution(g, budget):
    """The MILP and the greedy rules' plan written into its columns (None when no rule meets the budgets)."""
    f = build(g, budget, tighten=True)
    plan = best_greedy(g, budget, time_limit=10.0)
    x = plan_to_start(f, g, plan)[0] if plan is not None else None
    return f, x


def priced(g, budget, f, x) -> float:
    """The validator's energy of the schedule the solution decodes to."""
    return validate(g, emit(g, decode(f, x)), budget).energy_j


@pytest.mark.parametrize("name", ["cnn2-t2", "resnet-t2"])
def test_neighbourhoods_never_worsen_the_start_and_stay_a_valid_schedule(name):
    g, budget, f, x = instance(name)
    start = float(f.problem.c @ x)
    run = improve_by_neighbourhoods(f, g, x, time_limit=8.0, seed=3)
    assert run.tried > 0
    assert run.objective <= start + 1e-12
    assert run.objective == pytest.approx(float(f.problem.c @ run.x))
    assert max_violation(f.problem, run.x) <= 1e-7
    assert priced(g, budget, f, run.x) == pytest.approx(run.objective * f.energy_unit, rel=1e-6)
    if run.improved:
        assert run.objective < start


def test_neighbourhoods_improve_a_first_incumbent():
    # the rules' plan on cnn2-t2 is far above the best schedule known (0.42 mJ): a few seconds of
    # neighbourhoods find a cheaper one, which the validator prices as the MILP does
    g, budget, f, x = instance("cnn2-t2")
    before = priced(g, budget, f, x)
    run = improve_by_neighbourhoods(f, g, x, time_limit=10.0, seed=0)
    assert run.improved > 0
    assert priced(g, budget, f, run.x) < before


def test_a_cluster_frees_every_column_about_its_nodes_and_a_run_its_stages():
    import random

    g, _, f, _ = instance("cnn2-t2")
    index = ColumnIndex(f)
    free = index.cluster(g, random.Random(0), 6)
    chosen = [i for i in range(f.T) if len(index.about[i]) and free[index.about[i]].all()]
    assert 4 <= len(chosen) <= 6
    for i in chosen:  # the node's computations at every stage are freed
        cols = f.R[:, i][f.R[:, i] >= 0]
        assert free[cols].all()
    run = index.stages(f.T, random.Random(1))
    stages = set(index.stage[run].tolist())
    assert 3 <= len(stages) <= 12 and max(stages) - min(stages) == len(stages) - 1


def test_a_swap_frees_some_paged_tensors_and_a_small_cluster():
    import random

    g, _, f, x = instance("resnet-t2")
    index = ColumnIndex(f)
    paged = {i for i in range(f.T) if np.any(f.O[:, i] >= 0) and np.any(x[f.O[:, i][f.O[:, i] >= 0]] > 0.5)}
    assert paged  # the rules' plan pages on this row
    free = index.swap(g, random.Random(3), x)
    chosen = {i for i in range(f.T) if len(index.about[i]) and free[index.about[i]].all()}
    assert len(paged & chosen) >= min(len(paged), 4)  # four paged tensors drawn (the cluster may hold more)
    assert len(chosen) <= 4 + 6  # and a cluster of at most six nodes


def test_a_start_that_breaks_a_row_is_refused():
    g, _, f, x = instance("cnn2-t2")
    broken = np.zeros_like(x)
    with pytest.raises(ValueError, match="needs a solution of the MILP"):
        improve_by_neighbourhoods(f, g, broken, time_limit=1.0)


def test_the_search_holds_its_time_limit_and_a_stop():
    g, _, f, x = instance("resnet-t2")
    t0 = time.perf_counter()
    run = improve_by_neighbourhoods(f, g, x, time_limit=1.0)
    assert time.perf_counter() - t0 < 3.0  # each sub-MILP ends by the time left
    stopped = improve_by_neighbourhoods(f, g, x, time_limit=60.0, stop=lambda: True)
    assert stopped.tried == 0 and np.array_equal(stopped.x, x)
    assert run.objective <= float(f.problem.c @ x) + 1e-12


def solve_warm(graph, memory, limit, policy):
    policy = dataclasses.replace(policy, reader_gap_share=0.0)
    return poet.solve(
        graph, "m4", memory=memory, runtime="3x", method="warm", time_limit=limit, find_min_budgets=False, policy=policy
    )


def test_the_milp_phase_runs_rounds_of_cpsat_and_neighbourhoods_on_small_tiled_graphs():
    graph, memory = tiled("cnn2-t2")
    s = solve_warm(graph, memory, 8, SolvePolicy(tiled_neighbourhood_round_s=2.0))
    rec = next(p for p in s.report.phases if p.name == "MILP")
    assert "rounds" in rec.facts["neighbourhoods"]
    assert rec.facts["found_by"] in ("CP-SAT", "HiGHS", "neighbourhoods")
    energy = validate(s.graph, s.steps, s.budget).energy_j
    assert energy <= rec.energy_j * (1 + 1e-9)  # never above the plan the phase began from
    assert s.report.bound_energy_j <= energy * (1 + 1e-9)
    off = solve_warm(graph, memory, 4, SolvePolicy(tiled_neighbourhood_share=0.0))
    rec_off = next(p for p in off.report.phases if p.name == "MILP")
    assert "neighbourhoods" not in rec_off.facts
    validate(off.graph, off.steps, off.budget)


def test_on_generated_graphs_the_search_keeps_a_valid_schedule_at_the_price_it_says():
    from conftest import random_dag

    from poet.schedule import Budget
    from poet.solve.baselines import keep_all_peak

    ran = 0
    for seed in range(8):
        g = random_dag(100 + seed, 24)
        lo, hi = g.min_ram_bytes(), keep_all_peak(g)
        budget = Budget(int(lo + 0.3 * (hi - lo)), 2.0 * g.plain_runtime_s)
        f, x = first_solution(g, budget)
        if x is None:
            continue
        ran += 1
        run = improve_by_neighbourhoods(f, g, x, time_limit=1.5, seed=seed)
        assert run.objective <= float(f.problem.c @ x) + 1e-12
        assert max_violation(f.problem, run.x) <= 1e-7
        assert priced(g, budget, f, run.x) == pytest.approx(run.objective * f.energy_unit, rel=1e-6)
    assert ran >= 4
