"""The faster solve methods (issue #4) against the faithful MILP and the exhaustive oracle.

No timing assertions: only that every method returns a validated schedule, that
the exact methods reach the same optimum, and that the heuristic is honest about
its gap (measured against a valid lower bound).
"""

import math

import pytest
from bruteforce import brute_force_energy
from conftest import random_dag, relu_chain, training_chain

from poet import solve
from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.bounds import lower_bound_energy
from poet.solve.lp import max_violation
from poet.solve.milp import build, plan_to_start
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import emit, plan_costs

EXACT = ("faithful", "warm", "fast", "auto")


def _ram(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


_dag = random_dag


CASES = [(layers, seed, frac, slack, skip)
         for layers, seed in ((3, 1), (3, 5), (4, 2), (4, 9))
         for frac in (0.0, 0.4)
         for slack in (None, 1.3)
         for skip in (False, True)]


@pytest.mark.parametrize("layers,seed,frac,slack,skip", CASES)
def test_exact_methods_equal_oracle(layers, seed, frac, slack, skip):
    g = training_chain(layers, seed, skip=skip)
    ram = _ram(g, frac)
    rt = None if slack is None else slack * g.plain_runtime_s
    expected = brute_force_energy(g, ram, rt)
    for method in EXACT:
        s = solve(g, memory=ram, runtime=rt, gap=1e-9, method=method, find_min_budgets=False)
        assert s.solver.get("method"), method
        if expected is None:
            assert not s.steps and s.status in ("infeasible", "no_solution"), (method, s.solver)
        else:
            assert s.status == "optimal", (method, s.solver)
            assert s.totals.energy_j == pytest.approx(expected, rel=1e-7), (method, s.solver)


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


@pytest.mark.parametrize("model,device", [("linear", "a72"), ("linear", "m4"), ("vgg16_cifar", "m4"),
                                          ("resnet18_cifar", "a72")])
def test_greedy_plan_is_a_valid_complete_warm_start(model, device):
    from poet.solve.api import costed_graph
    g = costed_graph(model, device)
    for frac, mult in ((0.3, 1.2), (0.0, 2.0)):
        b = Budget(_ram(g, frac), mult * g.plain_runtime_s, "serial")
        plan = best_greedy(g, b)
        if plan is None:
            continue
        t = validate(g, emit(g, plan), b)            # a real schedule within both budgets
        e, _ = plan_costs(g, plan, b.paging_time)
        assert t.energy_j == pytest.approx(e, rel=1e-9)
        assert t.energy_j >= lower_bound_energy(g) * (1 - 1e-12)
        f = build(g, b, tighten=True)
        x, why = plan_to_start(f, g, plan)
        assert x is not None, why
        assert max_violation(f.problem, x) <= 1e-7
        assert float(f.problem.c @ x) * f.energy_unit == pytest.approx(e, rel=1e-9)


def test_heuristic_reports_an_honest_gap():
    g = training_chain(4, 2, skip=True)
    ram = _ram(g, 0.2)
    exact = solve(g, memory=ram, gap=1e-9, method="faithful", find_min_budgets=False)
    h = solve(g, memory=ram, method="heuristic", find_min_budgets=False)
    assert h.steps and h.status in ("feasible", "optimal")
    lb = h.solver["bound_energy_j"]
    assert lb <= exact.totals.energy_j * (1 + 1e-9)          # a valid bound
    assert h.totals.energy_j >= exact.totals.energy_j * (1 - 1e-9)
    assert h.solver["gap"] == pytest.approx((h.totals.energy_j - lb) / h.totals.energy_j)


def test_time_limit_returns_best_schedule_with_gap():
    from poet.solve.api import costed_graph
    g = costed_graph("vgg16_cifar", "m4")
    s = solve(g, memory=_ram(g, 0.3), runtime="1.2x", gap=1e-6, time_limit=3, method="fast",
              find_min_budgets=False)
    assert s.steps and s.status in ("feasible", "optimal")
    assert s.solver["gap"] is not None and s.solver["gap"] >= 0
    assert s.solver["bound_energy_j"] <= s.totals.energy_j * (1 + 1e-9)


def test_the_milp_is_not_started_when_its_setup_would_overrun_the_time_limit():
    # HiGHS checks its time limit only after presolve: with a schedule held and too little time
    # left, the MILP is skipped and the schedule returned with its gap, within the limit
    from poet.solve import SolvePolicy
    g = training_chain(4, 2, skip=True)
    kw = dict(memory=_ram(g, 0.2), gap=1e-9, method="fast", find_min_budgets=False)
    ran = solve(g, **kw, time_limit=60)
    assert ran.solver["method"] == "milp-fast" and not ran.solver.get("milp_skipped")
    hours = SolvePolicy(milp_setup_s_per_nonzero=1e3)      # as if setting up took hours
    skipped = solve(g, **kw, time_limit=60, policy=hours)
    assert "build_seconds" in skipped.solver      # built before the guide search, to know whether it fits
    assert skipped.solver["milp_skipped"] and skipped.solver["method"] in ("greedy", "greedy+bound")
    assert "too few to start the MILP" in skipped.solver["status_detail"]
    assert skipped.totals.energy_j == pytest.approx(skipped.solver["heuristic_energy_j"])
    assert skipped.totals.energy_j >= ran.totals.energy_j * (1 - 1e-9)
    assert skipped.solver["bound_energy_j"] <= ran.totals.energy_j * (1 + 1e-9)
    assert solve(g, **kw).solver["method"] == "milp-fast"          # no time limit: it runs


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
    assert s.status == "infeasible" and len(limits) == 2             # the RAM MILP, then the runtime one
    assert limits[0] <= 10.0                                          # half of what was left
    assert all(end <= t0 + 20.0 + 0.5 for end in ends), [e - t0 for e in ends]   # none runs past the limit
    assert s.solver["min_ram_note"] and s.solver["min_runtime_note"]
    # too little time for HiGHS to set them up: neither is started, and the notes say how to get them
    limits.clear()
    s = solve(g, **kw, policy=SolvePolicy(milp_setup_s_per_nonzero=1e3))
    assert s.status == "infeasible" and not limits
    for key in ("min_ram_note", "min_runtime_note"):
        assert "was not computed:" in s.solver[key] and "a longer --time-limit computes it" in s.solver[key]
    assert "min_ram_bytes" not in s.solver


def test_unknown_method_is_refused():
    g = training_chain(3, 1)
    with pytest.raises(Exception, match="unknown method"):
        solve(g, memory=keep_all_peak(g), method="nope")


@pytest.mark.parametrize("prefer", ["energy", "page", "remat", "closure", "cascade"])
@pytest.mark.parametrize("seed", [1, 6, 11])
def test_every_greedy_rule_gives_a_valid_plan_never_below_the_oracle(prefer, seed):
    from poet.solve.search.greedy import greedy_plan
    g = relu_chain(2, seed)
    b = Budget(g.min_ram_bytes(), 1.5 * g.plain_runtime_s, "serial")
    best = brute_force_energy(g, b.ram_bytes, b.runtime_s)
    plan = greedy_plan(g, b, prefer=prefer)
    if plan is None:
        return
    t = validate(g, emit(g, plan), Budget(b.ram_bytes))     # RAM always holds; the deadline is checked by callers
    assert t.energy_j == pytest.approx(plan_costs(g, plan, b.paging_time)[0], rel=1e-9)
    if t.runtime_s <= b.runtime_s and best is not None:
        assert t.energy_j >= best * (1 - 1e-9)


@pytest.mark.parametrize("model,device,frac", [("resnet18_cifar", "m4", 0.2), ("vgg16_cifar", "m4", 0.1)])
def test_guide_search_only_improves_and_returns_a_valid_plan(model, device, frac):
    from poet.solve.api import costed_graph
    from poet.solve.bounds import eviction_cover
    from poet.solve.search.guides import search_guides
    g = costed_graph(model, device)
    b = Budget(_ram(g, frac), 1.2 * g.plain_runtime_s, "serial")
    lb, guide = eviction_cover(g, b)
    rules: list = []
    start = best_greedy(g, b, guide=guide, per_rule=rules)
    assert start is not None and start.rule is not None
    e0 = plan_costs(g, start, b.paging_time)[0]
    kw = dict(target_energy=0.0, time_limit=60.0, patience=150, seed=3)
    found = search_guides(g, b, start, **kw)
    t = validate(g, emit(g, found), b)                      # within RAM and deadline
    assert lb * (1 - 1e-9) <= t.energy_j <= e0 * (1 + 1e-12)
    again = search_guides(g, b, start, **kw)                 # seeded: the same moves, the same plan
    assert plan_costs(g, again, b.paging_time)[0] == plan_costs(g, found, b.paging_time)[0]


@pytest.fixture(scope="module")
def r18c_start():
    """resnet18_cifar on m4 at 20% RAM and 1.2x, and its cheapest greedy plan: a search start."""
    from poet.solve.api import costed_graph
    from poet.solve.bounds import eviction_cover
    g = costed_graph("resnet18_cifar", "m4")
    b = Budget(_ram(g, 0.2), 1.2 * g.plain_runtime_s, "serial")
    lb, guide = eviction_cover(g, b)
    return g, b, best_greedy(g, b, guide=guide)


def test_searches_run_side_by_side_end_as_when_run_in_turn(r18c_start):
    # the pool's workers run the same seeded searches; bounded by patience (not time) each makes
    # the same moves, so the plans are the same, and the searches come back resumable
    from poet.solve.search.guides import GuideSearch
    from poet.solve.search.pool import SearchPool
    g, b, start = r18c_start
    alone = [GuideSearch(g, b, start, seed=s) for s in (1, 2, 3)]
    for sr in alone:
        sr.run(60.0, 80)
    with SearchPool(g, 2) as pool:
        assert pool.pool is not None          # forked workers (Linux)
        side = pool.run([(GuideSearch(g, b, start, seed=s), 60.0, 80) for s in (1, 2, 3)])
        assert [sr.best_key for sr in side] == [sr.best_key for sr in alone]
        assert all(sr.g is g for sr in side)
        again = pool.run([(sr, 60.0, 120) for sr in side])    # resumed in the workers
    for sr in alone:
        sr.run(60.0, 120)
    assert [sr.best_key for sr in again] == [sr.best_key for sr in alone]
    for sr in again:
        validate(g, emit(g, sr.best), b)


def test_a_search_reaching_its_target_stops_the_others(r18c_start):
    from poet.solve.search.guides import GuideSearch
    from poet.solve.search.pool import SearchPool
    g, b, start = r18c_start
    e0 = plan_costs(g, start, b.paging_time)[0]
    easy = GuideSearch(g, b, start, target_energy=e0 * 2, seed=0)        # the start already meets it
    hard = GuideSearch(g, b, start, target_energy=0.0, seed=1)
    assert easy.reached and not hard.reached
    with SearchPool(g, 2) as pool:
        pool.reached.set()     # as the first search to reach its target does
        out = pool.run([(hard, 60.0, None), (GuideSearch(g, b, start, seed=2), 60.0, None)])
    assert all(sr.idle == 0 for sr in out)       # told to stop, neither made a move


def _worker_dies(search, time_limit, patience):
    import os
    os._exit(3)


def test_searches_carry_on_in_the_solve_when_a_worker_dies(monkeypatch, r18c_start):
    # a killed worker (out of memory, say) loses nothing: the searches run in turn, in this process,
    # sharing the batch's time
    from poet.solve.search import pool as parallel
    from poet.solve.search.guides import GuideSearch
    g, b, start = r18c_start
    monkeypatch.setattr(parallel, "_run", _worker_dies)
    with parallel.SearchPool(g, 2) as pool:
        out = pool.run([(GuideSearch(g, b, start, seed=s), 60.0, 40) for s in (1, 2)])
        assert pool.pool is None and pool.workers == 1
    alone = GuideSearch(g, b, start, seed=2)
    alone.run(60.0, 40)
    assert out[1].best_key == alone.best_key and out[1].idle == 40
    validate(g, emit(g, out[0].best), b)


def test_a_sweep_point_gets_its_share_of_the_cores_for_its_searches(monkeypatch):
    import os
    import signal

    from poet.solve.search import pool as parallel
    from poet.sweep.local import worker_init
    monkeypatch.setattr(parallel, "_cap", None)
    cores = len(os.sched_getaffinity(0))
    assert parallel.worker_count(None) == cores and parallel.worker_count(1) == 1
    old = signal.getsignal(signal.SIGTERM)
    try:
        worker_init(1)            # a sweep running as many points at once as there are cores
    finally:
        signal.signal(signal.SIGTERM, old)
    assert parallel.worker_count(None) == 1


def test_a_resumed_guide_search_makes_the_same_moves_as_one_run(r18c_start):
    # GuideSearch.run continues where it stopped: 60 moves without gain, then up to 150, is the
    # same search as up to 150 at once, and a search stalled at its patience makes no more moves
    from poet.solve.search.guides import GuideSearch
    g, b, start = r18c_start
    one = GuideSearch(g, b, start, seed=5)
    one.run(60.0, 150)
    two = GuideSearch(g, b, start, seed=5)
    two.run(60.0, 60)
    assert two.idle == 60
    two.run(60.0, 150)
    assert (two.idle, two.best_key, two.best_guide) == (one.idle, one.best_key, one.best_guide) and one.idle == 150
    assert one.best_key[1] < plan_costs(g, start, b.paging_time)[0]
    state = one.rnd.getstate()
    one.run(60.0, 150)
    assert one.rnd.getstate() == state
    validate(g, emit(g, one.best), b)


@pytest.mark.parametrize("prefer", ["energy", "remat", "closure", "cascade"])
@pytest.mark.parametrize("seed", [1, 6, 11])
def test_rules_guided_once_by_the_runtime_cover_give_valid_plans_never_below_the_oracle(prefer, seed):
    from poet.solve.bounds import eviction_cover
    from poet.solve.search.greedy import greedy_plan
    g = relu_chain(2, seed)
    b = Budget(g.min_ram_bytes(), 1.5 * g.plain_runtime_s, "serial")
    best = brute_force_energy(g, b.ram_bytes, b.runtime_s)
    t_min, fast = eviction_cover(g, b, objective="time")
    plan = greedy_plan(g, b, prefer=prefer, guide=fast, guide_once=True)
    if plan is None:
        return
    t = validate(g, emit(g, plan), Budget(b.ram_bytes))
    assert t.runtime_s >= t_min * (1 - 1e-9)                 # the runtime cover is a valid bound
    if t.runtime_s <= b.runtime_s and best is not None:
        assert t.energy_j >= best * (1 - 1e-9)


def _aten_resnet(blocks, device):
    pytest.importorskip("torch")
    from poet.execute.models import resnet_training_graph
    return resnet_training_graph(blocks, device)


def test_a_deadline_every_rule_misses_is_met_by_rules_guided_by_the_runtime_cover():
    from poet.solve.bounds import eviction_cover
    from poet.solve.search.greedy import rule_names
    g = _aten_resnet(2, "a72")
    b = Budget(_ram(g, 0.3), 1.15 * g.plain_runtime_s, "serial")
    lb, guide = eviction_cover(g, b)
    assert best_greedy(g, b, guide=guide) is None           # the case the fallback exists for
    t_min, fast = eviction_cover(g, b, objective="time")
    plan = best_greedy(g, b, rules=[(r, fast, True) for r in rule_names()])
    assert plan is not None
    t = validate(g, emit(g, plan), b)                        # within RAM and the deadline
    assert t.energy_j >= lb * (1 - 1e-9) and t.runtime_s >= t_min * (1 - 1e-9)
    s = solve(g, memory=b.ram_bytes, runtime="1.15x", method="heuristic", time_limit=5, find_min_budgets=False)
    assert s.feasible and s.totals.runtime_s <= b.runtime_s * (1 + 1e-9)
    assert s.solver["min_runtime_s_lower_bound"] == pytest.approx(t_min)


def test_guides_of_the_cover_at_a_stricter_deadline_meet_the_deadline_more_cheaply_than_the_fastest_guide():
    from poet.solve.api import SolveOptions
    from poet.solve.bounds import eviction_cover
    from poet.solve.pipeline import Pipeline
    from poet.solve.search.greedy import rule_names
    from poet.solve.stage import plan_costs

    def _tightened_guides(g, b, t_min):
        return Pipeline(g, b, SolveOptions(), remat=True, paging=True, strategy="poet").tightened_guides(t_min, None)
    g = _aten_resnet(8, "a72")
    b = Budget(_ram(g, 0.3), 1.2 * g.plain_runtime_s, "serial")
    lb, guide = eviction_cover(g, b)
    assert best_greedy(g, b, guide=guide) is None           # every rule overruns: the fallback runs
    t_min, fast = eviction_cover(g, b, objective="time")
    strict = _tightened_guides(g, b, t_min)
    assert strict and strict[-1] != guide                   # as it is (last; checkpointed first)
    plan = best_greedy(g, b, rules=[(r, gd, False) for gd in strict for r in ("energy", "remat")])
    t = validate(g, emit(g, plan), b)                        # within RAM and the deadline
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
    info: dict = {}
    lb, guide = eviction_cover(g, b, info=info)
    assert SolvePolicy().deadline_bound_share <= info["slack_used"] <= 1 + 1e-6   # the deadline binds the cover
    no_deadline: dict = {}
    eviction_cover(g, Budget(b.ram_bytes), info=no_deadline)
    assert "slack_used" not in no_deadline
    calls = []

    def phases(d):
        if d["phase"] in ("greedy rules", "greedy rules for the deadline") and d["phase"] not in calls[-1:]:
            calls.append(d["phase"])
    # gap 0.5: no guide search, so the result is the cheapest plan of the runs alone
    kw = dict(memory=b.ram_bytes, runtime="1.15x", method="heuristic", gap=0.5, find_min_budgets=False,
              progress=phases)
    first = solve(g, **kw)
    assert first.solver["deadline_bound"] and calls == ["greedy rules for the deadline", "greedy rules"]
    calls.clear()
    then = solve(g, **kw, policy=SolvePolicy(deadline_bound_share=math.inf))
    assert not then.solver["deadline_bound"] and calls == ["greedy rules", "greedy rules for the deadline"]
    assert first.feasible and first.totals.runtime_s <= b.runtime_s * (1 + 1e-9)
    assert first.totals.energy_j == then.totals.energy_j


def test_checkpointed_guides_keep_every_third_residual_block_output():
    from poet.solve.search.greedy import checkpointed, greedy_plan
    g = _aten_resnet(8, "m4")
    relus = [v for v, nd in enumerate(g.nodes) if nd.kind == "forward" and nd.name.startswith("relu")]
    # a block output feeds the next block's residual add; recomputing that add needs it
    outputs = [v for v in relus if any(g.nodes[s].name.startswith("add") and g.ram[s] > 8 for s in g.succs[v])]
    guide = {v: "remat" for v in relus}
    ck = checkpointed(g, guide)
    kept = sorted(v for v, k in ck.items() if k == "keep")
    assert set(ck) == set(guide) and kept and set(kept) <= set(outputs)
    # chain links: block outputs whose own recomputation needs the previous one (not the stem's)
    links = outputs[1:]
    assert kept == links[2::3]
    assert checkpointed(g, {v: "remat" for v in outputs[:1]}) == {}      # one output alone is no chain
    b = Budget(_ram(g, 0.3), None, "serial")
    plan = greedy_plan(g, b, guide=ck)
    assert plan is not None
    validate(g, emit(g, plan), b)


def test_stalled_searches_restart_with_new_seeds_and_never_end_worse():
    # A 6-layer chain's searches stall in well under a second; with a time limit left, further
    # rounds search the same starts with new seeds.  The first seed's searches, resumed round by
    # round up to their own patience, make the moves of the single round without restarts, so the
    # restarted result can only be cheaper, and it is a validated schedule.
    from poet.solve import SolvePolicy
    g = training_chain(6, 4, skip=True)
    kw = dict(memory=_ram(g, 0.1), runtime="1.2x", gap=1e-9, time_limit=60, method="heuristic",
              find_min_budgets=False)
    once = solve(g, **kw, policy=SolvePolicy(restart_min_nodes=10**9))
    again = solve(g, **kw, policy=SolvePolicy(restart_min_nodes=0))
    assert once.solver["guide_search_rounds"] == 1
    assert again.solver["guide_search_rounds"] == SolvePolicy().search_rounds
    t = validate(g, again.steps, Budget(kw["memory"], 1.2 * g.plain_runtime_s, "serial"))
    assert t.energy_j <= once.totals.energy_j * (1 + 1e-12)
    assert again.solver["guide_search_seconds"] < 60


def test_greedy_rules_stop_at_their_time_limit_once_a_plan_exists():
    # with no time at all, a single run still makes the first plan (so a solve always has one),
    # and no other rule starts; a run given no time stops at once
    from poet.solve.search.greedy import greedy_plan
    g = training_chain(5, 3, skip=True)
    b = Budget(_ram(g, 0.2), 1.5 * g.plain_runtime_s, "serial")
    everything: list = []
    assert best_greedy(g, b, per_rule=everything) is not None and len(everything) > 1
    first: list = []
    plan = best_greedy(g, b, per_rule=first, time_limit=0.0)
    assert plan is not None and len(first) == 1 and plan.rule[0] == "energy"
    t = validate(g, emit(g, plan), b)
    assert t.energy_j == pytest.approx(plan_costs(g, plan, b.paging_time)[0], rel=1e-9)
    assert greedy_plan(g, b, time_limit=-1.0) is None


def test_rules_that_keep_overrunning_stop_at_half_their_time_limit(monkeypatch):
    # a clock that moves one second per run: the runs stop at half the limit while every one has
    # overrun the deadline, at the whole limit once one has met it
    from poet.solve.search import greedy as H
    g = _aten_resnet(4, "a72")
    clock = [0.0]
    greedy = H._greedy

    def one_second(*args):
        clock[0] += 1.0
        return greedy(*args)
    monkeypatch.setattr(H, "_greedy", one_second)
    monkeypatch.setattr(H, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: clock[0])}))

    def runs(mult, limit):
        clock[0] = 0.0
        b = Budget(_ram(g, 0.3), mult * g.plain_runtime_s, "serial")
        plan = H.best_greedy(g, b, closest=[], time_limit=limit)
        return plan, clock[0]
    assert runs(1.15, None)[0] is None and runs(1.15, None)[1] > 20     # every rule overruns
    assert runs(1.15, 10.0) == (None, 6.0)          # stopped at 5 s: the run started at 5 s is cut short
    plan, spent = runs(2.0, None)
    assert plan is not None and spent > 20
    assert runs(2.0, 10.0)[1] == 11.0               # the first run met the deadline: the whole 10 s


def test_runs_bound_to_overrun_are_given_up_and_the_rules_end_with_the_same_plans(monkeypatch):
    # A run is given up once the time it has committed (compute, page-ins, page-outs already read
    # back) exceeds what it may take: exactly the runs whose whole plan would take longer.
    from poet.solve.bounds import eviction_cover
    from poet.solve.search import greedy as H
    from poet.solve.stage import drop_unread_pageouts
    g = _aten_resnet(4, "a72")
    b = Budget(_ram(g, 0.3), 1.1 * g.plain_runtime_s, "serial")
    lb, guide = eviction_cover(g, b)
    tried = 0
    for rule in H.rule_names():
        for gd in (None, guide):
            full = H.greedy_plan(g, b, prefer=rule, guide=gd)
            if full is None:
                continue
            tried += 1
            rt = plan_costs(g, drop_unread_pageouts(full), b.paging_time)[1]
            assert H.greedy_plan(g, b, prefer=rule, guide=gd, give_up_above=rt * (1 + 1e-9)) is not None
            assert H.greedy_plan(g, b, prefer=rule, guide=gd, give_up_above=rt * (1 - 1e-6)) is None
    assert tried >= 5

    def outcome():
        per_rule, closest = [], []
        best = H.best_greedy(g, b, guide=guide, per_rule=per_rule, closest=closest)
        return [None if p is None else (p.comp, p.keep, p.ins, p.outs) for p in [best, *per_rule, *closest]]

    given_up = []
    greedy = H._greedy

    def counted(*args):
        try:
            return greedy(*args)
        except H._Overrun:
            given_up.append(args[4])
            raise

    monkeypatch.setattr(H, "_greedy", counted)
    mine = outcome()
    assert mine[0] is None and len(mine) == 2      # every rule overruns: the nearest miss comes back
    assert given_up                                 # and some runs were given up on the way
    monkeypatch.setattr(H, "_greedy", lambda *args: greedy(*args[:-1], None))
    assert outcome() == mine
