"""Pricing with a measured profile: operator families, per-op time, costed graphs of traced programs.

A measured profile (``poet profile``) describes compute per *operator family*
(convolutions, matrix products, norms, ...) as ``latency + FLOPs / rate``: the
latency is what a small op costs however few FLOPs it does (dispatch, the
executor's bookkeeping), the rate is the family's throughput.  An op whose
family the profile did not measure falls back to the profile's ``other``
family, then to plain ``FLOPs / flops_per_s``.

No torch import here: a traced program is priced from the op names and FLOPs
recorded at extraction.
"""

from __future__ import annotations

from ..graph.core import CostedGraph, CostedNode
from .device import Device

FAMILIES = (
    "conv",
    "conv_backward",
    "matmul",
    "norm",
    "softmax",
    "reduction",
    "embedding",
    "random",
    "elementwise",
    "other",
)

_BY_NAME = {
    "convolution": "conv",
    "_convolution": "conv",
    "conv2d": "conv",
    "conv1d": "conv",
    "convolution_backward": "conv_backward",
    "mm": "matmul",
    "addmm": "matmul",
    "bmm": "matmul",
    "baddbmm": "matmul",
    "matmul": "matmul",
    "linear": "matmul",
    "_scaled_dot_product_flash_attention_for_cpu": "matmul",
    "_softmax": "softmax",
    "softmax": "softmax",
    "_log_softmax": "softmax",
    "log_softmax": "softmax",
    "_softmax_backward_data": "softmax",
    "_log_softmax_backward_data": "softmax",
    "sum": "reduction",
    "mean": "reduction",
    "amax": "reduction",
    "amin": "reduction",
    "max": "reduction",
    "min": "reduction",
    "var": "reduction",
    "var_mean": "reduction",
    "std": "reduction",
    "norm": "reduction",
    "linalg_vector_norm": "reduction",
    "nll_loss_forward": "reduction",
    "nll_loss_backward": "reduction",
    "argmax": "reduction",
    "embedding": "embedding",
    "embedding_dense_backward": "embedding",
    "native_dropout": "random",
    "native_dropout_backward": "random",
    "bernoulli": "random",
    "rand": "random",
    "randn": "random",
    "rand_like": "random",
}


def op_family(op: str) -> str:
    """The family of an aten op name as recorded at extraction (``aten.convolution.default`` -> ``conv``)."""
    parts = op.split(".")
    base = parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]
    if base in _BY_NAME:
        return _BY_NAME[base]
    if "norm" in base and ("batch" in base or "layer" in base or "group" in base):
        return "norm"
    if not op or base.startswith("group("):
        return "other"
    return "elementwise"


def op_seconds(dev: Device, op: str, flops: float) -> float:
    """Time of one op (or, for a plain node without a family, one node) on ``dev``."""
    if not dev.families:
        return flops / dev.flops_per_s
    fams = {f.name: f for f in dev.families}
    f = fams.get(op_family(op)) or fams.get("other")
    if f is None:
        return flops / dev.flops_per_s
    return f.latency_s + flops / f.flops_per_s


def paging_seconds(dev: Device, nbytes: int, free_s: float | None = None) -> tuple[float, float]:
    """(page-in, page-out) seconds of ``nbytes`` from the storage fit; a page-in's later free is included
    (``free_s``, default the profile's ``free_overhead_s``)."""
    free = dev.free_overhead_s if free_s is None else free_s
    t_in = dev.read_latency_s + nbytes / dev.read_bytes_per_s + free + dev.page_in_overhead_s
    t_out = dev.write_latency_s + nbytes / dev.write_bytes_per_s + dev.page_out_overhead_s
    return t_in, t_out


def costed_node(
    dev: Device, name: str, kind: str, nbytes: int, compute_s: float, free_s: float | None = None, tile=None
) -> CostedNode:
    """A node priced on ``dev`` from its compute seconds (energy: seconds x power) and its bytes."""
    t_in, t_out = paging_seconds(dev, nbytes, free_s)
    return CostedNode(
        name=name,
        kind=kind,
        ram_bytes=int(nbytes),
        compute_time_s=compute_s,
        compute_energy_j=compute_s * dev.compute_power_w,
        pagein_time_s=t_in,
        pagein_energy_j=t_in * dev.storage_power_w,
        pageout_time_s=t_out,
        pageout_energy_j=t_out * dev.storage_power_w,
        tile=tile,
    )


def price_program(program, dev: Device, fixed_ram_bytes: int, costs: str = "profile") -> CostedGraph:
    """The costed graph of a traced :class:`~poet.graph.torch_export.TorchProgram` on a measured profile.

    A node's compute time is the sum of its aten ops' family times plus one ``free`` (every computed
    value is freed once); energy is time x the profile's compute power.
    """
    g = program.graph
    nodes = []
    for v, nd in enumerate(g.nodes):
        secs = sum(op_seconds(dev, program.units[u].op, program.units[u].flops) for u in program.groups[v])
        nodes.append(costed_node(dev, nd.name, nd.kind, nd.output_bytes, secs + dev.free_overhead_s, tile=nd.tile))
    meta = {"device": dev.name, "costs": costs, "param_bytes": g.param_bytes, **g.meta}
    return CostedGraph(name=g.name, nodes=tuple(nodes), edges=g.edges, fixed_ram_bytes=fixed_ram_bytes, meta=meta)


def price_measured(graph, dev: Device, node_seconds, free_s: float, fixed_ram_bytes: int) -> CostedGraph:
    """A costed graph whose compute times are measured per node (plus one measured ``free`` each) and
    whose paging comes from ``dev``'s storage fit; energy = time x ``dev``'s powers."""
    if len(node_seconds) != len(graph.nodes):
        raise ValueError(f"{len(node_seconds)} measured times for {len(graph.nodes)} nodes")
    nodes = tuple(
        costed_node(dev, nd.name, nd.kind, nd.output_bytes, float(t) + free_s, free_s, tile=nd.tile)
        for nd, t in zip(graph.nodes, node_seconds)
    )
    meta = {"device": dev.name, "costs": "measured", "param_bytes": graph.param_bytes, **graph.meta}
    return CostedGraph(name=graph.name, nodes=nodes, edges=graph.edges, fixed_ram_bytes=fixed_ram_bytes, meta=meta)


__all__ = ["FAMILIES", "costed_node", "op_family", "op_seconds", "paging_seconds", "price_measured", "price_program"]
