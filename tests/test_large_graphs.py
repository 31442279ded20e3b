"""Large graphs: the portfolio skips or budgets what cannot finish and still answers within its time limit.

The one-pass paging schedule (``poet.solve.search.stream``), the eviction cover's size estimate and its
moment bound (``poet.solve.bounds``), and the size-aware skips of the portfolio.  Times are checked only
against generous bounds (the machine is shared); speed figures are in bench/large_graphs.py.
"""

from __future__ import annotations

import time

import pytest

from poet.schedule.core import Budget
from poet.schedule.validate import validate
from poet.solve.api import costed_graph, make_budget, solve_costed
from poet.solve.bounds import eviction_cover
from poet.solve.options import SolveOptions
from poet.solve.policy import SolvePolicy
from poet.solve.search.stream import stream_schedule
from poet.solve.search.stream_remat import stream_remat_schedule


@pytest.mark.parametrize("spec", ["layered:60:1", "unet:60:2", "fan:60:1", "resnet18_cifar"])
def test_moment_bound_never_exceeds_the_cover_nor_falls_below_plain(spec):
    # The moment bound is the cover's ILP with all rows but one dropped and its columns relaxed: never
    # above the cover's own bound (up to the cover's 1e-6 tolerance), never below plain
    for device, frac, runtime in (("m4", "40%", None), ("a72", "60%", "1.3x")):
        g = costed_graph(spec, device)
        b = make_budget(g, frac, runtime)
        for remat, paging, objective in ((1, 1, "energy"), (1, 0, "energy"), (0, 1, "time"), (1, 1, "time")):
            plain = g.plain_runtime_s if objective == "time" else g.plain_energy_j
            kw = dict(remat=bool(remat), paging=bool(paging), objective=objective)
            full = eviction_cover(g, b, time_limit=30, **kw).bound
            cover = eviction_cover(g, b, time_limit=1e-9, **kw)
            moment, guide = cover.bound, cover.guide
            assert cover.skipped_nonzeros is not None and guide == {}
            assert plain <= moment <= full + 2e-6 * plain


def test_moment_bound_is_above_plain_where_ram_is_short():
    g = costed_graph("unet:60:2", "m4")
    b = make_budget(g, "40%")
    moment = eviction_cover(g, b, time_limit=1e-9).bound
    assert moment > g.plain_energy_j * (1 + 1e-6)


@pytest.mark.parametrize("spec", ["layered:120:1", "unet:80:1", "resnet18_cifar"])
def test_the_cover_size_is_known_before_it_is_built(spec):
    # the estimate decides the skip; it is within 10% of the ILP built (it counts a tensor also at the
    # moments where it is an input, which the ILP leaves out)
    g = costed_graph(spec, "a72")
    b = make_budget(g, "60%")
    estimated = eviction_cover(g, b, time_limit=1e-9).skipped_nonzeros
    # a setup over a second, no time limit, and a stop asked between the estimate and the solve: the
    # cover is built, then skipped, and says how large it was
    slow = SolvePolicy(milp_setup_s_per_nonzero=2.0 / estimated)
    asked = iter([False, True])
    built = eviction_cover(g, b, time_limit=None, stop=lambda: next(asked), policy=slow).skipped_nonzeros
    assert built == pytest.approx(estimated, rel=0.1)


@pytest.mark.parametrize("spec", ["unet:60:2", "tiny-huge:60:1", "resnet18_cifar"])
def test_the_flow_bound_lies_between_the_moment_bound_and_the_cover(spec):
    # where the cover is skipped with time to spare, its LP relaxation as a min-cost flow is solved: never
    # above the cover, never below the moment bound, and above it where several moments bind
    g = costed_graph(spec, "m4")
    b = make_budget(g, "40%")
    gains = []
    for objective, plain in (("energy", g.plain_energy_j), ("time", g.plain_runtime_s)):
        full = eviction_cover(g, b, objective=objective, time_limit=30).bound
        moment = eviction_cover(g, b, objective=objective, time_limit=1e-9).bound  # no time for the flow LP
        never = SolvePolicy(milp_setup_s_per_nonzero=10.0)  # the cover is never solved: the flow LP is
        flow = eviction_cover(g, b, objective=objective, time_limit=30, policy=never).bound
        assert moment <= flow <= full + 2e-6 * plain
        gains.append(flow > moment * (1 + 1e-6))
    assert any(gains)  # (on all three, measured: up to 40x the moment bound's excess over plain)


@pytest.mark.parametrize("spec", ["layered:120:1", "unet:80:1", "tiny-huge:80:1", "diamond:80:1", "resnet18_cifar"])
def test_one_pass_paging_schedule_validates_within_the_budget(spec):
    g = costed_graph(spec, "m4")
    for frac in ("30%", "60%", "90%"):
        b = make_budget(g, frac)
        if b.ram_bytes < g.min_ram_bytes():
            assert not stream_schedule(g, b).found  # some node's inputs and output alone do not fit
            continue
        found = stream_schedule(g, b)
        assert found.found and found.resident_pairs > 0
        t = validate(g, found.steps, b)
        assert t.peak_ram_bytes <= b.ram_bytes and t.energy_j >= g.plain_energy_j
        assert t.energy_j == pytest.approx(found.energy_j, rel=1e-12)
        assert t.runtime_s == pytest.approx(found.runtime_s, rel=1e-12)
    for mode in ("hidden", "overlap"):  # the runtime as the validator counts it in each paging model
        b = Budget(make_budget(g, "60%").ram_bytes, None, mode)
        found = stream_schedule(g, b)
        assert validate(g, found.steps, b).runtime_s == pytest.approx(found.runtime_s, rel=1e-12)


@pytest.mark.parametrize("rule", [stream_schedule, stream_remat_schedule])
def test_one_pass_paging_schedule_refuses_what_it_cannot_meet(rule):
    # both one-pass rules: the plain one and the one with recomputation (tests/test_stream_remat.py)
    g = costed_graph("unet:80:1", "a72")
    short = make_budget(g, "30%", "1.0x")  # no time for any page-in
    over = rule(g, short)
    assert not over.found and over.over_deadline and over.runtime_s > short.runtime_s
    assert not rule(g, Budget(g.min_ram_bytes() - 1)).found
    stopped = rule(g, make_budget(g, "30%"), time_limit=-1.0)  # out of time at once
    assert not stopped.found and not stopped.over_deadline and stopped.resident_pairs is None


def test_a_20000_node_chain_gets_a_validated_schedule_within_its_time_limit():
    g = costed_graph("chain:20000:1", "a72")
    b = make_budget(g, "80%")
    t0 = time.perf_counter()
    s = solve_costed(g, b, "poet", SolveOptions(time_limit_s=3.0))
    assert time.perf_counter() - t0 < 60  # generous: 3-6 s alone
    assert s.steps and s.status in ("feasible", "optimal")
    t = validate(g, s.steps, b)
    assert t.energy_j >= s.report.bound_energy_j * (1 - 1e-9) >= g.plain_energy_j * (1 - 1e-9)
    phases = {p.name: p.facts for p in s.report.phases}
    assert phases["one-pass paging"]["found"]
    assert "skipped" in phases["gap drops"]  # 55 million (tensor, stage) pairs
    assert phases["lower bound"]["skipped_nonzeros"] > 10**7  # the ILP was not built


def test_the_idle_gap_plan_is_skipped_by_size_and_says_so():
    g = costed_graph("layered:60:1", "a72")
    b = make_budget(g, "80%")
    s = solve_costed(g, b, "remat", SolveOptions(time_limit_s=4, policy=SolvePolicy(stage_pairs_max=0)))
    phases = {p.name: p.facts for p in s.report.phases}
    assert "pairs" in phases["gap drops"]["skipped"]
    assert s.steps  # the rules still find a plan
    validate(g, s.steps, b)


def test_small_graphs_do_not_run_the_one_pass_schedule():
    g = costed_graph("layered:60:1", "a72")
    s = solve_costed(g, make_budget(g, "80%"), "poet", SolveOptions(time_limit_s=4))
    assert s.report.phase("one-pass paging") is None
    assert "fewer than policy.stream_min_nodes" in s.report.skipped("one-pass paging")
