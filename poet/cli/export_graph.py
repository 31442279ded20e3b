"""``poet export-graph``: a zoo network's costed graph written as a ``poet-graph/1`` file."""

from __future__ import annotations

from ..console import check_out_path
from ..units import BATCH


def cmd_export(a) -> int:
    from ..graph.io import save_graph
    from ..solve.api import costed_graph

    check_out_path(a.out, a.force)
    g = costed_graph(a.model, a.device, batch_size=a.batch_size)
    save_graph(g, a.out)
    print(f"Wrote {a.out}: {g.name} on {a.device}, {len(g)} nodes, {len(g.edges)} edges (poet-graph/1)")
    return 0


def register(subparsers) -> None:
    e = subparsers.add_parser("export-graph", help="write a zoo network's costed graph as poet-graph/1 JSON")
    e.add_argument("--model", required=True)
    e.add_argument("--device", required=True)
    e.add_argument("--batch-size", type=BATCH, default=1)
    e.add_argument("--out", required=True)
    e.add_argument("--force", action="store_true")
    e.set_defaults(func=cmd_export)
