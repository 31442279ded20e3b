"""Price a weight placement into a costed graph: what ``--weights flash|ram|stream`` changes.

``flash`` changes nothing but the record (the paper's setting: the parameters are read as if free);
``ram`` adds the parameters' bytes to the fixed RAM; ``stream`` adds the staging buffer to the fixed
RAM and, to every node, the storage time and energy of the weight traffic one computation of it
moves (:func:`poet.graph.weight_traffic.derive_traffic`), at the device's storage prices.  The traffic
goes into each node's compute cost, so every solver sees it: a recompute pays it again.
"""

from __future__ import annotations

from dataclasses import replace

from ..graph.core import CostedGraph, Graph, GraphError
from ..graph.tiling_ranges import WEIGHTED
from ..graph.weight_traffic import derive_traffic, layer_of
from ..graph.weights import FLASH, PLACEMENTS, RAM, STREAM, WeightStore
from .device import load_device


def layer_params(graph: Graph) -> tuple[tuple[str, int], ...]:
    """(layer, parameter bytes) of the forward nodes that hold parameters, in graph order."""
    out: dict[str, int] = {}
    for nd in graph.nodes:
        if nd.param_bytes and nd.kind == "forward":
            lay = layer_of(nd.name, nd.kind, nd.tile)
            out[lay] = out.get(lay, 0) + int(nd.param_bytes)
    return tuple(out.items())


def dense_layers(graph: Graph) -> tuple[str, ...]:
    """The layers with parameters whose every output channel reads all input channels (conv, linear)."""
    out = {layer_of(nd.name, nd.kind, nd.tile) for nd in graph.nodes if nd.param_bytes and nd.op in WEIGHTED}
    return tuple(lay for lay, _ in layer_params(graph) if lay in out)


def weight_store(graph: Graph, device, placement: str, staging_bytes: int = 0) -> WeightStore:
    if placement not in PLACEMENTS:
        raise GraphError(f"--weights {placement!r}: choose one of {', '.join(PLACEMENTS)}")
    layers = layer_params(graph)
    total = sum(p for _, p in layers)
    if placement != STREAM:
        return WeightStore(placement, total)
    dev = load_device(device)
    return WeightStore(
        STREAM,
        total,
        staging_bytes=int(staging_bytes),
        read_latency_s=dev.read_latency_s,
        read_bytes_per_s=dev.read_bytes_per_s,
        write_latency_s=dev.write_latency_s,
        write_bytes_per_s=dev.write_bytes_per_s,
        power_w=dev.storage_power_w,
        layers=layers,
        dense=dense_layers(graph),
    )


def place_weights(costed: CostedGraph, graph: Graph, store: WeightStore) -> CostedGraph:
    """``costed`` (the pricing of ``graph``, node for node) with ``store``'s placement priced in."""
    if len(costed.nodes) != len(graph.nodes):
        raise GraphError(f"place_weights: the costed graph has {len(costed)} nodes, its structure {len(graph)}")
    fixed = costed.fixed_ram_bytes
    nodes = costed.nodes
    if store.placement == RAM:
        fixed += store.param_bytes
    elif store.placement == STREAM:
        fixed += store.staging_bytes
        traffic = derive_traffic([(n.name, n.kind, n.tile, int(n.output_bytes)) for n in graph.nodes], store)
        nodes = tuple(
            replace(
                nd,
                compute_time_s=nd.compute_time_s + store.seconds(t),
                compute_energy_j=nd.compute_energy_j + store.joules(t),
                weight_traffic=t,
            )
            for nd, t in zip(costed.nodes, traffic)
        )
    meta = dict(costed.meta)
    if store.placement != FLASH:
        meta["weights"] = store.placement
    return CostedGraph(costed.name, nodes, costed.edges, fixed, meta, store)
