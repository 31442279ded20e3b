"""The compact (columnar) nodes and edges of a ``poet-graph/1`` object (docs/formats.md, "Compact graphs").

A tiled BERT at 32 KiB has 1.3 million nodes and 7 million edges; as one object per node and one pair
per edge, most of a schedule file's bytes are field names and brackets.  Here each node field is one
list, and the edges are two lists of small numbers (each edge's source minus the previous edge's
source, and its target minus its source).  The reader turns them back into the plain rows one at a
time, so :func:`poet.graph.io.graph_from_dict` checks them exactly as it checks a plain file.
"""

from __future__ import annotations

from collections.abc import Iterator

from .core import COST_FIELDS, GraphError

NODES_ENCODING = "poet-nodes/columns-1"
EDGES_ENCODING = "poet-edges/delta-1"
NODE_COLUMNS = ("name", "kind", "ram_bytes", *COST_FIELDS, "tile")
OPTIONAL_COLUMNS = ("weight_traffic",)  # present when some node moves streamed weights


def encode_nodes(nodes, tile_to_dict) -> dict:
    """Costed nodes as columns (a node's id is its position; ``tile`` null when it has none)."""
    out: dict = {"encoding": NODES_ENCODING, "count": len(nodes)}
    for c in NODE_COLUMNS[:-1]:
        out[c] = [getattr(nd, c) for nd in nodes]
    out["tile"] = [None if nd.tile is None else tile_to_dict(nd.tile) for nd in nodes]
    if any(not nd.weight_traffic.empty for nd in nodes):  # streamed weights (poet.graph.weights)
        out["weight_traffic"] = [None if nd.weight_traffic.empty else nd.weight_traffic.to_list() for nd in nodes]
    return out


def encode_edges(edges) -> dict:
    us, vs = [], []
    prev = 0
    for u, v in edges:
        us.append(u - prev)
        vs.append(v - u)
        prev = u
    return {"encoding": EDGES_ENCODING, "count": len(us), "from": us, "to": vs}


def is_encoded(raw) -> bool:
    return isinstance(raw, dict) and "encoding" in raw


def _columns(raw: dict, encoding: str, names, what: str) -> int:
    """The row count of a columns object; GraphError naming the field when it is not one."""
    if raw.get("encoding") != encoding:
        raise GraphError(f'{what}: unknown encoding {str(raw.get("encoding"))[:40]!r}; this version reads "{encoding}"')
    n = raw.get("count")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise GraphError(f"{what}.count must be the number of rows (an integer >= 0), got {str(n)[:40]}")
    for c in names:
        if not isinstance(raw.get(c), list) or len(raw[c]) != n:
            raise GraphError(f"{what}.{c} must be a list of {n} values, one per row")
    return n


def decode_nodes(raw: dict) -> Iterator[dict]:
    """The plain node rows of a columns object, one at a time (GraphError at once when its columns are
    wrong; each row is then checked as a plain one)."""
    names = NODE_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if c in raw)
    return _rows(raw, names, _columns(raw, NODES_ENCODING, names, '"nodes"'))


def _rows(raw: dict, names: tuple, n: int) -> Iterator[dict]:
    cols = [raw[c] for c in names]
    for i in range(n):
        row = {c: col[i] for c, col in zip(names, cols, strict=True)}
        for c in ("tile", *OPTIONAL_COLUMNS):
            if c in row and row[c] is None:
                del row[c]
        yield row


def decode_edges(raw: dict) -> Iterator[list]:
    """The ``[u, v]`` pairs of a delta object, one at a time (GraphError when its columns are wrong)."""
    n = _columns(raw, EDGES_ENCODING, ("from", "to"), '"edges"')
    us, vs = raw["from"], raw["to"]
    u = 0
    for k in range(n):
        du, dv = us[k], vs[k]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (du, dv)):
            raise GraphError(f'"edges".from[{k}] and .to[{k}] must be integers, got {str(du)[:20]}, {str(dv)[:20]}')
        u += du
        yield [u, u + dv]
