"""Tiling at scale: identical blocks planned once, attention tiles of several heads, the streaming page rule."""

import math

import pytest

from poet.graph.core import GraphError
from poet.graph.tiling import HEADS_KEY, build_tiled, tileable
from poet.graph.tiling_plan import plan_tiling, repeated_blocks, working_sets
from poet.graph.zoo import ModelLayers, build_model, model_layers
from poet.hardware.cost import linear_cost_model
from poet.schedule.validate import validate
from poet.solve.api import SolveOptions, costed_graph, make_budget
from poet.solve.policy import SolvePolicy
from poet.solve.search.stream import stream_schedule
from poet.solve.tiled import solve_tiled, tiled_problem


def _encoder(blocks: int) -> ModelLayers:
    """The first ``blocks`` encoder blocks of bert (each block: 14 layers, the first reads the data)."""
    ml = model_layers("bert")
    return ModelLayers(f"bert{blocks}", ml.input_shape, ml.layers[: 14 * blocks])


def test_repeated_blocks_are_found_only_where_they_are():
    assert repeated_blocks(model_layers("bert")).length == 14
    assert repeated_blocks(_encoder(4)).length == 14
    assert repeated_blocks(model_layers("transformer")) is None  # one block: nothing to share
    assert repeated_blocks(model_layers("resnet18_cifar")) is None


def test_identical_blocks_get_identical_counts_and_the_whole_model_fits():
    budget = 2 * 1024 * 1024
    p = plan_tiling(_encoder(4), budget)
    assert p.fits and p.tiled and max(working_sets(p.graph)) == p.tiled_min_bytes <= budget
    per_block = [{k.split(".", 1)[1]: v for k, v in p.counts.items() if k.startswith(f"block{b}.")} for b in range(4)]
    assert per_block[0] and all(c == per_block[0] for c in per_block)


def test_attention_tiles_of_several_heads_cover_every_entry_once_and_cost_the_same():
    ml = model_layers("transformer")
    counts = {lay.name: 4 for lay in ml.layers if tileable(lay)}
    one = build_tiled(ml, counts).graph
    two = build_tiled(ml, {**counts, "block0.attn.context" + HEADS_KEY: 2}).graph
    heads = next(lay.heads for lay in ml.layers if lay.heads)
    seq = ml.input_shape[0]
    for of in ("block0.attn.context", "bwd.block0.attn.context.dk"):
        blocks = [nd.tile for nd in two.nodes if nd.tile is not None and nd.tile.of == of]
        assert len(blocks) == heads // 2 * 4 * 4
        assert all(t.stop[0] - t.start[0] == 2 for t in blocks)  # two heads each
        area = sum((t.stop[0] - t.start[0]) * (t.stop[1] - t.start[1]) * (t.stop[2] - t.start[2]) for t in blocks)
        assert area == heads * seq * seq
    assert math.isclose(one.total_flops, two.total_flops, rel_tol=1e-12)
    assert len(two) < len(one)
    # a step reads the Q, K and V pieces of exactly its own two heads
    step = next(i for i, nd in enumerate(two.nodes) if nd.tile and nd.tile.of == "block0.attn.context")
    h = two.nodes[step].tile.start[0]
    qkv = [two.nodes[u].tile for u in two.preds[step] if two.nodes[u].tile.axis == "tokens,heads"]
    assert qkv and all((t.start[1], t.stop[1]) == (h, h + 2) for t in qkv)
    with pytest.raises(GraphError, match="must divide"):
        build_tiled(ml, {**counts, "block0.attn.context" + HEADS_KEY: 5})


def test_stream_page_rule_replays_valid_within_the_budget():
    p = plan_tiling("resnet18_cifar", 262144)
    g = linear_cost_model(p.graph, "m4")
    budget = make_budget(costed_graph("resnet18_cifar", "m4"), 262144, "3x")
    found = stream_schedule(g, budget)
    assert found.found
    computed = [st.node for st in found.steps if st.op == "compute"]
    assert computed == list(range(len(g)))  # every node once, in streaming order
    t = validate(g, found.steps, budget)
    assert t.peak_ram_bytes <= 262144 and t.energy_j >= g.plain_energy_j * (1 - 1e-12)
    # a budget below the tiled minimum has no page-rule plan
    assert not stream_schedule(g, make_budget(g, p.tiled_min_bytes - 1, None)).found


def test_large_tiled_graphs_go_to_the_stream_page_rule():
    p = tiled_problem("resnet18_cifar", "m0", memory=262144, runtime="3x")
    assert len(p.graph) > 100
    s = solve_tiled(p, "poet", SolveOptions(time_limit_s=30, policy=SolvePolicy(tiled_portfolio_max_nodes=100)))
    assert s.steps and s.status in ("feasible", "optimal") and s.report.method == "streaming page rule"
    t = validate(s.graph, s.steps, s.budget)
    assert t.peak_ram_bytes <= 262144
    assert s.report.bound_energy_j == pytest.approx(p.graph.plain_energy_j)
    assert s.report.gap == pytest.approx((t.energy_j - p.graph.plain_energy_j) / t.energy_j)
    assert "nodes" in s.report.message


def test_below_the_tiled_minimum_the_large_graph_path_answers_with_it():
    p = tiled_problem("resnet18_cifar", "m0", memory=16384, runtime=None)
    s = solve_tiled(p, "poet", SolveOptions(time_limit_s=30, policy=SolvePolicy(tiled_portfolio_max_nodes=100)))
    assert s.status == "infeasible" and s.report.min_budgets.ram_bytes_lower_bound == p.plan.tiled_min_bytes


def test_plan_of_a_layer_list_matches_the_zoo_name():
    assert plan_tiling(model_layers("vgg16_cifar"), 32768).counts == plan_tiling("vgg16_cifar", 32768).counts
    assert build_tiled(model_layers("vgg16_cifar"), {}).graph.nodes == build_model("vgg16_cifar").nodes


def test_fused_gelu_is_never_stored_and_its_gradient_reads_the_linear_tiles():
    ml = model_layers("transformer")
    counts = {lay.name: 4 for lay in ml.layers if tileable(lay)}
    g = build_tiled(ml, counts).graph
    assert g.meta["fused"] == {"block0.ffn.gelu": "block0.ffn.fc2"}
    assert not [nd for nd in g.nodes if "gelu" in nd.name]  # no GELU tensor, no GELU backward node
    fc1 = {i for i, nd in enumerate(g.nodes) if nd.kind == "forward" and nd.name.startswith("block0.ffn.fc1[")}
    grads = [i for i, nd in enumerate(g.nodes) if nd.name.startswith("bwd.block0.ffn.fc2[")]
    assert len(fc1) == 4 and len(grads) == 4
    for v in grads:
        t = g.nodes[v].tile
        read = [g.nodes[u].tile for u in g.preds[v] if u in fc1]
        # the grad-input tile of fc2 is the gradient of fc1's output: it reads fc1's tile of the same tokens
        assert [(r.start, r.stop) for r in read] == [(t.start, t.stop)]
        assert g.nodes[v].output_bytes == g.nodes[min(fc1)].output_bytes
    # and fc1's backward reads those gradients (there is no GELU gradient in between)
    bwd_fc1 = [i for i, nd in enumerate(g.nodes) if nd.name.startswith("bwd.block0.ffn.fc1")]
    assert bwd_fc1 and all(set(g.preds[i]) & set(grads) for i in bwd_fc1)
    # a schedule of the fused graph, at its smallest budget, replays valid
    from poet.schedule.core import Budget

    cg = linear_cost_model(g, "m0")
    budget = Budget(cg.min_ram_bytes())
    found = stream_schedule(cg, budget)
    assert found.found and validate(cg, found.steps, budget).peak_ram_bytes <= budget.ram_bytes


def test_planner_says_when_its_node_cap_stopped_it(monkeypatch):
    import poet.graph.tiling_plan as tp

    monkeypatch.setattr(tp, "MAX_NODES", 300)
    p = plan_tiling("resnet18_cifar", 32768)
    assert not p.fits and p.nodes_after <= 300
    assert "past the planner's cap of 300" in p.limit and p.tiled_min_bytes == max(working_sets(p.graph))
    # with repeated blocks the cap is the whole model's, estimated from the two blocks planned
    q = plan_tiling(_encoder(4), 262144)
    assert not q.fits and q.nodes_after <= 300 and "past the planner's cap" in q.limit


def test_the_plan_is_the_same_in_every_process():
    """Sweep workers re-plan a point's tiling and the writer checks it: string hashing differs per process."""
    import os
    import subprocess
    import sys

    code = (
        "from poet.graph.tiling_plan import plan_tiling\n"
        "print([sorted(plan_tiling(m, b).counts.items()) for m, b in (('linear', 819), ('vgg16_cifar', 525123))])"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1 and "fc1" in runs.pop()


# sha256 of every node (its repr and tile), its inputs, and the builder's owners of each tiled graph below, on
# main c1b300a before the attention steps' reads were looked up once per head and range: node for node the same
GRAPHS = {
    ("transformer", 262144): "dccf4ca03903bc98",
    ("resnet18_cifar", 262144): "f5612ac8b94a7f30",
    ("vgg16_cifar", 32768): "524ef9e10575ff93",
}


@pytest.mark.parametrize("model, budget", sorted(GRAPHS))
def test_the_tiled_graphs_are_built_node_for_node_as_before(model, budget):
    import hashlib

    from poet.graph.tiling import tiled_nodes

    p = plan_tiling(model, budget, max_seconds=600)
    h = hashlib.sha256(repr(sorted(p.counts.items())).encode())
    for i, nd in enumerate(p.graph.nodes):
        t = nd.tile
        fields = None if t is None else (t.of, t.index, t.count, t.axis, t.halo, t.part, t.start, t.stop)
        h.update(repr((repr(nd), fields, p.graph.preds[i])).encode())
    bd = tiled_nodes(model_layers(model), dict(p.counts), 1).builder
    h.update(repr((bd.owner, sorted(bd.read_owner.items()), bd.extent)).encode())
    assert h.hexdigest()[:16] == GRAPHS[model, budget]
