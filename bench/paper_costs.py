"""The original POET code's cost model, rebuilt on our layer lists (for bench/paper.py).

The original system (Patil et al.'s public code: ``power_computation.py`` and ``chipsets.py``)
prices a network differently from ``poet.graph.zoo`` + ``poet.hardware.linear_cost_model``:

* **Backward dependencies.**  Its ``GradientLayer`` depends on the layer's output, *every* input
  and the incoming gradient, whatever the layer is; ours read only what autograd keeps (the input
  of a conv, the output of a ReLU, nothing for an add).  More tensors live into the backward pass.
* **FLOPs.**  A gradient costs twice its forward layer; a convolution
  ``2 k^2 numel(input) C_out + numel(output)`` (stride ignored, "for legacy reasons"), a linear
  layer ``2 (in + 1) out + out``, a BatchNorm ``2 numel``, a ReLU ``numel``, a pool
  ``2 k^2 numel(output)``, the loss ``numel(logits) * classes``.
* **Paging time** does not enter its runtime constraint: solve with ``paging_time="hidden"``.

The device constants of ``chipsets.py`` are the ones our built-in profiles carry (docs/devices.md),
so the same device file prices both; only the graph changes.  Layers the original describes with
its own BERT classes (attention, GELU, LayerNorm) keep our FLOPs: that part is not rebuilt.
"""

from __future__ import annotations

import math

from poet.graph.core import BACKWARD, FORWARD, Graph, Node
from poet.graph.zoo import build_model, model_layers
from poet.hardware import linear_cost_model


def _original_flops(layer, in_numel: int, out_numel: int, in_rank: int) -> float | None:
    op = layer.op
    if op == "conv2d":
        cout = layer.shape[0]
        return 2.0 * layer.kernel * layer.kernel * in_numel * cout + out_numel
    if op == "linear" and in_rank == 1:  # the original's LinearLayer takes (batch, features) only
        fan_in = in_numel
        return 2.0 * (fan_in + 1) * out_numel + out_numel
    if op == "batchnorm":
        return 2.0 * in_numel
    if op in ("relu", "add", "flatten", "dropout"):
        return float(out_numel)
    if op == "maxpool":
        return 2.0 * layer.kernel * layer.kernel * out_numel
    if op == "avgpool":
        return 2.0 * in_numel
    return None  # not rebuilt: keep ours


def original_graph(model: str) -> Graph:
    """``model``'s training graph with the original code's dependencies and FLOPs (batch 1)."""
    ours = build_model(model)
    layers = model_layers(model).layers
    L = len(layers)
    nodes = list(ours.nodes)
    edges = set(ours.edges)
    numel = [math.prod(lay.shape) for lay in layers]
    fwd_flops = []
    for i, lay in enumerate(layers):
        ins = [x for x in lay.inputs if x >= 0]
        in_shape = layers[ins[0]].shape if ins else model_layers(model).input_shape
        f = _original_flops(lay, math.prod(in_shape), numel[i], len(in_shape))
        fwd_flops.append(nodes[i].flops if f is None else f)
    classes = numel[L - 1]
    loss_flops = float(numel[L - 1] * classes)
    for i in range(L):
        nodes[i] = Node(nodes[i].name, FORWARD, nodes[i].output_bytes, fwd_flops[i], nodes[i].param_bytes, nodes[i].op)
    nodes[L] = Node("loss", FORWARD, nodes[L].output_bytes, loss_flops, 0, nodes[L].op)
    nodes[L + 1] = Node("bwd.loss", BACKWARD, nodes[L + 1].output_bytes, 2 * loss_flops, 0, nodes[L + 1].op)
    for i, lay in enumerate(layers):
        b = L + 1 + (L - i)
        nd = nodes[b]
        nodes[b] = Node(nd.name, BACKWARD, nd.output_bytes, 2 * fwd_flops[i], 0, nd.op)
        edges.add((i, b))  # the layer's output
        edges.update((x, b) for x in lay.inputs if x >= 0)  # and every input
    meta = dict(ours.meta, cost_model="original POET code (rebuilt)")
    return Graph(name=f"{model}-original", nodes=tuple(nodes), edges=tuple(sorted(edges)), meta=meta)


def costed(model: str, device: str, cost_model: str):
    """The costed graph of ``model`` on ``device`` under ``cost_model`` ("ours" or "original")."""
    g = build_model(model) if cost_model == "ours" else original_graph(model)
    return linear_cost_model(g, device)
