"""The retention-interval plan finder (CP-SAT): its plans are real, validated and never below the
exhaustive oracle, and with lives enough it reaches the oracle's optimum on small graphs."""

from __future__ import annotations

import os
import signal
import time

import pytest
from bruteforce import brute_force_energy
from conftest import random_dag, training_chain

from poet import solve
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.bounds import eviction_cover
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import emit, plan_costs

intervals = pytest.importorskip("poet.solve.search.intervals")
pytest.importorskip("ortools")


def _budget(g, frac, slack):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return Budget(int(lo + frac * (hi - lo)), None if slack is None else slack * g.plain_runtime_s, "serial")


@pytest.mark.parametrize(
    "layers,seed,frac,slack,skip",
    [(3, 1, 0.0, None, True), (3, 5, 0.4, 1.3, False), (4, 2, 0.0, 1.3, True), (4, 9, 0.4, None, True)],
)
def test_interval_plans_reach_the_oracle_on_small_chains(layers, seed, frac, slack, skip):
    g = training_chain(layers, seed, skip=skip)
    b = _budget(g, frac, slack)
    expected = brute_force_energy(g, b.ram_bytes, b.runtime_s)
    plan = intervals.interval_plan(g, b, time_limit=30.0, lives=3).plan
    if expected is None:
        assert plan is None
        return
    assert plan is not None
    validate(g, emit(g, plan), b)
    assert plan_costs(g, plan, b.paging_time)[0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["serial", "overlap"])
def test_interval_plans_equal_the_milp_optimum_on_random_dags(seed, mode):
    # random DAGs can beat the stage form (the oracle is not staged), so the reference is the MILP;
    # overlapped paging time is counted serially here (a restriction): never below it
    g = random_dag(seed, 9)
    b = _budget(g, 0.3, 1.4)
    b = Budget(b.ram_bytes, b.runtime_s, mode)
    ref = solve(
        g,
        memory=b.ram_bytes,
        runtime=b.runtime_s,
        paging_time=mode,
        gap=1e-9,
        method="faithful",
        find_min_budgets=False,
    )
    plan = intervals.interval_plan(g, b, time_limit=20.0, lives=3).plan
    if plan is None:
        assert mode == "overlap" or not ref.steps
        return
    validate(g, emit(g, plan), b)
    e = plan_costs(g, plan, b.paging_time)[0]
    assert e >= ref.totals.energy_j * (1 - 1e-7)
    if mode == "serial":
        assert e == pytest.approx(ref.totals.energy_j, rel=1e-7)


def test_a_plan_maps_onto_its_lives_and_back_at_the_same_cost():
    # the greedy's plan, as lives, is a complete solution hint: the search starts from it and
    # can only improve on it
    from poet.solve.api import costed_graph

    g = costed_graph("vgg16_cifar", "m4")
    b = _budget(g, 0.1, 1.2)
    guide = eviction_cover(g, b).guide
    start = best_greedy(g, b, guide=guide)
    lives, out_at = intervals.plan_lives(g, start)
    assert all(L and L[0][0] == "comp" and L[0][1] < L[0][2] for L in lives.values())
    assert all(a[2] <= b_[1] for L in lives.values() for a, b_ in zip(L, L[1:]))
    e0 = plan_costs(g, start, b.paging_time)[0]
    # the search stops at a plan of the start's cost (the hint itself, when it maps onto a solution): the
    # generous limit is for a loaded machine, not for improving on it, which this test does not ask
    plan = intervals.interval_plan(g, b, start=start, time_limit=30.0, target_energy=e0).plan
    assert plan is not None
    validate(g, emit(g, plan), b)
    assert plan_costs(g, plan, b.paging_time)[0] <= e0 * (1 + 1e-9)


def test_the_solve_runs_the_interval_search_after_the_guide_search_and_returns_a_validated_plan():
    from poet.solve import SolveOptions, SolvePolicy, costed_graph, solve_costed

    g = costed_graph("resnet18_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    seen = []
    policy = SolvePolicy(interval_min_rest_s=0.0)  # the real gate needs a 30-s limit
    s = solve_costed(
        g,
        b,
        "poet",
        SolveOptions(time_limit_s=8, threads=2, gap=1e-4, find_min_budgets=False, progress=seen.append, policy=policy),
    )
    info = s.report.phase("interval search").facts
    cp = [d for d in seen if d["phase"] == "interval search"]
    assert cp and all(d["objective"] <= info["start_energy_j"] and d["bound"] <= d["objective"] for d in cp)
    if info["cp_status"] in ("FEASIBLE", "OPTIMAL"):
        assert len(cp) >= 2  # the start, then each solution CP-SAT finds (the hint, at least)
    assert info["cp_variables"] > 0 and info["cp_status"] in ("FEASIBLE", "OPTIMAL", "UNKNOWN")
    assert info["energy_j"] <= info["start_energy_j"]
    if s.report.method == "window re-solve":  # the window polish after it found a cheaper schedule
        assert s.report.phase("window polish").facts and s.totals.energy_j < info["energy_j"]
    else:
        assert s.report.method in ("greedy", "intervals")
        assert s.totals.energy_j == pytest.approx(s.report.heuristic_energy_j, rel=1e-9)
        assert s.totals.energy_j == pytest.approx(info["energy_j"])
    t = validate(g, s.steps, b)
    assert t.energy_j == pytest.approx(s.totals.energy_j, rel=1e-9)


def test_after_the_interval_search_a_milp_that_cannot_start_is_not_even_built(monkeypatch):
    import time

    from poet.solve import SolveOptions, SolvePolicy, costed_graph, solve_costed

    real, late = intervals.interval_plan, [0.0]

    def then_the_time_is_up(*a, **k):
        got = real(*a, **k)
        late[0] = 6.0  # the clock jumps past the time limit: no time is left to set up a MILP
        return got

    monkeypatch.setattr(intervals, "interval_plan", then_the_time_is_up)
    g = costed_graph("resnet18_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    # the MILP fits the time left by the estimate until the search ends: it is not built early
    policy = SolvePolicy(interval_min_rest_s=0.0, milp_setup_s_per_nonzero=1e-9)
    s = solve_costed(
        g,
        b,
        "poet",
        SolveOptions(
            time_limit_s=6,
            threads=2,
            gap=1e-4,
            find_min_budgets=False,
            policy=policy,
            clock=lambda: time.perf_counter() + late[0],
        ),
    )
    assert s.report.phase("interval search") is not None and s.report.phase("MILP build") is None  # never built
    assert s.report.milp_skipped and s.report.method in ("greedy", "intervals")
    nonzeros = policy.milp_nonzeros_per_node_squared * len(g.nodes) ** 2
    assert f"a MILP of about {nonzeros:,} nonzeros" in s.report.message
    validate(g, s.steps, b)


def test_without_ortools_the_solve_skips_the_interval_search(monkeypatch):
    from poet.solve import SolveOptions, SolvePolicy, costed_graph, solve_costed

    monkeypatch.setattr(intervals, "available", lambda: False)
    g = costed_graph("resnet18_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    s = solve_costed(
        g,
        b,
        "poet",
        SolveOptions(
            time_limit_s=4, threads=2, gap=1e-4, find_min_budgets=False, policy=SolvePolicy(interval_min_rest_s=0.0)
        ),
    )
    assert s.report.phase("interval search") is None and s.report.method in ("greedy", "milp-fast")
    validate(g, s.steps, b)


@pytest.mark.parametrize("kw", [{"paging": False}, {"remat": False}])
def test_single_technique_interval_plans_use_only_it_and_reach_the_oracle(kw):
    g = training_chain(4, 3, skip=True)
    b = _budget(g, 0.0, 1.5)
    expected = brute_force_energy(g, b.ram_bytes, b.runtime_s, **kw)
    plan = intervals.interval_plan(g, b, time_limit=30.0, lives=3, **kw).plan
    assert (plan is None) == (expected is None)
    if plan is None:
        return
    paged = any(plan.ins[t] or plan.outs[t] for t in range(plan.n))
    recomputed = any(k != t for t in range(plan.n) for k in plan.comp[t])
    assert not paged if not kw.get("paging", True) else not recomputed
    validate(g, emit(g, plan), b)
    assert plan_costs(g, plan, b.paging_time)[0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("model,frac", [("vgg16_cifar", 0.1), ("resnet18_cifar", 0.3), ("linear", 0.1)])
def test_every_greedy_plan_is_a_solution_of_the_interval_model_at_its_own_cost(model, frac):
    # the model holds every stage plan the greedy makes: fixed to a plan's lives, CP-SAT finds it
    # feasible (RAM, inputs, deadline) and prices it as plan_costs does
    from ortools.sat.python import cp_model

    from poet.solve.api import costed_graph

    g = costed_graph(model, "m4")
    b = _budget(g, frac, 1.2)
    guide = eviction_cover(g, b).guide
    plans: list = []
    best_greedy(g, b, guide=guide, per_rule=plans)
    assert len(plans) >= 3
    for p in plans:
        lives, out_at = intervals.plan_lives(g, p)
        m = intervals._Model(g, b, {i: max(2, len(L) - 1) for i, L in lives.items()}, True, True)
        m.hint(lives, out_at)
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = 20
        solver.parameters.catch_sigint_signal = False  # else it leaves SIGINT at the default (below)
        assert solver.Solve(m.m) == cp_model.OPTIMAL
        extra = (plan_costs(g, p, b.paging_time)[0] - g.plain_energy_j) / g.plain_energy_j
        assert solver.ObjectiveValue() / intervals.OBJ_SCALE == pytest.approx(extra, abs=1e-5)


def _sigint_caught() -> bool:
    """Does this process catch SIGINT at the system level (Linux: /proc/self/status SigCgt)?"""
    with open("/proc/self/status") as f:
        caught = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGINT - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_the_interval_search_leaves_ctrl_c_to_python():
    # CP-SAT's own SIGINT handler, once it goes, leaves SIGINT at the system default: a later Ctrl-C
    # would kill the process outright instead of raising KeyboardInterrupt
    # caught and unblocked, whatever ran before in this process
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        _search_and_check_ctrl_c()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, previous)


def _search_and_check_ctrl_c() -> None:
    assert _sigint_caught()
    g = training_chain(6, 1)
    b = _budget(g, 0.6, 1.5)
    for stop in (None, lambda: False):
        intervals.interval_plan(g, b, time_limit=5.0, lives=2, stop=stop)
        assert _sigint_caught(), "after the interval search SIGINT no longer reaches Python"
    with pytest.raises(KeyboardInterrupt):  # and a Ctrl-C is Python's KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):
            time.sleep(0.01)
