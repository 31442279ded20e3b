"""The MILP strategies against an exhaustive oracle, each other, and the validator."""

import math
import random

import pytest
from bruteforce import brute_force_energy
from conftest import random_dag, relu_chain, training_chain
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from poet import solve
from poet.graph.core import CostedGraph
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak

MILPS = {"poet": {}, "remat": {"paging": False}, "paging": {"remat": False}}


def _budget(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return max(1, int(lo + frac * (hi - lo)))  # budgets are positive; all-zero-byte graphs exist


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(2, 4),
    frac=st.sampled_from([0.0, 0.3, 0.6, 1.0]),
    slack=st.sampled_from([None, 1.05, 1.3, 2.0]),
    skip=st.booleans(),
    strategy=st.sampled_from(sorted(MILPS)),
)
# HiGHS's presolve stops this one with "Solve error" (the backend then solves without presolve)
@example(seed=3487, layers=3, frac=0.6, slack=1.3, skip=False, strategy="remat")
def test_milp_optimum_equals_exhaustive_search(seed, layers, frac, slack, skip, strategy):
    g = training_chain(layers, seed, skip=skip)
    ram = _budget(g, frac)
    rt = None if slack is None else slack * g.plain_runtime_s
    expected = brute_force_energy(g, ram, rt, **MILPS[strategy])
    s = solve(g, memory=ram, runtime=rt, strategy=strategy, gap=1e-9, find_min_budgets=False)
    if expected is None:
        assert s.status == "infeasible" and not s.steps
    else:
        assert s.status == "optimal", s.report
        assert s.totals.energy_j == pytest.approx(expected, rel=1e-7)


def test_hidden_paging_time_matches_oracle_without_paging_time():
    g = training_chain(4, 7)
    ram = _budget(g, 0.0)
    rt = 1.02 * g.plain_runtime_s  # too tight to page with serial paging time, fine when hidden
    exp = brute_force_energy(g, ram, rt, count_paging_time=False)
    s = solve(g, memory=ram, runtime=rt, paging_time="hidden", gap=1e-9, find_min_budgets=False)
    assert exp is not None and s.status == "optimal"
    assert s.totals.energy_j == pytest.approx(exp, rel=1e-7)
    serial = solve(g, memory=ram, runtime=rt, paging_time="serial", gap=1e-9, find_min_budgets=False)
    assert (not serial.feasible) or serial.totals.energy_j >= s.totals.energy_j - 1e-9


def _random_dag(seed: int, n: int) -> CostedGraph:
    return random_dag(seed, n, fixed_ram_bytes=random.Random(seed).choice([0, 100]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(3, 10),
    frac=st.floats(0.0, 1.0),
    slack=st.sampled_from([None, 1.1, 1.5, 3.0]),
    mode=st.sampled_from(["serial", "overlap", "hidden"]),
    strategy=st.sampled_from(["poet", "remat", "paging", "keep-all", "chen"]),
)
def test_every_emitted_schedule_validates_within_budgets(seed, n, frac, slack, mode, strategy):
    g = _random_dag(seed, n)
    ram = _budget(g, frac)
    rt = None if slack is None else slack * g.plain_runtime_s
    s = solve(g, memory=ram, runtime=rt, strategy=strategy, paging_time=mode, find_min_budgets=False)
    if s.feasible:
        # re-validate independently of what solve() did, against the stated budgets
        t = validate(g, s.steps, Budget(ram, rt, mode))
        assert t.peak_ram_bytes <= ram
        assert rt is None or t.runtime_s <= rt * (1 + 1e-6)
        assert t.energy_j >= g.plain_energy_j - 1e-9  # every node computed at least once
        assert s.status in ("optimal", "feasible", "heuristic")
    else:
        assert s.status in ("infeasible", "no_solution") and s.report.message


@pytest.mark.parametrize("seed", range(6))
def test_joint_never_worse_than_either_technique_alone(seed):
    g = training_chain(5, seed, skip=True)
    for frac in (0.1, 0.4, 0.8):
        ram = _budget(g, frac)
        for slack in (1.2, 2.0):
            res = {
                s: solve(g, memory=ram, runtime=f"{slack}x", strategy=s, gap=1e-9, find_min_budgets=False)
                for s in ("poet", "remat", "paging")
            }
            for single in ("remat", "paging"):
                if res[single].feasible:
                    assert res["poet"].feasible
                    assert res["poet"].totals.energy_j <= res[single].totals.energy_j * (1 + 1e-7)


def test_keep_all_budget_gives_plain_energy():
    g = training_chain(4, 3)
    s = solve(g, memory=keep_all_peak(g), strategy="poet", gap=1e-9)
    assert s.status == "optimal"
    assert s.totals.energy_j == pytest.approx(g.plain_energy_j)
    assert s.totals.recomputes == 0 and s.totals.page_outs == 0


def test_tight_budget_forces_paging_or_remat_and_reports_both_in_totals():
    g = training_chain(5, 11)
    s = solve(g, memory=g.min_ram_bytes(), runtime=None, strategy="poet", gap=1e-9)
    assert s.status == "optimal"
    assert s.totals.peak_ram_bytes <= g.min_ram_bytes()
    assert s.totals.recomputes + s.totals.page_ins > 0
    assert s.totals.energy_j == pytest.approx(s.totals.compute_energy_j + s.totals.paging_energy_j)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(2, 4),
    frac=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    skip=st.booleans(),
    strategy=st.sampled_from(sorted(MILPS)),
)
def test_structural_lower_bound_never_exceeds_the_true_optimum(seed, layers, frac, skip, strategy):
    from poet.solve.bounds import lower_bound_energy

    g = training_chain(layers, seed, skip=skip)
    ram = _budget(g, frac)
    best = brute_force_energy(g, ram, None, **MILPS[strategy])
    lb = lower_bound_energy(g, Budget(ram), **MILPS[strategy])
    if best is None:
        return
    assert g.plain_energy_j <= lb <= best * (1 + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(2, 4),
    frac=st.sampled_from([0.0, 0.2, 0.5]),
    skip=st.booleans(),
    slack=st.sampled_from([0.05, 0.3, 1.0]),
    strategy=st.sampled_from(sorted(MILPS)),
)
def test_structural_lower_bound_with_a_deadline_never_exceeds_the_true_optimum(
    seed, layers, frac, skip, slack, strategy
):
    # the cascade rows and the runtime row must stay valid when time is scarce too
    from poet.solve.bounds import lower_bound_energy

    g = training_chain(layers, seed, skip=skip)
    ram = _budget(g, frac)
    runtime = g.plain_runtime_s * (1 + slack)
    best = brute_force_energy(g, ram, runtime, **MILPS[strategy])
    lb = lower_bound_energy(g, Budget(ram, runtime), **MILPS[strategy])
    if best is None:
        return
    assert g.plain_energy_j <= lb <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed", [1, 6, 7, 11])
@pytest.mark.parametrize("slack", [None, 0.1])
@pytest.mark.parametrize("strategy", sorted(MILPS))
def test_eviction_cover_with_cascades_never_exceeds_the_true_optimum(seed, slack, strategy):
    # relu_chain's conv and bias outputs are dead once the ReLU ran: recomputing a ReLU output
    # means recomputing its block, which the bound prices; it must stay below the exhaustive optimum
    from poet.solve.bounds import lower_bound_energy

    g = relu_chain(2, seed)
    ram = g.min_ram_bytes()
    runtime = None if slack is None else g.plain_runtime_s * (1 + slack)
    best = brute_force_energy(g, ram, runtime, **MILPS[strategy])
    lb = lower_bound_energy(g, Budget(ram, runtime), **MILPS[strategy])
    if best is None:
        assert lb == math.inf or lb >= g.plain_energy_j
        return
    assert g.plain_energy_j <= lb <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed", [1, 4, 10])
def test_eviction_cover_prices_recomputation_cascades_exactly_on_small_blocks(seed):
    # here the cheapest fit recomputes whole conv-bias-relu blocks; pricing only the ReLU
    # (the old cover) would leave the bound far below the optimum
    from poet.solve.bounds import eviction_cover

    g = relu_chain(2, seed)
    ram = g.min_ram_bytes()
    best = brute_force_energy(g, ram, None)
    cover = eviction_cover(g, Budget(ram))
    lb, guide = cover.bound, cover.guide
    assert best > g.plain_energy_j * 1.05
    assert lb == pytest.approx(best, rel=1e-5)
    assert guide, "the evictions that attain the bound are returned as a guide"


@pytest.mark.parametrize("seed", [1, 6, 7, 11])
def test_cover_with_its_chains_cut_short_stays_a_valid_bound(seed):
    # where chains are very many the cover follows a recomputation's dead inputs policy.cover_chain_depth
    # links deep (a backward pass's gradient chains run hundreds deep); cutting a chain drops
    # constraints, so the bound can only fall, never past the optimum.  relu_chain's blocks are
    # two links deep: cut at one, the conv output no longer has to come back with the ReLU's
    from poet.solve.bounds import eviction_cover
    from poet.solve.policy import SolvePolicy

    g = relu_chain(2, seed)
    b = Budget(g.min_ram_bytes())
    best = brute_force_energy(g, b.ram_bytes, None)
    full = eviction_cover(g, b).bound
    cut = eviction_cover(g, b, policy=SolvePolicy(cover_chain_depth=1, cover_max_links=0)).bound  # however few
    assert g.plain_energy_j <= cut <= full + SolvePolicy().cover_abs_gap * g.plain_energy_j
    assert cut <= best * (1 + 1e-9)
    if seed == 1:
        assert cut < full * 0.95


@pytest.mark.parametrize("seed", [0, 1, 4, 6, 7, 11])
@pytest.mark.parametrize("strategy", sorted(MILPS))
def test_eviction_cover_runtime_bound_never_exceeds_the_shortest_schedule(seed, strategy):
    from poet.solve.bounds import eviction_cover
    from poet.solve.lp import solve_highs
    from poet.solve.milp import build

    g = relu_chain(2, seed)
    b = Budget(g.min_ram_bytes())
    t_min = eviction_cover(g, b, objective="time", **MILPS[strategy]).bound
    f = build(g, b, objective="runtime", **MILPS[strategy])
    r = solve_highs(f.problem, gap=1e-9)
    if r.x is None:
        return
    shortest = r.objective * g.plain_runtime_s
    assert g.plain_runtime_s * (1 - 1e-9) <= t_min <= shortest * (1 + 1e-6)
