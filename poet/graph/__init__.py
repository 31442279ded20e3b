"""Training dataflow graphs: the structural and the costed form, files, builders."""

from .core import (
    BACKWARD,
    FORWARD,
    CostedGraph,
    CostedNode,
    Graph,
    GraphError,
    Node,
    Tile,
)
from .io import GRAPH_FORMAT, graph_from_dict, graph_to_dict, load_graph, save_graph

__all__ = [
    "BACKWARD",
    "FORWARD",
    "GRAPH_FORMAT",
    "CostedGraph",
    "CostedNode",
    "Graph",
    "GraphError",
    "Node",
    "Tile",
    "graph_from_dict",
    "graph_to_dict",
    "load_graph",
    "save_graph",
]
