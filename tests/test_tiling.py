"""Operator tiling as a graph rewrite: exact cover, halos from kernel/stride/padding, valid schedules, minima."""

import itertools
import math
from itertools import pairwise

import pytest

from poet.cli import main
from poet.graph.core import GraphError
from poet.graph.tile_option import parse_tile_option
from poet.graph.tiling import build_tiled, tileable
from poet.graph.tiling_plan import plan_tiling, working_sets
from poet.graph.zoo import DATA, build_model, list_models, model_layers
from poet.schedule.validate import validate
from poet.solve.api import SolveOptions, solve_costed
from poet.solve.tiled import tiled_problem


@pytest.mark.parametrize("model", list_models())
def test_no_tiles_is_the_zoo_graph(model):
    a, b = build_model(model), build_tiled(model, {}).graph
    assert a.nodes == b.nodes and a.edges == b.edges


def _by_layer(g, part="output", kind="forward"):
    out = {}
    for i, nd in enumerate(g.nodes):
        if nd.tile is not None and nd.tile.part == part and nd.kind == kind:
            out.setdefault(nd.tile.of, []).append(i)
    return out


def _rows(shape):
    return shape[1] if len(shape) == 3 else shape[0]  # rows, tokens, or features of a flat vector


def _needed(lay, lo, hi, in_rows):
    """Input rows output rows [lo, hi) read, straight from kernel, stride and padding."""
    if lay.op in ("conv2d", "maxpool", "avgpool"):
        return max(0, lo * lay.stride - lay.pad), min(in_rows, (hi - 1) * lay.stride - lay.pad + lay.kernel)
    if lay.op == "linear" and len(lay.shape) == 1:
        return 0, in_rows  # a dense layer: every output feature reads every input feature
    return lo, hi


def _covered(g, ids):
    spans = sorted(
        (g.nodes[u].tile.start[0], g.nodes[u].tile.stop[0]) if g.nodes[u].tile else (0, math.inf) for u in ids
    )
    return spans


@pytest.mark.parametrize(
    "model, n", [("resnet18_cifar", 4), ("resnet18_cifar", 32), ("vgg16_cifar", 5), ("resnet18", 7)]
)
def test_tiles_cover_outputs_exactly_and_read_their_halo(model, n):
    ml = model_layers(model)
    tb = build_tiled(ml, {lay.name: n for lay in ml.layers if tileable(lay)})
    g = tb.graph
    assert tb.counts, "something must be tiled"
    fwd = _by_layer(g)
    layers = {lay.name: lay for lay in ml.layers}
    index = {lay.name: k for k, lay in enumerate(ml.layers)}
    owner = {}  # forward node -> (layer name, start, stop)
    for name, ids in fwd.items():
        for u in ids:
            owner[u] = name
    for name, ids in fwd.items():
        lay = layers[name]
        spans = sorted((g.nodes[u].tile.start[0], g.nodes[u].tile.stop[0]) for u in ids)
        # the union of the tiles is the output, exactly: contiguous, disjoint, from 0 to the last row
        assert spans[0][0] == 0 and spans[-1][1] == _rows(lay.shape)
        assert all(a[1] == b[0] for a, b in pairwise(spans))
        assert len(spans) == tb.counts[name] == g.nodes[ids[0]].tile.count
        assert math.isclose(sum(g.nodes[u].flops for u in ids), lay.flops * 1, rel_tol=1e-9)
        for u in ids:
            t = g.nodes[u].tile
            if lay.op in ("conv2d", "maxpool"):
                assert t.halo == max(lay.pad, lay.kernel - lay.stride - lay.pad, 0)
            else:
                assert t.halo == 0
            for x in dict.fromkeys(lay.inputs):
                if x == DATA:
                    continue
                xin = ml.layers[x]
                lo, hi = _needed(lay, t.start[0], t.stop[0], _rows(xin.shape))
                reads = [p for p in g.preds[u] if g.nodes[p].name.split("[")[0] == xin.name]
                got = _covered(g, reads)
                assert got, f"{g.nodes[u].name} reads nothing of {xin.name}"
                # what it reads is contiguous and covers every row its window needs (the halo included)
                assert got[0][0] <= lo and got[-1][1] >= hi
                assert all(a[1] == b[0] for a, b in pairwise(got))
                # and nothing it does not need: the first and last tiles read are needed ones
                assert got[0][1] > lo and got[-1][0] < hi
    assert index  # layers seen


def test_backward_grad_input_tiles_cover_the_input():
    ml = model_layers("resnet18_cifar")
    g = build_tiled(ml, {lay.name: 8 for lay in ml.layers if tileable(lay)}).graph
    bwd = _by_layer(g, kind="backward")
    for name, ids in bwd.items():
        if not name.startswith("bwd.") or "." not in name[4:] and name == "bwd.loss":
            continue
        spans = sorted((g.nodes[u].tile.start[0], g.nodes[u].tile.stop[0]) for u in ids)
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in pairwise(spans))
    wg = _by_layer(g, part="weight_grad", kind="backward")
    assert wg and all(g.nodes[u].output_bytes == 0 for ids in wg.values() for u in ids)
    # the weight gradient of every tiled conv is accumulated over all of its output tiles
    for name, ids in wg.items():
        conv = name[len("bwd.") :]
        assert len(ids) == _by_layer(g)[conv].__len__()


def test_batchnorm_statistics_pass_before_normalising():
    ml = model_layers("resnet18_cifar")
    g = build_tiled(ml, {"conv1": 4, "bn1": 4}).graph
    stats = [i for i, nd in enumerate(g.nodes) if nd.tile and nd.tile.of == "bn1" and nd.tile.part == "stats"]
    tiles = [i for i, nd in enumerate(g.nodes) if nd.tile and nd.tile.of == "bn1" and nd.tile.part == "output"]
    assert len(stats) == 4 and len(tiles) == 4
    last = max(stats)
    assert all(last in g.preds[t] for t in tiles), "every normalised tile reads the complete statistics"


def test_flat_classifier_split_by_features():
    p = plan_tiling("vgg16_cifar", 32768)
    assert p.fits and p.counts.get("fc7", 1) > 1 and p.counts.get("relu7", 1) > 1
    g = p.graph
    fc7 = [i for i, nd in enumerate(g.nodes) if nd.tile and nd.tile.of == "fc7" and nd.tile.part == "output"]
    relu6 = {i for i, nd in enumerate(g.nodes) if nd.kind == "forward" and nd.name.split("[")[0] == "drop6"}
    assert fc7 and all(relu6 <= set(g.preds[i]) for i in fc7)  # a dense tile reads the whole input
    assert {g.nodes[i].tile.axis for i in fc7} == {"features"}


def test_plan_fits_and_tiles_only_what_it_must():
    p = plan_tiling("resnet18_cifar", 262144)
    assert p.fits and p.tiled and p.tiled_min_bytes <= 262144 < p.untiled_min_bytes
    assert max(working_sets(p.graph)) == p.tiled_min_bytes
    assert "fc" not in p.counts and "layer4.1.conv2" not in p.counts  # small layers stay whole
    assert p.nodes_after < 1000
    same = plan_tiling("resnet18_cifar", 2_000_000)
    assert not same.tiled and same.graph.nodes == build_model("resnet18_cifar").nodes


def test_tiled_schedule_replays_valid():
    p = tiled_problem("vgg16_cifar", "m4", memory=262144, runtime=None)
    assert p.plan.tiled and p.graph.min_ram_bytes() <= 262144
    s = solve_costed(p.graph, p.budget, "poet", SolveOptions(time_limit_s=10))
    assert s.steps, s.report
    t = validate(s.graph, s.steps, s.budget)
    assert t.peak_ram_bytes <= 262144


def test_budget_below_tiled_minimum_is_answered_with_it():
    p = tiled_problem("resnet18_cifar", "m0", memory=16384, runtime=None)
    assert p.plan.tiled and not p.plan.fits
    s = solve_costed(p.graph, p.budget, "poet", SolveOptions(time_limit_s=30))
    assert s.status == "infeasible"
    assert s.report.min_budgets.ram_bytes_lower_bound == p.plan.tiled_min_bytes == p.graph.min_ram_bytes()


def test_cli_tile_off_keeps_the_untiled_answer(capsys):
    rc = main(
        [
            "solve",
            "--model",
            "resnet18_cifar",
            "--device",
            "m0",
            "--memory",
            "32768",
            "--tile",
            "off",
            "--quiet",
            "--no-cache",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 2 and "1048576 B" in out and "Tiling is off" in out


def test_cli_reports_tiling_and_the_tiled_minimum(capsys):
    rc = main(["solve", "--model", "resnet18_cifar", "--device", "m0", "--memory", "16384", "--quiet", "--no-cache"])
    out = capsys.readouterr().out
    p = plan_tiling("resnet18_cifar", 16384)
    # rows and channel groups: half the channels of one output row of a 64-channel 32x32 conv and its 3 input
    # rows (4 + 3 x 8 KiB); a 512-channel BatchNorm's backward statistics step is as large (2 x 8 + 3 x 4 KiB)
    assert p.tiled_min_bytes == 28672
    assert rc == 2 and f"{p.tiled_min_bytes} B" in out and "below the tiled minimum" in out
    assert "activations only" in out


def test_cli_fixed_ram_says_weights_do_not_fit(capsys):
    rc = main(
        [
            "solve",
            "--model",
            "resnet18_cifar",
            "--device",
            "m0",
            "--memory",
            "32768",
            "--fixed-ram",
            "sgd",
            "--quiet",
            "--no-cache",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 2 and "weights do not fit" in out


def test_forced_count_and_bad_values():
    p = plan_tiling("resnet18_cifar", 10**9, tile=3)
    assert p.tiled and set(p.counts.values()) <= {2, 3} and p.counts["conv1"] == 3
    for bad in ("0", "1", "-2", "lots", "2.5"):  # one rule for both stacks: 1 tile is no tiling (off)
        with pytest.raises(GraphError, match="--tile"):
            parse_tile_option(bad)
    assert parse_tile_option("OFF") == "off" and parse_tile_option(None) == "auto"
    with pytest.raises(GraphError, match="layers that"):
        build_tiled("resnet18_cifar", {"nope": 2})


def test_attention_tiles_cover_every_head_query_and_key_block_once():
    ml = model_layers("transformer")
    counts = {lay.name: 4 for lay in ml.layers if tileable(lay)}
    g = build_tiled(ml, counts).graph
    heads = next(lay.heads for lay in ml.layers if lay.heads)
    seq = ml.input_shape[0]
    for of in (
        "block0.attn.context",
        "bwd.block0.attn.context.dq",
        "bwd.block0.attn.context.dk",
        "bwd.block0.attn.context.dv",
    ):
        blocks = [nd.tile for nd in g.nodes if nd.tile is not None and nd.tile.of == of]
        assert len(blocks) == heads * 4 * 4 and {t.axis for t in blocks} == {"heads,queries,keys"}
        area = sum((t.stop[1] - t.start[1]) * (t.stop[2] - t.start[2]) for t in blocks)
        assert area == heads * seq * seq  # every (head, query, key) entry exactly once
        assert sum(t.part == "output" for t in blocks) == heads * 4  # one finished tile per chain
    # no node holds the heads x S x S scores: an attention step's working set is a small fraction of them
    ws = working_sets(g)
    att = [w for w, nd in zip(ws, g.nodes) if nd.op == "attention"]
    assert att and max(att) < 4 * heads * seq * seq / 32
    # a chain step reads only its head's columns of Q, K and V
    step = next(i for i, nd in enumerate(g.nodes) if nd.tile and nd.tile.of == "block0.attn.context")
    h = g.nodes[step].tile.start[0]
    for p in g.preds[step]:
        t = g.nodes[p].tile
        if t is not None and t.axis == "tokens,heads":
            assert t.start[1] == h and t.stop[1] == h + 1


def test_transformer_fits_256k_when_tiled():
    p = plan_tiling("transformer", 262144)
    assert p.fits and p.untiled_min_bytes > 30_000_000
    assert "block0.attn.context" in p.counts


@pytest.mark.parametrize("model", ["resnet18_cifar", "transformer"])
def test_tiling_adds_only_the_flops_it_says(model):
    """Split work sums to the untiled work; the only extra FLOPs are statistics passes, attention's
    backward recomputing each block's probabilities, and a fused GELU recomputed by the weight gradient
    of the linear after it."""
    ml = model_layers(model)
    plain = build_model(model)
    g = build_tiled(ml, {lay.name: 4 for lay in ml.layers if tileable(lay)}).graph
    stats = sum(nd.flops for nd in g.nodes if nd.tile and nd.tile.part == "stats" and nd.kind == "forward")
    att_plain = sum(nd.flops for nd in plain.nodes if nd.op in ("matmul", "softmax"))
    att_tiled = sum(nd.flops for nd in g.nodes if nd.op == "attention")
    rest_plain = plain.total_flops - att_plain
    rest_tiled = g.total_flops - att_tiled - stats
    fused = {lay.name: lay.flops for lay in ml.layers if lay.name in g.meta.get("fused", {})}
    assert (model == "transformer") == bool(fused)
    assert math.isclose(rest_tiled, rest_plain + sum(fused.values()), rel_tol=1e-9)
    if att_plain:
        assert att_plain < att_tiled < 2 * att_plain  # recomputed probabilities, costed, bounded


def test_short_time_limit_on_a_tiled_graph_still_answers_with_a_validated_schedule():
    from poet.solve.tiled import solve_tiled

    p = tiled_problem("vgg16_cifar", "m0", memory=32768, runtime="3x")
    s = solve_tiled(p, "poet", SolveOptions(time_limit_s=1.0))
    assert s.steps and s.status in ("feasible", "optimal")
    t = validate(s.graph, s.steps, s.budget)
    assert t.peak_ram_bytes <= 32768
    assert s.report.bound_energy_j is not None and s.report.bound_energy_j >= s.graph.plain_energy_j * (1 - 1e-9)
    assert s.report.gap is not None and 0 <= s.report.gap < 1


def test_python_and_the_command_line_take_one_path_tiling_included(tmp_path, capsys):
    # poet.solve() of a zoo model below its untiled minimum tiles it as `poet solve` does, and answers the
    # same: the same tiled graph, status, method and steps (a heuristic solve that ends before its limit)
    import poet
    from poet.schedule.io import load_schedule
    from poet.solve.api import plan_and_solve

    ask = dict(memory="1500", gap=0.05, method="heuristic", time_limit=60)
    s = poet.solve("linear", "m4", **ask)
    out = tmp_path / "s.json"
    argv = ["solve", "--model", "linear", "--device", "m4", "--memory", "1500", "--gap", "0.05"]
    argv += ["--method", "heuristic", "--time-limit", "60", "--no-cache", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    cli = load_schedule(out)
    assert s.report.tiling is not None and s.report.tiling["counts"] and len(s.graph) > len(build_model("linear"))
    assert dict(cli.report.tiling) == dict(s.report.tiling)
    assert (cli.status, cli.report.method) == (s.status, s.report.method) and s.feasible
    assert [(str(st.op), st.node) for st in cli.steps] == [(str(st.op), st.node) for st in s.steps]
    assert cli.totals.energy_j == pytest.approx(s.totals.energy_j, rel=1e-12)
    # without a time limit, a tiled graph gets the policy's (240 s), less the time planning took
    solved = plan_and_solve("linear", "m4", memory="1500", gap=0.05, method="heuristic")
    assert solved.problem.tiled and solved.time_limit_s == 240.0
    assert solved.solve_limit_s == pytest.approx(240.0 - solved.planning_s)
    assert solved.schedule.report.time_limit_s == solved.solve_limit_s
    # and tile="off" keeps the untiled graph, below whose minimum nothing fits
    off = poet.solve("linear", "m4", memory="1500", tile="off", find_min_budgets=False)
    assert off.status == "infeasible" and len(off.graph) == len(build_model("linear"))


def test_the_shared_window_arithmetic_matches_the_windows_tap_by_tap():
    # poet.graph.windows serves both stacks (the zoo rewrite and the traced programs' tiling): each span
    # is checked against the taps of every output row, with padding, strides and dilation
    from poet.graph.windows import reach_span, window_span

    for k, s, p, d in itertools.product((1, 2, 3, 5), (1, 2, 3), (0, 1, 2), (1, 2)):
        taps = {o: [o * s - p + d * j for j in range(k)] for o in range(-20, 30)}
        for lo in range(0, 8):
            for hi in range(lo + 1, 10):
                read = [t for o in range(lo, hi) for t in taps[o]]
                assert window_span(lo, hi, k, s, p, d) == (min(read), max(read) + 1)
                reaching = [o for o, ts in taps.items() if ts[0] <= hi - 1 and ts[-1] >= lo]
                first, stop = reach_span(lo, hi, k, s, p, d)
                assert list(range(first, stop)) == reaching  # empty: rows a stride skips
