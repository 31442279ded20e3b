"""The ``poet-graph/1`` file: a costed graph as JSON (documented in docs/formats.md)."""
from __future__ import annotations

import json
from pathlib import Path

from .core import CostedGraph, CostedNode, GraphError, Tile

GRAPH_FORMAT = "poet-graph/1"
_COST_FIELDS = ("compute_time_s", "compute_energy_j", "pagein_time_s", "pagein_energy_j",
                "pageout_time_s", "pageout_energy_j")


def graph_to_dict(g: CostedGraph) -> dict:
    return {
        "format": GRAPH_FORMAT,
        "name": g.name,
        "fixed_ram_bytes": g.fixed_ram_bytes,
        "nodes": [
            {"id": i, "name": nd.name, "kind": nd.kind, "ram_bytes": nd.ram_bytes,
             **{f: getattr(nd, f) for f in _COST_FIELDS},
             **({"tile": tile_to_dict(nd.tile)} if nd.tile is not None else {})}
            for i, nd in enumerate(g.nodes)
        ],
        "edges": [[u, v] for u, v in g.edges],
        **({"meta": g.meta} if g.meta else {}),
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
        raise GraphError("\"tile\" must be an object {\"of\", \"index\", \"count\", \"axis\", \"halo\"}")
    missing = [k for k in ("of", "index", "count", "axis") if k not in raw]
    if missing:
        raise GraphError(f"\"tile\" lacks {', '.join(missing)}")
    unknown = sorted(set(raw) - set(_TILE_KEYS))
    if unknown:
        raise GraphError(f"\"tile\" has unknown field(s) {', '.join(unknown)}; known: {', '.join(_TILE_KEYS)}")
    for k in ("start", "stop"):
        if k in raw and not isinstance(raw[k], list):
            raise GraphError(f"\"tile\".{k} must be a list of integers, one per axis")
    return Tile(of=raw["of"], index=raw["index"], count=raw["count"], axis=raw["axis"],
                halo=raw.get("halo", 0), part=raw.get("part", "output"),
                start=tuple(raw.get("start", ())), stop=tuple(raw.get("stop", ())))


def graph_from_dict(d: dict, source: str = "graph") -> CostedGraph:
    def bad(msg: str) -> GraphError:
        return GraphError(f"{source}: {msg}")

    if not isinstance(d, dict):
        raise bad("expected a JSON object with \"format\": \"poet-graph/1\"")
    if d.get("format") != GRAPH_FORMAT:
        raise bad(f"\"format\" is {d.get('format')!r}; expected {GRAPH_FORMAT!r}")
    for key in ("nodes", "edges"):
        if not isinstance(d.get(key), list):
            raise bad(f"missing list {key!r}")
    nodes = []
    for pos, raw in enumerate(d["nodes"]):
        if not isinstance(raw, dict):
            raise bad(f"nodes[{pos}] is not an object")
        if raw.get("id", pos) != pos:
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
        try:
            nodes.append(CostedNode(
                name=str(raw.get("name", f"n{pos}")), kind=raw["kind"], ram_bytes=raw["ram_bytes"],
                **{f: raw[f] for f in _COST_FIELDS}, tile=tile))
        except TypeError as e:
            raise bad(f"nodes[{pos}]: {e}") from None
    edges = d["edges"]
    if not all(isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) for x in e) for e in edges):
        raise bad("every edge must be a pair of integer node ids [u, v]")
    try:
        return CostedGraph(name=str(d.get("name", source)), nodes=tuple(nodes),
                           edges=tuple((u, v) for u, v in edges),
                           fixed_ram_bytes=d.get("fixed_ram_bytes", 0), meta=d.get("meta") or {})
    except GraphError as e:
        raise bad(str(e)) from None


def load_graph(path: str | Path) -> CostedGraph:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise GraphError(f"cannot read graph file {path}: {e.strerror}") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    return graph_from_dict(d, source=str(path))


def save_graph(g: CostedGraph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_dict(g), indent=1))
