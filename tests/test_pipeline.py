"""What `poet solve` runs (poet.solve.phases): every method against the faithful MILP and the exhaustive
oracle, the time policy (a SolvePolicy and a fake clock, not patched constants), and the order of the phases.

No timing assertions: only that every method returns a validated schedule, that the exact methods reach
the same optimum, and that the heuristic is honest about its gap (measured against a valid lower bound).
"""

import math

import pytest
from bruteforce import brute_force_energy
from conftest import random_dag, training_chain

from poet import solve
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import emit, plan_costs

EXACT = ("faithful", "warm", "fast", "auto")


def _ram(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


_dag = random_dag


CASES = [
    (layers, seed, frac, slack, skip)
    for layers, seed in ((3, 1), (3, 5), (4, 2), (4, 9))
    for frac in (0.0, 0.4)
    for slack in (None, 1.3)
    for skip in (False, True)
]


@pytest.mark.parametrize("layers,seed,frac,slack,skip", CASES)
def test_exact_methods_equal_oracle(layers, seed, frac, slack, skip):
    g = training_chain(layers, seed, skip=skip)
    ram = _ram(g, frac)
    rt = None if slack is None else slack * g.plain_runtime_s
    expected = brute_force_energy(g, ram, rt)
    for method in EXACT:
        s = solve(g, memory=ram, runtime=rt, gap=1e-9, method=method, find_min_budgets=False)
        assert s.report.method, method
        if expected is None:
            assert not s.steps and s.status in ("infeasible", "no_solution"), (method, s.report)
        else:
            assert s.status == "optimal", (method, s.report)
            assert s.totals.energy_j == pytest.approx(expected, rel=1e-7), (method, s.report)


@pytest.mark.parametrize("strategy,kw", [("remat", {"paging": False}), ("paging", {"remat": False})])
@pytest.mark.parametrize("seed", [0, 3])
def test_fast_single_technique_equals_oracle(strategy, kw, seed):
    g = training_chain(4, seed, skip=True)
    for frac in (0.0, 0.5):
        ram = _ram(g, frac)
        rt = 1.5 * g.plain_runtime_s
        expected = brute_force_energy(g, ram, rt, **kw)
        s = solve(g, memory=ram, runtime=rt, strategy=strategy, gap=1e-9, method="fast", find_min_budgets=False)
        if expected is None:
            assert not s.steps
        else:
            assert s.status == "optimal" and s.totals.energy_j == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mode", ["serial", "overlap", "hidden"])
def test_fast_equals_faithful_on_random_dags(seed, mode):
    g = _dag(seed, 9)
    ram = _ram(g, 0.3)
    rt = 1.5 * g.plain_runtime_s
    a = solve(g, memory=ram, runtime=rt, paging_time=mode, gap=1e-9, method="faithful", find_min_budgets=False)
    b = solve(g, memory=ram, runtime=rt, paging_time=mode, gap=1e-9, method="fast", find_min_budgets=False)
    assert a.status == b.status
    if a.steps:
        assert b.totals.energy_j == pytest.approx(a.totals.energy_j, rel=1e-7)


def test_heuristic_reports_an_honest_gap():
    g = training_chain(4, 2, skip=True)
    ram = _ram(g, 0.2)
    exact = solve(g, memory=ram, gap=1e-9, method="faithful", find_min_budgets=False)
    h = solve(g, memory=ram, method="heuristic", find_min_budgets=False)
    assert h.steps and h.status in ("feasible", "optimal")
    lb = h.report.bound_energy_j
    assert lb <= exact.totals.energy_j * (1 + 1e-9)  # a valid bound
    assert h.totals.energy_j >= exact.totals.energy_j * (1 - 1e-9)
    assert h.report.gap == pytest.approx((h.totals.energy_j - lb) / h.totals.energy_j)


def test_time_limit_returns_best_schedule_with_gap():
    from poet.solve.api import costed_graph

    g = costed_graph("vgg16_cifar", "m4")
    s = solve(g, memory=_ram(g, 0.3), runtime="1.2x", gap=1e-6, time_limit=3, method="fast", find_min_budgets=False)
    assert s.steps and s.status in ("feasible", "optimal")
    assert s.report.gap is not None and s.report.gap >= 0
    assert s.report.bound_energy_j <= s.totals.energy_j * (1 + 1e-9)


def test_the_milp_is_not_started_when_its_setup_would_overrun_the_time_limit():
    # HiGHS checks its time limit only after presolve: with a schedule held and too little time
    # left, the MILP is skipped and the schedule returned with its gap, within the limit
    from poet.solve import SolvePolicy

    g = training_chain(4, 2, skip=True)
    kw = dict(memory=_ram(g, 0.2), gap=1e-9, method="fast", find_min_budgets=False)
    ran = solve(g, **kw, time_limit=60)
    assert ran.report.method == "milp-fast" and not ran.report.milp_skipped
    hours = SolvePolicy(milp_setup_s_per_nonzero=1e3)  # as if setting up took hours
    skipped = solve(g, **kw, time_limit=60, policy=hours)
    assert skipped.report.phase("MILP build") is not None  # built before the guide search, to know whether it fits
    assert skipped.report.milp_skipped and skipped.report.method in ("greedy", "greedy+bound")
    assert "too few to start the MILP" in skipped.report.status_detail
    assert skipped.totals.energy_j == pytest.approx(skipped.report.heuristic_energy_j)
    assert skipped.totals.energy_j >= ran.totals.energy_j * (1 - 1e-9)
    assert skipped.report.bound_energy_j <= ran.totals.energy_j * (1 + 1e-9)
    assert solve(g, **kw).report.method == "milp-fast"  # no time limit: it runs


def test_the_smallest_budget_search_after_an_infeasible_verdict_shares_the_time_limit(monkeypatch):
    # its two MILPs used to get the whole limit each, so a solve could take twice its limit
    import time

    from poet.solve import SolvePolicy
    from poet.solve.lp import BACKENDS, solve_highs

    limits, ends = [], []

    def recording(p, **kw):
        limits.append(kw["time_limit"])
        ends.append(time.perf_counter() + kw["time_limit"])
        return solve_highs(p, **kw)

    monkeypatch.setitem(BACKENDS, "recording", recording)
    g = training_chain(6, 2, skip=True)
    lo = g.min_ram_bytes()
    t0 = time.perf_counter()
    kw = dict(memory=lo, runtime=1.0 * g.plain_runtime_s, time_limit=20, find_min_budgets=True, backend="recording")
    s = solve(g, **kw)
    assert s.status == "infeasible" and len(limits) == 2  # the RAM MILP, then the runtime one
    assert limits[0] <= 10.0  # half of what was left
    assert all(end <= t0 + 20.0 + 0.5 for end in ends), [e - t0 for e in ends]  # none runs past the limit
    assert s.report.min_budgets.ram_note and s.report.min_budgets.runtime_note
    # too little time for HiGHS to set them up: neither is started, and the notes say how to get them.  (The
    # setup rate is HiGHS's, for the cover too: the cover is not solved either, and the verdict is the
    # solve's own MILP's, the one call made, with no plan held to skip it for)
    limits.clear()
    s = solve(g, **kw, policy=SolvePolicy(milp_setup_s_per_nonzero=1e3))
    assert s.status == "infeasible" and len(limits) == 1 and s.report.milp is not None
    for note in (s.report.min_budgets.ram_note, s.report.min_budgets.runtime_note):
        assert "was not computed:" in note and "a longer --time-limit computes it" in note
    assert s.report.min_budgets.ram_bytes is None


def test_unknown_method_is_refused():
    g = training_chain(3, 1)
    with pytest.raises(Exception, match="unknown method"):
        solve(g, memory=keep_all_peak(g), method="nope")


def _aten_resnet(blocks, device):
    pytest.importorskip("torch")
    from poet.demo_models import resnet_training_graph

    return resnet_training_graph(blocks, device)


def test_a_deadline_every_rule_misses_is_met_by_rules_guided_by_the_runtime_cover():
    from poet.solve.bounds import eviction_cover
    from poet.solve.search.greedy import rule_names

    g = _aten_resnet(2, "a72")
    b = Budget(_ram(g, 0.3), 1.15 * g.plain_runtime_s, "serial")
    cover = eviction_cover(g, b)
    lb, guide = cover.bound, cover.guide
    assert best_greedy(g, b, guide=guide) is None  # the case the fallback exists for
    cover = eviction_cover(g, b, objective="time")
    t_min, fast = cover.bound, cover.guide
    plan = best_greedy(g, b, rules=[(r, fast, True) for r in rule_names()])
    assert plan is not None
    t = validate(g, emit(g, plan), b)  # within RAM and the deadline
    assert t.energy_j >= lb * (1 - 1e-9) and t.runtime_s >= t_min * (1 - 1e-9)
    s = solve(g, memory=b.ram_bytes, runtime="1.15x", method="heuristic", time_limit=5, find_min_budgets=False)
    assert s.feasible and s.totals.runtime_s <= b.runtime_s * (1 + 1e-9)
    assert s.report.min_budgets.runtime_s_lower_bound == pytest.approx(t_min)


def test_guides_of_the_cover_at_a_stricter_deadline_meet_the_deadline_more_cheaply_than_the_fastest_guide():
    from poet.solve.api import SolveOptions
    from poet.solve.bounds import eviction_cover
    from poet.solve.phases.greedy_rules import tightened_guides
    from poet.solve.phases.state import SolveState
    from poet.solve.search.greedy import rule_names

    def _tightened_guides(g, b, t_min):
        state = SolveState.start(g, b, SolveOptions(), strategy="poet", remat=True, paging=True)
        return tightened_guides(state, t_min, None)

    g = _aten_resnet(8, "a72")
    b = Budget(_ram(g, 0.3), 1.2 * g.plain_runtime_s, "serial")
    cover = eviction_cover(g, b)
    lb, guide = cover.bound, cover.guide
    assert best_greedy(g, b, guide=guide) is None  # every rule overruns: the fallback runs
    cover = eviction_cover(g, b, objective="time")
    t_min, fast = cover.bound, cover.guide
    strict = _tightened_guides(g, b, t_min)
    assert strict and strict[-1] != guide  # as it is (last; checkpointed first)
    plan = best_greedy(g, b, rules=[(r, gd, False) for gd in strict for r in ("energy", "remat")])
    t = validate(g, emit(g, plan), b)  # within RAM and the deadline
    assert t.energy_j >= lb * (1 - 1e-9)
    fastest = best_greedy(g, b, rules=[(r, fast, True) for r in rule_names()])
    assert t.energy_j < plan_costs(g, fastest, b.paging_time)[0]
    # with a limit that leaves the first rules their share (on this graph they take a quarter second)
    s = solve(g, memory=b.ram_bytes, runtime="1.2x", method="heuristic", time_limit=10, find_min_budgets=False)
    assert s.feasible and s.totals.runtime_s <= b.runtime_s * (1 + 1e-9)
    assert s.totals.energy_j <= t.energy_j * (1 + 1e-9)
    # no stricter deadline to give when the deadline is the fastest possible, or when there is none
    assert _tightened_guides(g, Budget(b.ram_bytes, t_min, "serial"), t_min) == []
    assert _tightened_guides(g, Budget(b.ram_bytes), t_min) == []


def test_when_the_cover_takes_the_whole_slack_the_deadline_guides_run_first_with_the_same_result():
    from poet.solve import SolvePolicy
    from poet.solve.bounds import eviction_cover

    g = _aten_resnet(4, "a72")
    b = Budget(_ram(g, 0.3), 1.15 * g.plain_runtime_s, "serial")
    cover = eviction_cover(g, b)
    assert SolvePolicy().deadline_bound_share <= cover.slack_used <= 1 + 1e-6  # the deadline binds the cover
    assert eviction_cover(g, Budget(b.ram_bytes)).slack_used is None
    calls = []

    def phases(d):
        if d["phase"] in ("greedy rules", "greedy rules for the deadline") and d["phase"] not in calls[-1:]:
            calls.append(d["phase"])

    # gap 0.5: no guide search, so the result is the cheapest plan of the runs alone
    kw = dict(memory=b.ram_bytes, runtime="1.15x", method="heuristic", gap=0.5, find_min_budgets=False, progress=phases)
    first = solve(g, **kw)
    assert first.report.deadline_bound and calls == ["greedy rules for the deadline", "greedy rules"]
    calls.clear()
    then = solve(g, **kw, policy=SolvePolicy(deadline_bound_share=math.inf))
    assert not then.report.deadline_bound and calls == ["greedy rules", "greedy rules for the deadline"]
    assert first.feasible and first.totals.runtime_s <= b.runtime_s * (1 + 1e-9)
    assert first.totals.energy_j == then.totals.energy_j


def test_stalled_searches_restart_with_new_seeds_and_never_end_worse():
    # A 6-layer chain's searches stall in well under a second; with a time limit left, further
    # rounds search the same starts with new seeds.  The first seed's searches, resumed round by
    # round up to their own patience, make the moves of the single round without restarts, so the
    # restarted result can only be cheaper, and it is a validated schedule.
    from poet.solve import SolvePolicy

    g = training_chain(6, 4, skip=True)
    kw = dict(memory=_ram(g, 0.1), runtime="1.2x", gap=1e-9, time_limit=60, method="heuristic", find_min_budgets=False)
    once = solve(g, **kw, policy=SolvePolicy(restart_min_nodes=10**9))
    again = solve(g, **kw, policy=SolvePolicy(restart_min_nodes=0))
    assert once.report.phase("guide search").facts["rounds"] == 1
    assert again.report.phase("guide search").facts["rounds"] == SolvePolicy().search_rounds
    t = validate(g, again.steps, Budget(kw["memory"], 1.2 * g.plain_runtime_s, "serial"))
    assert t.energy_j <= once.totals.energy_j * (1 + 1e-12)
    assert again.report.phase("guide search").seconds < 60
