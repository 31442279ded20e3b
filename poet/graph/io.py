"""The ``poet-graph/1`` file: a costed graph as JSON (documented in docs/formats.md)."""

from __future__ import annotations

from pathlib import Path

from ..fileio import atomic_write_text, json_text, read_json
from .core import COST_FIELDS as _COST_FIELDS
from .core import CostedGraph, CostedNode, GraphError, Tile
from .io_columns import decode_edges, decode_nodes, encode_edges, encode_nodes, is_encoded
from .weights import NO_TRAFFIC, Traffic, WeightStore

GRAPH_FORMAT = "poet-graph/1"


def graph_to_dict(g: CostedGraph, compact: bool = False) -> dict:
    """The ``poet-graph/1`` object; ``compact``: nodes and edges as columns (:mod:`.io_columns`)."""
    if compact:
        return {
            "format": GRAPH_FORMAT,
            "name": g.name,
            "fixed_ram_bytes": g.fixed_ram_bytes,
            "nodes": encode_nodes(g.nodes, tile_to_dict),
            "edges": encode_edges(g.edges),
            **({"meta": g.meta} if g.meta else {}),
            **({"weights": g.weights.to_dict()} if g.weights is not None else {}),
        }
    rows = [
        {
            "id": i,
            "name": nd.name,
            "kind": nd.kind,
            "ram_bytes": nd.ram_bytes,
            **{f: getattr(nd, f) for f in _COST_FIELDS},
            **({"tile": tile_to_dict(nd.tile)} if nd.tile is not None else {}),
            **({"weight_traffic": nd.weight_traffic.to_list()} if not nd.weight_traffic.empty else {}),
        }
        for i, nd in enumerate(g.nodes)
    ]
    return {
        "format": GRAPH_FORMAT,
        "name": g.name,
        "fixed_ram_bytes": g.fixed_ram_bytes,
        "nodes": rows,
        "edges": [[u, v] for u, v in g.edges],
        **({"meta": g.meta} if g.meta else {}),
        **({"weights": g.weights.to_dict()} if g.weights is not None else {}),
    }


def tile_to_dict(t: Tile) -> dict:
    d = {"of": t.of, "index": t.index, "count": t.count, "axis": t.axis, "halo": t.halo}
    if t.part != "output":
        d["part"] = t.part
    if t.start:
        d["start"], d["stop"] = list(t.start), list(t.stop)
    return d


_TILE_KEYS = ("of", "index", "count", "axis", "halo", "part", "start", "stop")


def tile_from_dict(raw) -> Tile:
    """A node's ``"tile"`` object; raises GraphError saying which field is wrong."""
    if not isinstance(raw, dict):
        raise GraphError('"tile" must be an object {"of", "index", "count", "axis", "halo"}')
    missing = [k for k in ("of", "index", "count", "axis") if k not in raw]
    if missing:
        raise GraphError(f'"tile" lacks {", ".join(missing)}')
    unknown = sorted(set(raw) - set(_TILE_KEYS))
    if unknown:
        raise GraphError(f'"tile" has unknown field(s) {", ".join(unknown)}; known: {", ".join(_TILE_KEYS)}')
    for k in ("start", "stop"):
        if k in raw and not isinstance(raw[k], list):
            raise GraphError(f'"tile".{k} must be a list of integers, one per axis')
    return Tile(
        of=raw["of"],
        index=raw["index"],
        count=raw["count"],
        axis=raw["axis"],
        halo=raw.get("halo", 0),
        part=raw.get("part", "output"),
        start=tuple(raw.get("start", ())),
        stop=tuple(raw.get("stop", ())),
    )


def graph_from_dict(d: dict, source: str = "graph") -> CostedGraph:
    def bad(msg: str) -> GraphError:
        return GraphError(f"{source}: {msg}")

    if not isinstance(d, dict):
        raise bad('expected a JSON object with "format": "poet-graph/1"')
    if d.get("format") != GRAPH_FORMAT:
        raise bad(f'"format" is {d.get("format")!r}; expected {GRAPH_FORMAT!r}')
    for key in ("nodes", "edges"):
        if not isinstance(d.get(key), list) and not is_encoded(d.get(key)):
            raise bad(f"missing list {key!r}")
    nodes = []
    try:
        rows = decode_nodes(d["nodes"]) if is_encoded(d["nodes"]) else d["nodes"]
        edges = list(decode_edges(d["edges"])) if is_encoded(d["edges"]) else d["edges"]
    except GraphError as e:
        raise bad(str(e)) from None
    for pos, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise bad(f"nodes[{pos}] is not an object")
        if raw.get("id", pos) != pos or isinstance(raw.get("id"), bool):
            raise bad(f"nodes[{pos}] has id {raw.get('id')!r}; ids must be 0..n-1 in list order")
        missing = [k for k in ("kind", "ram_bytes", *_COST_FIELDS) if k not in raw]
        if missing:
            raise bad(f"nodes[{pos}] lacks {', '.join(missing)}")
        tile = None
        if raw.get("tile") is not None:
            try:
                tile = tile_from_dict(raw["tile"])
            except GraphError as e:
                raise bad(f"nodes[{pos}]: {e}") from None
        traffic = NO_TRAFFIC
        if raw.get("weight_traffic") is not None:
            try:
                traffic = Traffic.from_value(raw["weight_traffic"], "weight_traffic")
            except GraphError as e:
                raise bad(f"nodes[{pos}]: {e}") from None
        try:
            nodes.append(
                CostedNode(
                    name=str(raw.get("name", f"n{pos}")),
                    kind=raw["kind"],
                    ram_bytes=raw["ram_bytes"],
                    **{f: raw[f] for f in _COST_FIELDS},
                    tile=tile,
                    weight_traffic=traffic,
                )
            )
        except TypeError as e:
            raise bad(f"nodes[{pos}]: {e}") from None
    for k, e in enumerate(edges):
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in e)):
            raise bad(f"edges[{k}] is {str(e)[:60]}; every edge must be a pair of integer node ids [u, v]")
    meta = d.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise bad(f'"meta" must be an object of notes like {{"device": "m4"}}, got {type(meta).__name__}')
    try:
        weights = WeightStore.from_dict(d["weights"]) if d.get("weights") is not None else None
    except (GraphError, TypeError) as e:
        raise bad(str(e)) from None
    try:
        return CostedGraph(
            name=str(d.get("name", source)),
            nodes=tuple(nodes),
            edges=tuple((u, v) for u, v in edges),
            fixed_ram_bytes=d.get("fixed_ram_bytes", 0),
            meta=meta or {},
            weights=weights,
        )
    except GraphError as e:
        raise bad(str(e)) from None


def load_graph(path: str | Path) -> CostedGraph:
    """The ``poet-graph/1`` file at ``path``; :class:`GraphError` naming the file and field otherwise."""
    return graph_from_dict(read_json(path, "graph file", GraphError), source=str(path))


def save_graph(g: CostedGraph, path: str | Path) -> None:
    """Write ``g`` as ``poet-graph/1`` JSON, atomically (a failed write leaves the old file)."""
    atomic_write_text(path, json_text(graph_to_dict(g), f"graph {g.name!r}"))
