"""The searches (poet.solve.search): every greedy rule, the guide search and its worker pool, and the rules'
time limits.  Plans are checked by the validator and against the exhaustive oracle; no timing assertions."""

import pytest
from bruteforce import brute_force_energy
from conftest import relu_chain, training_chain

from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import emit, plan_costs


def _ram(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


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
    t = validate(g, emit(g, plan), Budget(b.ram_bytes))  # RAM always holds; the deadline is checked by callers
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
    cover = eviction_cover(g, b)
    lb, guide = cover.bound, cover.guide
    rules: list = []
    start = best_greedy(g, b, guide=guide, per_rule=rules)
    assert start is not None and start.rule is not None
    e0 = plan_costs(g, start, b.paging_time)[0]
    kw = dict(target_energy=0.0, time_limit=60.0, patience=150, seed=3)
    found = search_guides(g, b, start, **kw)
    t = validate(g, emit(g, found), b)  # within RAM and deadline
    assert lb * (1 - 1e-9) <= t.energy_j <= e0 * (1 + 1e-12)
    again = search_guides(g, b, start, **kw)  # seeded: the same moves, the same plan
    assert plan_costs(g, again, b.paging_time)[0] == plan_costs(g, found, b.paging_time)[0]


@pytest.fixture(scope="module")
def r18c_start():
    """resnet18_cifar on m4 at 20% RAM and 1.2x, and its cheapest greedy plan: a search start."""
    from poet.solve.api import costed_graph
    from poet.solve.bounds import eviction_cover

    g = costed_graph("resnet18_cifar", "m4")
    b = Budget(_ram(g, 0.2), 1.2 * g.plain_runtime_s, "serial")
    guide = eviction_cover(g, b).guide
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
        assert pool.pool is not None  # forked workers (Linux)
        side = pool.run([(GuideSearch(g, b, start, seed=s), 60.0, 80) for s in (1, 2, 3)])
        assert [sr.best_key for sr in side] == [sr.best_key for sr in alone]
        assert all(sr.g is g for sr in side)
        again = pool.run([(sr, 60.0, 120) for sr in side])  # resumed in the workers
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
    easy = GuideSearch(g, b, start, target_energy=e0 * 2, seed=0)  # the start already meets it
    hard = GuideSearch(g, b, start, target_energy=0.0, seed=1)
    assert easy.reached and not hard.reached
    with SearchPool(g, 2) as pool:
        pool.reached.set()  # as the first search to reach its target does
        out = pool.run([(hard, 60.0, None), (GuideSearch(g, b, start, seed=2), 60.0, None)])
    assert all(sr.idle == 0 for sr in out)  # told to stop, neither made a move


def _worker_dies(search, time_limit, patience):
    import os

    os._exit(3)


def test_searches_carry_on_in_the_solve_when_a_worker_dies(r18c_start):
    # a killed worker (out of memory, say) loses nothing: the searches run in turn, in this process,
    # sharing the batch's time
    from poet.solve.search import pool as parallel
    from poet.solve.search.guides import GuideSearch

    g, b, start = r18c_start
    with parallel.SearchPool(g, 2, job=_worker_dies) as pool:
        out = pool.run([(GuideSearch(g, b, start, seed=s), 60.0, 40) for s in (1, 2)])
        assert pool.pool is None and pool.workers == 1
    alone = GuideSearch(g, b, start, seed=2)
    alone.run(60.0, 40)
    assert out[1].best_key == alone.best_key and out[1].idle == 40
    validate(g, emit(g, out[0].best), b)


def test_a_sweep_point_gets_its_share_of_the_cores_for_its_searches():
    import os
    import signal

    from poet.solve.search import pool as parallel
    from poet.sweep.local import worker_init

    parallel.limit_workers(None)
    cores = len(os.sched_getaffinity(0))
    assert parallel.worker_count(None) == cores and parallel.worker_count(1) == 1
    old = signal.getsignal(signal.SIGTERM)
    try:
        worker_init(1)  # a sweep running as many points at once as there are cores
        assert parallel.worker_count(None) == 1
    finally:
        signal.signal(signal.SIGTERM, old)
        parallel.limit_workers(None)


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
    cover = eviction_cover(g, b, objective="time")
    t_min, fast = cover.bound, cover.guide
    plan = greedy_plan(g, b, prefer=prefer, guide=fast, guide_once=True)
    if plan is None:
        return
    t = validate(g, emit(g, plan), Budget(b.ram_bytes))
    assert t.runtime_s >= t_min * (1 - 1e-9)  # the runtime cover is a valid bound
    if t.runtime_s <= b.runtime_s and best is not None:
        assert t.energy_j >= best * (1 - 1e-9)


def _aten_resnet(blocks, device):
    pytest.importorskip("torch")
    from poet.demo_models import resnet_training_graph

    return resnet_training_graph(blocks, device)


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
    assert checkpointed(g, {v: "remat" for v in outputs[:1]}) == {}  # one output alone is no chain
    b = Budget(_ram(g, 0.3), None, "serial")
    plan = greedy_plan(g, b, guide=ck)
    assert plan is not None
    validate(g, emit(g, plan), b)


def test_greedy_rules_stop_at_their_time_limit_before_a_plan_exists_too():
    # the limit holds before the first plan as well (a run in progress included): with no time at
    # all no run completes and no rule starts another; a run given no time stops at once
    from poet.solve.search.greedy import greedy_plan

    g = training_chain(5, 3, skip=True)
    b = Budget(_ram(g, 0.2), 1.5 * g.plain_runtime_s, "serial")
    everything: list = []
    plan = best_greedy(g, b, per_rule=everything)
    assert plan is not None and len(everything) > 1
    first: list = []
    assert best_greedy(g, b, per_rule=first, time_limit=0.0) is None and first == []
    t = validate(g, emit(g, plan), b)
    assert t.energy_j == pytest.approx(plan_costs(g, plan, b.paging_time)[0], rel=1e-9)
    assert greedy_plan(g, b, time_limit=-1.0) is None


def test_rules_that_keep_overrunning_stop_at_half_their_time_limit():
    # a clock that moves one second per run: the runs stop at half the limit while every one has
    # overrun the deadline, at the whole limit once one has met it
    from poet.solve.search.greedy_run import greedy_run

    g = _aten_resnet(4, "a72")
    clock = [0.0]

    def one_second(*args, **kw):
        clock[0] += 1.0
        return greedy_run(*args, **kw)

    def runs(mult, limit):
        clock[0] = 0.0
        b = Budget(_ram(g, 0.3), mult * g.plain_runtime_s, "serial")
        plan = best_greedy(g, b, closest=[], time_limit=limit, clock=lambda: clock[0], run=one_second)
        return plan, clock[0]

    assert runs(1.15, None)[0] is None and runs(1.15, None)[1] > 20  # every rule overruns
    assert runs(1.15, 10.0) == (None, 6.0)  # stopped at 5 s: the run started at 5 s is cut short
    plan, spent = runs(2.0, None)
    assert plan is not None and spent > 20
    assert runs(2.0, 10.0)[1] == 11.0  # the first run met the deadline: the whole 10 s


def test_runs_bound_to_overrun_are_given_up_and_the_rules_end_with_the_same_plans():
    # A run is given up once the time it has committed (compute, page-ins, page-outs already read
    # back) exceeds what it may take: exactly the runs whose whole plan would take longer.
    from poet.solve.bounds import eviction_cover
    from poet.solve.search.greedy import greedy_plan, rule_names
    from poet.solve.search.greedy_run import GreedyOverrun, greedy_run
    from poet.solve.stage import drop_unread_pageouts

    g = _aten_resnet(4, "a72")
    b = Budget(_ram(g, 0.3), 1.1 * g.plain_runtime_s, "serial")
    guide = eviction_cover(g, b).guide
    tried = 0
    for rule in rule_names():
        for gd in (None, guide):
            full = greedy_plan(g, b, prefer=rule, guide=gd)
            if full is None:
                continue
            tried += 1
            rt = plan_costs(g, drop_unread_pageouts(full), b.paging_time)[1]
            assert greedy_plan(g, b, prefer=rule, guide=gd, give_up_above=rt * (1 + 1e-9)) is not None
            assert greedy_plan(g, b, prefer=rule, guide=gd, give_up_above=rt * (1 - 1e-6)) is None
    assert tried >= 5

    def outcome(run):
        per_rule, closest = [], []
        best = best_greedy(g, b, guide=guide, per_rule=per_rule, closest=closest, run=run)
        return [None if p is None else (p.comp, p.keep, p.ins, p.outs) for p in [best, *per_rule, *closest]]

    given_up = []

    def counted(*args, **kw):
        try:
            return greedy_run(*args, **kw)
        except GreedyOverrun:
            given_up.append(kw["prefer"])
            raise

    mine = outcome(counted)
    assert mine[0] is None and len(mine) == 2  # every rule overruns: the nearest miss comes back
    assert given_up  # and some runs were given up on the way
    # never giving up a run ends with the same plans
    assert outcome(lambda *args, **kw: greedy_run(*args, **{**kw, "give_up_above": None})) == mine
