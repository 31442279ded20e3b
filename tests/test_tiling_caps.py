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
