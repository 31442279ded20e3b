"""Auto tiling's node and time caps as options (plan_tiling's max_nodes / max_seconds, SolvePolicy, poet solve
--max-tile-nodes / --max-tile-seconds), and the planner's output for today's budgets unchanged by them."""

import hashlib
import json

import pytest

from poet.cli import main
from poet.graph.core import GraphError
from poet.graph.tiling_plan import MAX_NODES, plan_tiling
from poet.solve.policy import DEFAULT_POLICY

# sha256 of (sorted counts, nodes, tiled minimum, limit) of plan_tiling(model, budget) on main 79dc517, before the
# caps became options; the time cap is lifted so that a loaded machine cannot stop a plan early
PLANS = {
    ("resnet18_cifar", 32768): "c77877865ef81629",
    ("resnet18_cifar", 262144): "d1841e91cc816e0f",
    ("vgg16_cifar", 32768): "0af5027b65ca722e",
    ("transformer", 262144): "634c4b190efece6a",
}


def plan_hash(p) -> str:
    key = json.dumps([sorted(p.counts.items()), p.nodes_after, p.tiled_min_bytes, p.limit])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@pytest.mark.parametrize("model, budget", sorted(PLANS))
def test_the_plans_of_todays_budgets_are_unchanged(model, budget):
    assert plan_hash(plan_tiling(model, budget, max_seconds=600)) == PLANS[model, budget]


def test_a_node_cap_stops_the_plan_and_says_how_to_lift_it():
    p = plan_tiling("resnet18_cifar", 32768, max_nodes=300, max_seconds=600)
    assert not p.fits and p.nodes_after <= 300
    assert "past the planner's cap of 300" in p.limit and "--max-tile-nodes" in p.limit
    lifted = plan_tiling("resnet18_cifar", 32768, max_nodes=MAX_NODES * 10, max_seconds=600)
    assert lifted.fits and plan_hash(lifted) == PLANS["resnet18_cifar", 32768]


def test_the_node_cap_holds_the_graph_built_not_the_doubling_on_the_way():
    # bert at 256 KiB: doubling on its first two blocks passes ~55,700 whole-model nodes before coarsening
    # takes it back to 33,536; a cap between the two is enough for the plan, one below it is not
    free = plan_tiling("bert", 262144, max_seconds=600)
    assert free.fits and free.nodes_after == 33536
    between = plan_tiling("bert", 262144, max_nodes=40000, max_seconds=600)
    assert between.fits and between.counts == free.counts and between.nodes_after <= 40000
    below = plan_tiling("bert", 262144, max_nodes=30000, max_seconds=600)
    assert not below.fits and below.nodes_after <= 30000
    assert "past the planner's cap of 30,000" in below.limit and "--max-tile-nodes" in below.limit


def test_a_time_cap_stops_the_plan_and_says_so():
    p = plan_tiling("resnet18_cifar", 32768, max_seconds=1e-9)
    assert not p.fits and "s of planning (its time cap)" in p.limit and "--max-tile-seconds" in p.limit


@pytest.mark.parametrize(
    "caps", [{"max_nodes": 0}, {"max_nodes": -5}, {"max_seconds": float("nan")}, {"max_nodes": True}]
)
def test_caps_that_are_not_positive_numbers_are_refused(caps):
    with pytest.raises(GraphError, match="must be a positive number"):
        plan_tiling("resnet18_cifar", 32768, **caps)


def test_the_policy_carries_the_caps():
    p = DEFAULT_POLICY.with_tile_caps(1000, None)
    assert (p.tile_max_nodes, p.tile_max_seconds) == (1000, DEFAULT_POLICY.tile_max_seconds)
    assert DEFAULT_POLICY.with_tile_caps(None, None) == DEFAULT_POLICY


def test_poet_solve_takes_the_caps(capsys):
    args = ["solve", "--model", "resnet18_cifar", "--device", "m0", "--memory", "32768", "--runtime", "3x"]
    assert (
        main([*args, "--max-tile-nodes", "300", "--max-tile-seconds", "600", "--no-cache"]) == 2
    )  # infeasible: below the tiled minimum
    out = capsys.readouterr().out
    assert "past the planner's cap of 300" in out and "--max-tile-nodes" in out
    assert main([*args, "--max-tile-nodes", "0"]) == 2
    assert "--max-tile-nodes: '0' is not a whole number of nodes" in capsys.readouterr().err


def test_without_a_time_limit_planning_gets_the_policys_seconds_and_with_one_its_share():
    p = DEFAULT_POLICY
    caps = p.tile_caps(None, 6 * 10**9)
    assert caps.seconds == p.tiled_plan_seconds
    assert p.tile_caps(600.0, 6 * 10**9).seconds == pytest.approx((1 - p.tiled_min_solve_share) * 600)
    # an asked cap wins without a limit, and cannot break a limit asked for
    assert p.with_tile_caps(None, 5000.0).tile_caps(None, None).seconds == 5000.0
    assert p.with_tile_caps(None, 5000.0).tile_caps(600.0, None).seconds == pytest.approx(450.0)
    assert p.with_tile_caps(None, 100.0).tile_caps(600.0, None).seconds == 100.0


def test_the_node_cap_is_what_the_available_ram_holds_unless_asked_for():
    p = DEFAULT_POLICY
    caps = p.tile_caps(None, 6 * 10**9)
    assert caps.nodes == int(p.tiled_memory_share * 6e9 / p.tiled_bytes_per_node)
    assert "6.0 GB of RAM available" in caps.nodes_why and f"{p.tiled_bytes_per_node:,} B per node" in caps.nodes_why
    unknown = p.tile_caps(None, None)
    assert unknown.nodes == int(p.tiled_memory_share * 16 * 2**30 / p.tiled_bytes_per_node)
    assert "assumed" in unknown.nodes_why
    asked = p.with_tile_caps(1234, None).tile_caps(None, 10**6)
    assert (asked.nodes, asked.nodes_why) == (1234, "")


def test_a_tiled_solves_limit_covers_planning_and_leaves_a_large_graph_its_minutes():
    p = DEFAULT_POLICY
    base = p.tiled_time_limit_s
    # asked: the limit holds, planning included (the solve keeps a quarter at least)
    assert p.tiled_solve_limit(600.0, 100.0, 10**6) == (600.0, 500.0)
    assert p.tiled_solve_limit(600.0, 590.0, 10) == (600.0, pytest.approx(p.tiled_min_solve_share * 600))
    # not asked: the default, less planning, for what plans fast
    assert p.tiled_solve_limit(None, 10.0, 1000) == (base, base - 10.0)
    # a graph of a million nodes planned for 900 s: the solve still gets its per-node time
    limit, solve = p.tiled_solve_limit(None, 900.0, 1_000_000)
    assert solve == pytest.approx(p.tiled_solve_s_per_node * 1_000_000) and limit == pytest.approx(900.0 + solve)


def test_the_planner_says_what_it_is_doing_and_why_its_node_cap_stopped_it():
    said = []
    p = plan_tiling("resnet18_cifar", 32768, max_nodes=300, max_seconds=600, nodes_why="WHY", progress=said.append)
    assert not p.fits and "past the planner's cap of 300 (WHY)" in p.limit and "--max-tile-nodes" in p.limit
    assert said and all(s.startswith("planning the tiles") for s in said)
    assert any("largest working set" in s for s in said)
    assert (
        plan_hash(plan_tiling("resnet18_cifar", 32768, max_seconds=600, progress=said.append))
        == PLANS["resnet18_cifar", 32768]
    )  # telling changes nothing


def test_solve_refuses_a_graph_the_available_ram_would_not_hold_and_names_the_option(monkeypatch):
    import importlib

    from poet.solve.api import plan_and_solve

    api = importlib.import_module("poet.solve.api")  # the module (poet.solve.solve is the function)

    shown = []
    monkeypatch.setattr(api, "available_ram_bytes", lambda: int(300 * DEFAULT_POLICY.tiled_bytes_per_node / 0.8) + 1)
    solved = plan_and_solve("resnet18_cifar", "m0", memory="32768", runtime="3x", cache=False, progress=shown.append)
    s = solved.schedule
    assert s.status == "infeasible" and not solved.problem.plan.fits and solved.problem.plan.nodes_after <= 300
    assert "GB of RAM available" in solved.problem.plan.limit and "--max-tile-nodes" in solved.problem.plan.limit
    assert any(str(d.get("phase", "")).startswith("planning the tiles") for d in shown)
    # with RAM to spare the same command plans it whole
    monkeypatch.setattr(api, "available_ram_bytes", lambda: 4 * 10**9)
    assert plan_and_solve(
        "resnet18_cifar", "m0", memory="32768", runtime="3x", cache=False, time_limit=12
    ).problem.plan.fits
