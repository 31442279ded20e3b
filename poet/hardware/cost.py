"""The cost model: a structural graph on a device becomes a costed graph.

Kept apart from the device data so it can be replaced (e.g. by a calibrated
model fitted to measurements) without touching solvers: anything that maps a
:class:`Graph` and a :class:`Device` to a :class:`CostedGraph` will do.
"""

from __future__ import annotations

import math
from typing import Protocol

from ..graph.core import COST_FIELDS, CostedGraph, CostedNode, Graph, GraphError
from .device import Device, DeviceError, load_device
from .instructions import price_by_instructions
from .profile_model import price_program


class CostModel(Protocol):
    def __call__(self, graph: Graph, device: Device, fixed_ram_bytes: int = 0) -> CostedGraph: ...


def linear_cost_model(graph: Graph, device: Device | str, fixed_ram_bytes: int = 0) -> CostedGraph:
    """The paper's model.

    compute time = FLOPs / speed; compute energy = FLOPs x joules-per-FLOP;
    page time = latency + bytes / throughput; page energy = page time x storage power.
    """
    dev = load_device(device)
    if dev.instructions is not None:  # an instruction profile that measured this graph's nodes
        priced = price_by_instructions(graph, dev.instructions, dev.name, fixed_ram_bytes)
        if priced is not None:
            return priced
    if dev.families:  # a measured profile: per-family latency + FLOPs / rate (profile_model.py)
        from .profile_model import costed_node, op_seconds

        nodes = tuple(
            costed_node(
                dev,
                nd.name,
                nd.kind,
                int(nd.output_bytes),
                op_seconds(dev, nd.op, nd.flops) + dev.free_overhead_s,
                tile=nd.tile,
            )
            for nd in graph.nodes
        )
        return CostedGraph(
            name=graph.name,
            nodes=nodes,
            edges=graph.edges,
            fixed_ram_bytes=fixed_ram_bytes,
            meta={"device": dev.name, "param_bytes": graph.param_bytes, **graph.meta},
        )
    nodes = []
    for nd in graph.nodes:
        b = int(nd.output_bytes)
        t_in = dev.read_latency_s + b / dev.read_bytes_per_s
        t_out = dev.write_latency_s + b / dev.write_bytes_per_s
        nodes.append(
            CostedNode(
                name=nd.name,
                kind=nd.kind,
                ram_bytes=b,
                compute_time_s=nd.flops / dev.flops_per_s,
                compute_energy_j=nd.flops * dev.joules_per_flop,
                pagein_time_s=t_in,
                pagein_energy_j=t_in * dev.storage_power_w,
                pageout_time_s=t_out,
                pageout_energy_j=t_out * dev.storage_power_w,
                tile=nd.tile,
            )
        )
    meta = {"device": dev.name, "param_bytes": graph.param_bytes, **graph.meta}
    try:
        return CostedGraph(
            name=graph.name, nodes=tuple(nodes), edges=graph.edges, fixed_ram_bytes=fixed_ram_bytes, meta=meta
        )
    except GraphError as e:
        if not all(math.isfinite(getattr(nd, f)) for nd in nodes for f in COST_FIELDS):
            # a rate so small (or power so large) that a cost overflows: the profile is at fault
            raise DeviceError(
                f"device {dev.name} ({dev.path or 'given'}): its rates make a cost that is not "
                f"finite ({e}); check the profile's speeds and powers"
            ) from None
        raise


def costed_program(program, device: Device | str = "m4", fixed_ram_bytes: int | None = None) -> CostedGraph:
    """The costed graph of a traced program (:class:`~poet.graph.torch_program.TorchProgram`) on
    ``device``; fixed RAM (params, grads, buffers, batch, optimizer state) is the program's unless
    given.  A measured profile prices each aten op by its family; any other device by its linear
    cost model.  (Once ``TorchProgram.costed``: the pricing lives here, above the graph.)"""
    fixed = program.fixed_ram_bytes if fixed_ram_bytes is None else int(fixed_ram_bytes)
    dev = load_device(device)
    if dev.families and dev.instructions is None:
        return price_program(program, dev, fixed)
    return linear_cost_model(program.graph, dev, fixed)
