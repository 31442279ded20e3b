"""Tile metadata on nodes: dataclass checks, poet-graph/1 round trip, clear errors on bad files."""

import json

import pytest

from poet.graph import (
    CostedGraph,
    CostedNode,
    GraphError,
    Tile,
    graph_to_dict,
    load_graph,
    save_graph,
)
from poet.graph.core import Graph, Node
from poet.hardware.cost import linear_cost_model


def _node(name, tile=None, kind="forward"):
    return CostedNode(name, kind, 100, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1, tile=tile)


def _tiled_graph():
    t0 = Tile("conv1", 0, 2, "rows", halo=1, start=(0,), stop=(16,))
    t1 = Tile("conv1", 1, 2, "rows", halo=1, start=(16,), stop=(32,))
    st = Tile("bn1", 1, 2, "rows", part="stats")
    att = Tile("attn", 3, 4, "heads,queries", start=(0, 64), stop=(1, 128), part="partial")
    nodes = (
        _node("conv1[0]", t0),
        _node("conv1[1]", t1),
        _node("bn1.stats[1]", st),
        _node("attn[3]", att),
        _node("plain"),
    )
    return CostedGraph("g", nodes, ((0, 2), (1, 2), (2, 3), (3, 4)))


def test_tile_roundtrip(tmp_path):
    g = _tiled_graph()
    p = tmp_path / "g.json"
    save_graph(g, p)
    back = load_graph(p)
    assert back == g
    assert [nd.tile for nd in back.nodes] == [nd.tile for nd in g.nodes]
    d = json.loads(p.read_text())
    assert d["nodes"][0]["tile"] == {
        "of": "conv1",
        "index": 0,
        "count": 2,
        "axis": "rows",
        "halo": 1,
        "start": [0],
        "stop": [16],
    }
    assert d["nodes"][2]["tile"]["part"] == "stats"
    assert "tile" not in d["nodes"][4]  # untiled: the field is absent, as in older files
    assert back.nodes[3].tile.axes == ("heads", "queries")


def test_untiled_file_unchanged():
    g = CostedGraph("g", (_node("a"), _node("b")), ((0, 1),))
    d = graph_to_dict(g)
    assert all("tile" not in n for n in d["nodes"])


def test_cost_model_keeps_tiles():
    t = Tile("fc", 0, 3, "tokens")
    g = Graph("s", (Node("fc[0]", "forward", 64, 10.0, tile=t), Node("x", "forward", 8, 1.0)), ((0, 1),))
    cg = linear_cost_model(g, "m4")
    assert cg.nodes[0].tile == t and cg.nodes[1].tile is None


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"of": "", "index": 0, "count": 1, "axis": "rows"}, "'of'"),
        ({"of": "a", "index": 2, "count": 2, "axis": "rows"}, "'index'"),
        ({"of": "a", "index": 0, "count": 0, "axis": "rows"}, "'count'"),
        ({"of": "a", "index": 0, "count": 1, "axis": ""}, "'axis'"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "halo": -1}, "'halo'"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "part": "bogus"}, "'part'"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (3,), "stop": (2,)}, "start < stop"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (0, 1), "stop": (2, 3)}, "names 1"),
        ({"of": "a", "index": 0, "count": True, "axis": "rows"}, "'count'"),
        ({"of": "a", "index": False, "count": 2, "axis": "rows"}, "'index'"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "halo": 1.0}, "'halo'"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (True,), "stop": (2,)}, "start < stop"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (0,), "stop": (2.0,)}, "start < stop"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (0,), "stop": ()}, "one entry per axis"),
        ({"of": "a", "index": 0, "count": 1, "axis": "rows", "start": (), "stop": (1,)}, "one entry per axis"),
        ({"of": "a", "index": 0, "count": 1, "axis": "heads,queries", "start": (0,), "stop": (1,)}, "names 2"),
        ({"of": "a", "index": 0, "count": 1, "axis": "heads, ", "start": (0, 0), "stop": (1, 1)}, "'axis'"),
    ],
)
def test_bad_tile_raises(kwargs, msg):
    # well-formed tiles of the same axes first: the quick check for what the builders make (millions of
    # tiles) must refuse exactly what the full check refuses, whatever it has seen
    Tile("ok", 0, 1, "rows", start=(0,), stop=(1,))
    Tile("ok", 0, 1, "heads,queries", start=(0, 0), stop=(1, 1))
    with pytest.raises(GraphError, match=msg):
        Tile(**kwargs)


@pytest.mark.parametrize(
    "mutate, msg",
    [
        (lambda t: t.pop("count"), "lacks count"),
        (lambda t: t.update(index=5), "'index' must be"),
        (lambda t: t.update(index=True), "'index' must be"),
        (lambda t: t.update(halo=-2), "'halo'"),
        (lambda t: t.update(colour="red"), "unknown field"),
        (lambda t: t.update(start=3), "list of integers"),
        (lambda t: t.update(start=[0.5], stop=[2]), "integer ranges"),
    ],
)
def test_bad_tile_in_file(tmp_path, mutate, msg):
    d = graph_to_dict(_tiled_graph())
    mutate(d["nodes"][1]["tile"])
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    with pytest.raises(GraphError, match=msg) as e:
        load_graph(p)
    assert "nodes[1]" in str(e.value)


def test_tile_not_an_object(tmp_path):
    d = graph_to_dict(_tiled_graph())
    d["nodes"][0]["tile"] = [1, 2]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    with pytest.raises(GraphError, match="must be an object"):
        load_graph(p)


def test_edges_given_any_way_make_the_same_graph_and_bad_ones_are_named():
    nodes = tuple(Node(f"n{i}", "forward", 4, 1.0) for i in range(4))
    want = Graph("g", nodes, ((0, 1), (1, 2), (0, 2), (2, 3))).edges
    assert want == ((0, 1), (0, 2), (1, 2), (2, 3))
    assert Graph("g", nodes, [[2, 3], [0, 1], [1, 2], [0, 2], (0, 1)]).edges == want  # lists, a repeat
    assert Graph("g", nodes, (e for e in [(2, 3), (0, 1), (1, 2), (0, 2)])).edges == want  # a generator
    with pytest.raises(GraphError, match="goes backwards"):
        Graph("g", nodes, ((0, 1), (2, 1)))
    with pytest.raises(GraphError, match="outside 0..3"):
        Graph("g", nodes, ((0, 1), (2, 4)))
    with pytest.raises(GraphError, match="must be a pair"):
        Graph("g", nodes, ((0, 1), (0, 1, 2)))
