"""--weights flash|ram|stream: the traffic priced into the graph, the solver, the file and the validator."""

import copy
import math

import pytest

from poet.cli import main
from poet.graph.io import graph_from_dict, graph_to_dict
from poet.graph.weight_traffic import derive_traffic, traffic_total, update_traffic
from poet.graph.zoo import build_model
from poet.hardware.cost import linear_cost_model
from poet.hardware.weights_cost import place_weights, weight_store
from poet.schedule.core import Step
from poet.schedule.io import load_schedule, schedule_from_dict, schedule_to_dict
from poet.schedule.validate import ScheduleError, simulate
from poet.solve.api import solve
from poet.solve.problem import tiled_problem
from poet.units import BudgetError
from tests.toolchain import build_cache_dir, shared_host_kernels  # noqa: F401  (fixtures)

STAGING = 1024


@pytest.fixture(scope="module")
def linear():
    g = build_model("linear")
    store = weight_store(g, "m0", "stream", STAGING)
    return g, store, place_weights(linear_cost_model(g, "m0"), g, store)


def test_each_node_reads_the_weights_it_uses_and_writes_its_gradient(linear):
    g, store, cg = linear
    params = {nd.name: nd.param_bytes for nd in g.nodes if nd.param_bytes}
    t = {nd.name: nd.weight_traffic for nd in cg.nodes}
    chunks = lambda b: -(-b // STAGING)  # noqa: E731
    for name, p in params.items():
        assert t[name].read_bytes == p and t[name].reads == chunks(p) and t[name].write_bytes == 0
    # bwd.fc2 makes an input gradient (reads the weights) and the weight gradient (writes it, first and only)
    assert t["bwd.fc2"].read_bytes == params["fc2"] and t["bwd.fc2"].write_bytes == params["fc2"]
    # bwd.fc1 reads only the data: no input gradient, no weight read; it writes the gradient; the last
    # node also carries the SGD update: read every weight and gradient, write every weight
    upd = update_traffic(store)
    assert upd.read_bytes == 2 * g.param_bytes and upd.write_bytes == g.param_bytes
    assert t["bwd.fc1"].read_bytes == upd.read_bytes
    assert t["bwd.fc1"].write_bytes == params["fc1"] + upd.write_bytes
    assert all(t[nd.name].empty for nd in g.nodes if nd.name.startswith(("relu", "bwd.relu", "loss", "bwd.loss")))
    total = traffic_total([nd.weight_traffic for nd in cg.nodes])
    assert total.read_bytes == 2 * g.param_bytes - params["fc1"] + 2 * g.param_bytes
    assert total.write_bytes == 2 * g.param_bytes


def test_the_traffic_is_priced_into_compute_and_the_staging_buffer_into_fixed_ram(linear):
    g, store, cg = linear
    plain = linear_cost_model(g, "m0")
    assert cg.fixed_ram_bytes == STAGING
    for a, b in zip(plain.nodes, cg.nodes):
        assert b.compute_energy_j == pytest.approx(a.compute_energy_j + store.joules(b.weight_traffic))
        assert b.compute_time_s == pytest.approx(a.compute_time_s + store.seconds(b.weight_traffic))
    ram = place_weights(plain, g, weight_store(g, "m0", "ram"))
    assert ram.fixed_ram_bytes == g.param_bytes and ram.plain_energy_j == plain.plain_energy_j


def test_a_recompute_pays_the_weight_reads_again(linear):
    _, store, cg = linear
    n = len(cg.nodes)
    steps = [Step("compute", 0), Step("free", 0), Step("compute", 0)] + [Step("compute", v) for v in range(1, n)]
    t = simulate(cg, steps).totals
    once = traffic_total([nd.weight_traffic for nd in cg.nodes])
    assert t.recomputes == 1
    assert t.weight_read_bytes == once.read_bytes + cg.nodes[0].weight_traffic.read_bytes
    assert t.weight_reads == once.reads + cg.nodes[0].weight_traffic.reads
    assert t.weight_energy_j == pytest.approx(store.joules(once) + store.joules(cg.nodes[0].weight_traffic))


def test_the_solver_sees_the_traffic_and_the_file_records_the_placement(tmp_path):
    flash = solve("linear", "m0", memory="60%", strategy="poet", time_limit=5)
    s = solve("linear", "m0", memory="60%", weights="stream", staging=512, time_limit=5)
    assert s.feasible and s.graph.placement == "stream" and s.graph.fixed_ram_bytes == 512
    t = s.totals
    assert t.weight_energy_j > 0 and t.weight_read_bytes >= 3 * s.graph.weights.param_bytes
    assert math.isclose(t.energy_j, t.arithmetic_energy_j + t.weight_energy_j + t.paging_energy_j, rel_tol=1e-9)
    assert t.arithmetic_energy_j >= flash.totals.compute_energy_j * (1 - 1e-9)
    path = tmp_path / "s.json"
    from poet.schedule.io import save_schedule

    save_schedule(s, path)
    back = load_schedule(path)
    assert back.graph.weights == s.graph.weights
    assert back.totals.weight_read_bytes == t.weight_read_bytes
    assert graph_from_dict(graph_to_dict(s.graph)).weights == s.graph.weights


def _stream_schedule_dict():
    s = solve("linear", "m0", memory="60%", weights="stream", staging=512, time_limit=5)
    return schedule_to_dict(s)


def test_a_stream_schedule_whose_weight_traffic_is_left_out_is_refused():
    d = _stream_schedule_dict()
    schedule_from_dict(copy.deepcopy(d))  # as written: accepted
    no_traffic = copy.deepcopy(d)
    for nd in no_traffic["graph"]["nodes"]:
        nd.pop("weight_traffic", None)
    with pytest.raises(ScheduleError, match="weight traffic"):
        schedule_from_dict(no_traffic)
    cheap = copy.deepcopy(d)  # the traffic recorded, but the node's cost without it
    nd = next(n for n in cheap["graph"]["nodes"] if n.get("weight_traffic"))
    nd["compute_time_s"] = nd["compute_energy_j"] = 0.0
    with pytest.raises(ScheduleError, match="leaves out its weight traffic"):
        schedule_from_dict(cheap)
    no_store = copy.deepcopy(d)  # the placement dropped, the traffic left on the nodes
    no_store["graph"].pop("weights")
    with pytest.raises(ScheduleError, match="not streamed"):
        schedule_from_dict(no_store)
    no_staging = copy.deepcopy(d)
    no_staging["graph"]["fixed_ram_bytes"] = 0
    with pytest.raises(ScheduleError, match="staging buffer"):
        schedule_from_dict(no_staging)


def test_tiles_read_their_share_and_every_layer_gradient_is_written(tmp_path):
    """On a tiled graph (row tiles and channel groups): each tile reads its share of the weights."""
    g = tiled_problem("resnet18_cifar", "m4", memory=32768, weights="stream").graph
    store = g.weights
    assert any(nd.tile is not None and "channels" in nd.tile.axes for nd in g.nodes)
    params = dict(store.layers)
    traffic = derive_traffic([(n.name, n.kind, n.tile, n.ram_bytes) for n in g.nodes], store)
    assert traffic == tuple(nd.weight_traffic for nd in g.nodes)
    # the written gradient bytes of a step are the parameters once per layer (first write) plus every
    # later read-modify-write (which reads as much as it writes) plus the update's write of the weights
    total = traffic_total(traffic)
    upd = update_traffic(store)
    rmw_reads = total.write_bytes - upd.write_bytes - sum(params.values())
    assert rmw_reads >= 0
    assert total.write_bytes == pytest.approx(sum(params.values()) + rmw_reads + upd.write_bytes, rel=1e-6)
    fwd = [(nd, t) for nd, t in zip(g.nodes, traffic) if nd.kind == "forward" and nd.tile and nd.tile.of == "conv1"]
    assert fwd and all(t.read_bytes <= params["conv1"] for _, t in fwd)


def test_bad_placements_get_clear_errors(tmp_path, capsys):
    with pytest.raises(BudgetError, match="--weights ram is --fixed-ram params"):
        solve("linear", "m0", memory="60%", weights="ram", fixed_ram="params")
    with pytest.raises(BudgetError, match="--staging"):
        solve("linear", "m0", memory="60%", weights="flash", staging=512)
    from poet.graph.io import save_graph

    save_graph(linear_cost_model(build_model("linear"), "m0"), tmp_path / "g.json")
    assert main(["solve", "--graph", str(tmp_path / "g.json"), "--memory", "60%", "--weights", "stream"]) == 2
    assert "needs each layer's parameters" in capsys.readouterr().err


def test_cli_reports_the_split_and_the_placement(tmp_path, capsys):
    out = tmp_path / "s.json"
    argv = ["solve", "--model", "linear", "--device", "m0", "--memory", "60%", "--quiet", "--time-limit", "5"]
    argv += ["--out", str(out)]
    assert main(argv + ["--weights", "stream"]) == 0
    text = capsys.readouterr().out
    assert "weight traffic" in text and "Weights: stream" in text and "gradients in storage" in text
    assert main(["validate", str(out)]) == 0
    assert main(argv[:-2] + ["--weights", "flash"]) == 0  # (without --out)
    assert "Weights: flash (the paper's setting)" in capsys.readouterr().out


@pytest.mark.usefixtures("shared_host_kernels")  # the kernel library built once for the session
def test_compile_runs_a_stream_schedule_moving_the_priced_weight_traffic(tmp_path, capsys):
    out = tmp_path / "s.json"
    argv = ["solve", "--model", "linear", "--device", "m0", "--memory", "60%", "--quiet", "--time-limit", "5"]
    assert main(argv + ["--weights", "stream", "--out", str(out)]) == 0
    capsys.readouterr()
    argv = ["compile", "--schedule", str(out), "--out", str(tmp_path / "c"), "--target", "host", "--run", "--check"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "streamed from weights.bin" in text and "MISMATCH" not in text
    moved = [ln for ln in text.splitlines() if ln.strip().startswith(("read ", "written "))]
    assert len(moved) == 2 and all("moved" in ln for ln in moved)
    sizes = [(784, 128), (128, 128), (128, 64), (64, 32), (32, 10)]  # the MLP's layers, each with a bias
    assert (tmp_path / "c" / "run" / "weights.bin").stat().st_size == 4 * sum(i * o + o for i, o in sizes)


def test_the_solver_pages_instead_of_recomputing_when_a_recompute_must_read_weights_again():
    """Node a is cheap arithmetic over 2 MB of weights: in flash a recompute is the cheapest way to
    free its RAM; streamed, recomputing it reads the 2 MB again, so the solver pages its output."""
    from poet.graph.core import Graph, Node

    x = 8192
    nodes = [
        Node("a", "forward", x, flops=1e3, param_bytes=2_000_000),
        Node("b", "forward", x, flops=1e3),
        Node("c", "forward", x, flops=1e3),
        Node("bwd.c", "backward", x, flops=2e3),
        Node("bwd.b", "backward", x, flops=2e3),
        Node("bwd.a", "backward", 0, flops=2e3),
    ]
    g = Graph("toy", nodes, [(0, 1), (1, 2), (2, 3), (1, 3), (3, 4), (0, 4), (4, 5)])
    budget = 3 * x + 256 + x // 4
    flash = solve(g, "m4", memory=budget, time_limit=10)
    stream = solve(g, "m4", memory=budget, weights="stream", time_limit=10)
    assert flash.status == stream.status == "optimal"
    assert flash.totals.recomputes == 1 and flash.totals.page_outs == 0
    assert stream.totals.recomputes == 0 and stream.totals.page_outs == 1
    # a's forward reads its weights once (bwd.a makes no input gradient: it reads none), the update reads
    # weights and gradient; bwd.a writes the gradient, the update the weights
    assert stream.totals.weight_read_bytes == 3 * 2_000_000
    assert stream.totals.weight_write_bytes == 2 * 2_000_000


def test_a_graph_file_priced_with_stream_keeps_its_placement(tmp_path, capsys):
    from poet.graph.io import save_graph

    g = build_model("linear")
    priced = place_weights(linear_cost_model(g, "m0"), g, weight_store(g, "m0", "stream", 512))
    save_graph(priced, tmp_path / "g.json")
    out = tmp_path / "s.json"
    argv = ["solve", "--graph", str(tmp_path / "g.json"), "--memory", "4096", "--quiet", "--time-limit", "5"]
    assert main(argv + ["--weights", "stream", "--out", str(out)]) == 0
    assert load_schedule(out).graph.weights == priced.weights
    assert main(argv + ["--weights", "ram"]) == 2
    assert "priced with --weights stream" in capsys.readouterr().err


def test_a_compact_file_keeps_the_placement_and_the_traffic_and_is_refused_without_it():
    from poet.graph.errors import GraphError

    # the compact (columnar) graph of long schedules carries weight traffic as an optional column
    d = _stream_schedule_dict()
    s = schedule_from_dict(copy.deepcopy(d))
    compact = schedule_to_dict(s, compact=True)
    back = schedule_from_dict(copy.deepcopy(compact))
    assert back.graph.weights == s.graph.weights
    assert [nd.weight_traffic for nd in back.graph.nodes] == [nd.weight_traffic for nd in s.graph.nodes]
    assert back.totals.weight_read_bytes == s.totals.weight_read_bytes > 0
    assert graph_from_dict(graph_to_dict(s.graph, compact=True)).weights == s.graph.weights
    dropped = copy.deepcopy(compact)
    dropped["graph"]["nodes"].pop("weight_traffic")
    with pytest.raises(ScheduleError, match="weight traffic"):
        schedule_from_dict(dropped)
    short = copy.deepcopy(compact)
    short["graph"]["nodes"]["weight_traffic"] = short["graph"]["nodes"]["weight_traffic"][:-1]
    with pytest.raises(GraphError, match="weight_traffic must be a list"):
        schedule_from_dict(short)


def test_input_channel_grad_input_tiles_are_priced_the_whole_block_and_the_validator_holds_it():
    """A grad-input tile of a group of a convolution's input channels reads its whole block (one record per
    output channel: the group's weights are a segment of each); a file pricing it as a share is refused."""
    from poet.graph.tiling import build_tiled
    from poet.graph.zoo import DATA, ModelLayers
    from poet.graph.zoo_layers import NetBuilder

    n = NetBuilder((3, 8, 8))
    x = n.relu("relu1", n.conv("conv1", DATA, 4, 3, 1, 1))
    x = n.conv("conv2", x, 6, 3, 1, 1)
    n.linear("fc", n.flatten("flatten", n.avgpool("avgpool", x, 8)), 3)
    L = ModelLayers("in_groups", n.input_shape, tuple(n.layers))
    g = build_tiled(L, {"relu1:channels": 2}, 2).graph
    s = solve(g, "m4", memory="100%", time_limit=5, find_min_budgets=False, weights="stream", staging=64)
    assert s.feasible and s.graph.weights.dense == ("conv1", "conv2", "fc")
    tiles = [
        nd for nd in s.graph.nodes if nd.tile is not None and nd.tile.of == "bwd.conv2" and nd.tile.part == "output"
    ]
    block = 4 * 6 * 4 * 9
    assert len(tiles) == 2 and all(nd.weight_traffic.to_list() == [block, 0, -(-block // 64), 0] for nd in tiles)
    d = schedule_to_dict(s)
    schedule_from_dict(copy.deepcopy(d))  # as written: accepted
    share = copy.deepcopy(d)  # one tile priced as its share (half the block): refused
    v = next(i for i, nd in enumerate(share["graph"]["nodes"]) if nd["name"] == tiles[0].name)
    share["graph"]["nodes"][v]["weight_traffic"] = [block // 2, 0, -(-block // 128), 0]
    with pytest.raises(ScheduleError, match="weight traffic"):
        schedule_from_dict(share)
    older = _stream_schedule_dict()  # a file written before the dense list, without such tiles: read as before
    older["graph"]["weights"].pop("dense")
    assert schedule_from_dict(older).graph.weights.dense == ()
    undeclared = copy.deepcopy(d)  # the dense record dropped: the file's traffic no longer follows from it
    undeclared["graph"]["weights"].pop("dense")
    with pytest.raises(ScheduleError, match="weight traffic"):
        schedule_from_dict(undeclared)
