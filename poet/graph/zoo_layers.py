"""The layers zoo models are described with: per-sample shapes, FLOPs and parameters of each layer.

:class:`NetBuilder` tracks shapes as a network is written layer by layer
(``x = net.conv("conv1", x, 64, 3, 1, 1)``) and records, per layer, what the
training graph needs: output shape, forward and backward FLOPs, parameters,
the size of its input gradient, and the window (kernel, stride, padding) or
head count that graph rewrites such as tiling read.  :mod:`poet.graph.zoo`
writes its networks with it and turns the layer lists into graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DATA = -1  # pseudo layer id of the model input (not a node, never scheduled)

# Forward / backward FLOPs per element of the output (forward) or of the input
# (backward) for layers without weights.  Rough but shape-proportional.
_ELEMWISE = {
    "relu": (1, 1),
    "add": (1, 1),
    "dropout": (2, 1),
    "batchnorm": (4, 6),
    "layernorm": (5, 8),
    "gelu": (8, 10),
    "softmax": (3, 3),
    "flatten": (0, 0),
}


@dataclass(frozen=True)
class Layer:
    """One layer as the builder tracks it (public so graph rewrites such as tiling can read shapes)."""

    name: str
    op: str
    inputs: tuple[int, ...]  # layer ids read, DATA for the model input
    shape: tuple[int, ...]  # per-sample output shape
    flops: float  # per-sample forward FLOPs
    params: int  # number of parameters (weights + biases)
    bwd_flops: float  # per-sample backward FLOPs
    grad_numel: int  # per-sample elements of the gradient w.r.t. node inputs
    bwd_weight_flops: float = 0.0  # the part of bwd_flops that computes the weight gradient
    kernel: int = 1  # conv / pooling window along rows (1 for everything else)
    stride: int = 1
    pad: int = 0
    heads: int = 0  # attention matmuls: number of heads


def numel(shape) -> int:
    """Elements of a tensor of ``shape``."""
    return int(math.prod(shape))


class NetBuilder:
    """Shape-tracking layer list; methods return the new layer's id."""

    def __init__(self, input_shape: tuple[int, ...]):
        self.input_shape = tuple(input_shape)
        self.layers: list[Layer] = []

    # -- helpers ---------------------------------------------------------
    def shape(self, x: int) -> tuple[int, ...]:
        return self.input_shape if x == DATA else self.layers[x].shape

    def _add(self, name, op, inputs, shape, flops, params, bwd_weight, bwd_input_per_input, **window):
        """bwd_weight: weight-gradient FLOPs; bwd_input_per_input: FLOPs for each node input's grad;
        window: kernel / stride / pad (conv, pooling) or heads (attention), kept for graph rewrites."""
        inputs = tuple(inputs)
        node_inputs = [x for x in inputs if x != DATA]
        if op == "add":  # the same gradient tensor flows to both summands
            grad_numel = numel(shape) if node_inputs else 0
        else:
            grad_numel = sum(numel(self.shape(x)) for x in dict.fromkeys(node_inputs))
        bwd = bwd_weight + sum(bwd_input_per_input(x) for x in node_inputs)
        if any(l.name == name for l in self.layers):
            raise AssertionError(f"duplicate layer name {name}")
        self.layers.append(
            Layer(
                name,
                op,
                inputs,
                tuple(shape),
                float(flops),
                int(params),
                float(bwd),
                int(grad_numel),
                float(bwd_weight),
                **window,
            )
        )
        return len(self.layers) - 1

    def _elementwise(self, name, op, x, shape=None):
        shape = self.shape(x) if shape is None else shape
        f, b = _ELEMWISE[op]
        n_in = numel(self.shape(x))
        return self._add(name, op, [x], shape, f * numel(shape), 0, 0, lambda _x: b * n_in)

    # -- layers ----------------------------------------------------------
    def conv(self, name, x, cout, k, stride=1, pad=0, bias=False):
        cin, h, w = self.shape(x)
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        macs = k * k * cin * cout * ho * wo
        fwd = 2 * macs + (cout * ho * wo if bias else 0)
        params = k * k * cin * cout + (cout if bias else 0)
        return self._add(
            name,
            "conv2d",
            [x],
            (cout, ho, wo),
            fwd,
            params,
            2 * macs + (cout * ho * wo if bias else 0),
            lambda _x: 2 * macs,
            kernel=k,
            stride=stride,
            pad=pad,
        )

    def linear(self, name, x, out, bias=True):
        *rows, fin = self.shape(x)
        r = numel(rows)
        macs = r * fin * out
        fwd = 2 * macs + (r * out if bias else 0)
        params = fin * out + (out if bias else 0)
        return self._add(
            name, "linear", [x], (*rows, out), fwd, params, 2 * macs + (r * out if bias else 0), lambda _x: 2 * macs
        )

    def batchnorm(self, name, x):
        c = self.shape(x)[0]
        i = self._elementwise(name, "batchnorm", x)
        self.layers[i] = _replace_params(self.layers[i], 2 * c)
        return i

    def layernorm(self, name, x):
        d = self.shape(x)[-1]
        i = self._elementwise(name, "layernorm", x)
        self.layers[i] = _replace_params(self.layers[i], 2 * d)
        return i

    def relu(self, name, x):
        return self._elementwise(name, "relu", x)

    def gelu(self, name, x):
        return self._elementwise(name, "gelu", x)

    def softmax(self, name, x):
        return self._elementwise(name, "softmax", x)

    def dropout(self, name, x):
        return self._elementwise(name, "dropout", x)

    def flatten(self, name, x):
        return self._elementwise(name, "flatten", x, shape=(numel(self.shape(x)),))

    def maxpool(self, name, x, k, stride, pad=0):
        c, h, w = self.shape(x)
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        n_in = c * h * w
        return self._add(
            name,
            "maxpool",
            [x],
            (c, ho, wo),
            k * k * c * ho * wo,
            0,
            0,
            lambda _x: n_in,
            kernel=k,
            stride=stride,
            pad=pad,
        )

    def avgpool(self, name, x, k):
        c, h, w = self.shape(x)
        ho, wo = (h - k) // k + 1, (w - k) // k + 1
        n_in = c * h * w
        return self._add(name, "avgpool", [x], (c, ho, wo), n_in, 0, 0, lambda _x: n_in, kernel=k, stride=k)

    def add(self, name, a, b):
        if self.shape(a) != self.shape(b):
            raise AssertionError(f"{name}: cannot add {self.shape(a)} and {self.shape(b)}")
        n = numel(self.shape(a))
        return self._add(name, "add", [a, b], self.shape(a), n, 0, 0, lambda _x: n / 2)

    def attention_scores(self, name, q, k, heads):
        """Q K^T per head: (S, H*D) x (S, H*D) -> (H, S, S)."""
        s, hd = self.shape(q)
        d = hd // heads
        macs = heads * s * s * d
        return self._add(name, "matmul", [q, k], (heads, s, s), 2 * macs, 0, 0, lambda _x: 2 * macs, heads=heads)

    def attention_context(self, name, p, v):
        """P V per head: (H, S, S) x (S, H*D) -> (S, H*D)."""
        heads, s, _ = self.shape(p)
        _, hd = self.shape(v)
        macs = heads * s * s * (hd // heads)
        return self._add(name, "matmul", [p, v], (s, hd), 2 * macs, 0, 0, lambda _x: 2 * macs, heads=heads)


def _replace_params(layer: Layer, params: int) -> Layer:
    # Affine normalization: the (gamma, beta) gradient costs ~2 FLOPs per element on top.
    return Layer(
        layer.name,
        layer.op,
        layer.inputs,
        layer.shape,
        layer.flops,
        params,
        layer.bwd_flops + 2 * numel(layer.shape),
        layer.grad_numel,
        layer.bwd_weight_flops + 2 * numel(layer.shape),
    )
