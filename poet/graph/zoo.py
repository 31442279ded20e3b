"""Benchmark networks as layer-level training graphs.

Each model is described once, layer by layer, with a tiny shape-tracking
builder (:mod:`poet.graph.zoo_layers`); :func:`build_model` then turns the
layer list into a :class:`Graph`:

* one forward node per layer, in layer order (node ids ``0 .. L-1``),
* a loss node (``L``) reading the logits,
* the loss's backward node (``L+1``), then one backward node per layer in
  reverse layer order.  A backward node's output is the gradient with respect
  to the layer's input(s) that are themselves nodes (the model input is data,
  so a layer reading only the data produces no input gradient: 0 bytes, and
  only its weight gradient is computed).

Backward dependencies follow what autograd really keeps alive:

* the incoming gradient: the backward nodes of *every* consumer of the
  layer's output (a residual branch point waits for all of its branches);
* only the forward tensors the derivative needs (see ``SAVES``): the input for
  conv / linear (weight gradient), batchnorm, layernorm, maxpool and GELU; the
  output for ReLU and softmax; both operands for an attention matmul; nothing
  for skip-add, flatten, dropout (seeded mask) and average pooling.

Sizes are float32 (4 bytes per element) times the batch size.  ``flops`` are
per node: forward from the shapes (conv ``2*K*K*Cin*Cout*Hout*Wout``, linear
``2*in*out`` per row, a few per element for element-wise layers), backward
about twice the forward for layers with weights (input gradient + weight
gradient) and a few per element for the rest.  Parameters (weights and biases)
are attached to forward nodes.  Everything is deterministic: the same call
gives an identical graph.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from .core import BACKWARD, FORWARD, Graph, GraphError, Node
from .zoo_layers import DATA, Layer, NetBuilder, numel

__all__ = [
    "DATA",
    "DTYPE_BYTES",
    "MODELS",
    "SAVES",
    "Layer",
    "ModelLayers",
    "build_model",
    "check_batch_size",
    "list_models",
    "loss_flops",
    "model_layers",
]

DTYPE_BYTES = 4

# Which forward tensors a layer's backward reads, besides the incoming gradient.
SAVES = {
    "conv2d": "input",
    "linear": "input",
    "batchnorm": "input",
    "layernorm": "input",
    "maxpool": "input",
    "gelu": "input",
    "matmul": "input",
    "relu": "output",
    "softmax": "output",
    "add": "none",
    "flatten": "none",
    "dropout": "none",
    "avgpool": "none",
}

# --------------------------------------------------------------------------
# architectures
# --------------------------------------------------------------------------


def _linear_net() -> NetBuilder:
    net = NetBuilder((784,))
    dims = [784, 128, 128, 64, 32, 10]
    x = DATA
    for i, out in enumerate(dims[1:], start=1):
        x = net.linear(f"fc{i}", x, out)
        if i < len(dims) - 1:
            x = net.relu(f"relu{i}", x)
    return net


_VGG16_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def _vgg16(input_hw: int, num_classes: int) -> NetBuilder:
    net = NetBuilder((3, input_hw, input_hw))
    x = DATA
    block, conv_i, pool_i = 1, 1, 1
    for v in _VGG16_CFG:
        if v == "M":
            x = net.maxpool(f"pool{pool_i}", x, 2, 2)
            pool_i += 1
            block += 1
            conv_i = 1
        else:
            x = net.conv(f"conv{block}_{conv_i}", x, v, 3, 1, 1, bias=True)
            x = net.relu(f"relu{block}_{conv_i}", x)
            conv_i += 1
    x = net.flatten("flatten", x)
    x = net.linear("fc6", x, 4096)
    x = net.relu("relu6", x)
    x = net.dropout("drop6", x)
    x = net.linear("fc7", x, 4096)
    x = net.relu("relu7", x)
    x = net.dropout("drop7", x)
    net.linear("fc8", x, num_classes)
    return net


def _conv_bn(net: NetBuilder, p: str, i: int, x: int, out: int, k: int, stride: int, pad: int, relu: bool) -> int:
    """Layer i of a residual block: conv{i} -> bn{i} (-> relu{i})."""
    y = net.batchnorm(f"{p}.bn{i}", net.conv(f"{p}.conv{i}", x, out, k, stride, pad))
    return net.relu(f"{p}.relu{i}", y) if relu else y


def _basic_block(net: NetBuilder, p: str, x: int, planes: int, stride: int) -> int:
    cin = net.shape(x)[0]
    y = _conv_bn(net, p, 1, x, planes, 3, stride, 1, relu=True)
    y = _conv_bn(net, p, 2, y, planes, 3, 1, 1, relu=False)
    y = net.add(f"{p}.add", y, _shortcut(net, p, x, cin, planes, stride))
    return net.relu(f"{p}.relu2", y)


def _bottleneck(net: NetBuilder, p: str, x: int, planes: int, stride: int) -> int:
    cin = net.shape(x)[0]
    out = planes * 4
    y = _conv_bn(net, p, 1, x, planes, 1, 1, 0, relu=True)
    y = _conv_bn(net, p, 2, y, planes, 3, stride, 1, relu=True)  # stride on the 3x3 conv (torchvision v1.5)
    y = _conv_bn(net, p, 3, y, out, 1, 1, 0, relu=False)
    y = net.add(f"{p}.add", y, _shortcut(net, p, x, cin, out, stride))
    return net.relu(f"{p}.relu3", y)


def _shortcut(net: NetBuilder, p: str, x: int, cin: int, out: int, stride: int) -> int:
    """The identity, or a 1x1 conv + BN where the block changes shape."""
    if stride == 1 and cin == out:
        return x
    sc = net.conv(f"{p}.downsample.conv", x, out, 1, stride, 0)
    return net.batchnorm(f"{p}.downsample.bn", sc)


def _resnet(block, depths, input_hw: int, num_classes: int, cifar_stem: bool) -> NetBuilder:
    net = NetBuilder((3, input_hw, input_hw))
    if cifar_stem:
        x = net.conv("conv1", DATA, 64, 3, 1, 1)
        x = net.batchnorm("bn1", x)
        x = net.relu("relu1", x)
    else:
        x = net.conv("conv1", DATA, 64, 7, 2, 3)
        x = net.batchnorm("bn1", x)
        x = net.relu("relu1", x)
        x = net.maxpool("maxpool", x, 3, 2, 1)
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), depths), start=1):
        for j in range(n):
            stride = 2 if (stage > 1 and j == 0) else 1
            x = block(net, f"layer{stage}.{j}", x, planes, stride)
    x = net.avgpool("avgpool", x, net.shape(x)[1])
    x = net.flatten("flatten", x)
    net.linear("fc", x, num_classes)
    return net


def _encoder_block(net: NetBuilder, p: str, x: int, heads: int) -> int:
    """Post-LN BERT encoder layer (attention + feed-forward, dropout omitted)."""
    hidden = net.shape(x)[-1]
    q = net.linear(f"{p}.attn.query", x, hidden)
    k = net.linear(f"{p}.attn.key", x, hidden)
    v = net.linear(f"{p}.attn.value", x, hidden)
    s = net.attention_scores(f"{p}.attn.scores", q, k, heads)
    a = net.softmax(f"{p}.attn.softmax", s)
    c = net.attention_context(f"{p}.attn.context", a, v)
    o = net.linear(f"{p}.attn.out", c, hidden)
    h = net.add(f"{p}.attn.add", o, x)
    h = net.layernorm(f"{p}.attn.ln", h)
    f = net.linear(f"{p}.ffn.fc1", h, 4 * hidden)
    f = net.gelu(f"{p}.ffn.gelu", f)
    f = net.linear(f"{p}.ffn.fc2", f, hidden)
    y = net.add(f"{p}.ffn.add", f, h)
    return net.layernorm(f"{p}.ffn.ln", y)


def _encoder(blocks: int, seq: int = 512, hidden: int = 768, heads: int = 12) -> NetBuilder:
    net = NetBuilder((seq, hidden))
    x = DATA
    for b in range(blocks):
        x = _encoder_block(net, f"block{b}", x, heads)
    return net


_BUILDERS = {
    "linear": lambda: _linear_net(),
    "vgg16": lambda: _vgg16(224, 1000),
    "vgg16_cifar": lambda: _vgg16(32, 10),
    "resnet18": lambda: _resnet(_basic_block, (2, 2, 2, 2), 224, 1000, False),
    "resnet18_cifar": lambda: _resnet(_basic_block, (2, 2, 2, 2), 32, 10, True),
    "resnet50": lambda: _resnet(_bottleneck, (3, 4, 6, 3), 224, 1000, False),
    "bert": lambda: _encoder(12),
    "transformer": lambda: _encoder(1),
}

MODELS: dict[str, str] = {
    "linear": "5-layer MLP 784-128-128-64-32-10 with ReLU (MNIST-sized, fits a microcontroller)",
    "vgg16": "VGG-16 (13 conv + 3 FC, no batchnorm), ImageNet 224x224, 1000 classes",
    "vgg16_cifar": "VGG-16 on CIFAR-10 32x32 (classifier 512-4096-4096-10), 10 classes",
    "resnet18": "ResNet-18 (basic blocks), ImageNet 224x224, 1000 classes",
    "resnet18_cifar": "ResNet-18 with CIFAR stem (3x3 conv, no maxpool), 32x32, 10 classes",
    "resnet50": "ResNet-50 (bottleneck blocks), ImageNet 224x224, 1000 classes",
    "bert": "BERT-base encoder: 12 blocks, hidden 768, 12 heads x 64, FFN 3072, seq 512 (no embeddings/head)",
    "transformer": "one BERT-base encoder block: hidden 768, 12 heads x 64, FFN 3072, seq 512",
}


def list_models() -> list[str]:
    return list(MODELS)


def loss_flops(logits_shape: tuple[int, ...]) -> tuple[float, float]:
    n = numel(logits_shape)
    return 4.0 * n, 2.0 * n  # forward (log-softmax + pick), backward (softmax - onehot)


def _to_graph(name: str, net: NetBuilder, batch: int) -> Graph:
    layers = net.layers
    L = len(layers)
    b = batch
    consumers: list[list[int]] = [[] for _ in layers]
    for i, lay in enumerate(layers):
        for x in dict.fromkeys(lay.inputs):
            if x != DATA:
                consumers[x].append(i)
    loss_id, loss_bwd = L, L + 1

    def bwd_id(layer: int) -> int:
        return L + 1 + (L - layer)

    nodes: list[Node] = []
    edges: list[tuple[int, int]] = []
    for i, lay in enumerate(layers):
        nodes.append(
            Node(lay.name, FORWARD, DTYPE_BYTES * b * numel(lay.shape), b * lay.flops, DTYPE_BYTES * lay.params, lay.op)
        )
        edges.extend((x, i) for x in dict.fromkeys(lay.inputs) if x != DATA)

    logits = L - 1
    lf, lb = loss_flops(layers[logits].shape)
    # per-sample loss values (reduced to the mean inside the loss backward)
    nodes.append(Node("loss", FORWARD, DTYPE_BYTES * b, b * lf, 0, "cross_entropy"))
    edges.append((logits, loss_id))
    nodes.append(Node("bwd.loss", BACKWARD, DTYPE_BYTES * b * numel(layers[logits].shape), b * lb, 0, "cross_entropy"))
    edges += [(loss_id, loss_bwd), (logits, loss_bwd)]

    for i in reversed(range(L)):
        lay = layers[i]
        me = bwd_id(i)
        assert me == len(nodes)
        nodes.append(Node(f"bwd.{lay.name}", BACKWARD, DTYPE_BYTES * b * lay.grad_numel, b * lay.bwd_flops, 0, lay.op))
        grads = [loss_bwd] if i == logits else [bwd_id(c) for c in consumers[i]]
        edges += [(g, me) for g in grads]
        saves = SAVES[lay.op]
        if saves == "input":
            edges += [(x, me) for x in dict.fromkeys(lay.inputs) if x != DATA]
        elif saves == "output":
            edges.append((i, me))

    meta = {
        "model": name,
        "batch_size": b,
        "input_shape": [b, *net.input_shape],
        "dtype_bytes": DTYPE_BYTES,
        "forward_layers": L,
    }
    return Graph(name=name, nodes=tuple(nodes), edges=tuple(edges), meta=meta)


@dataclass(frozen=True)
class ModelLayers:
    """A zoo model as its layer list: what :func:`build_model` turns into nodes."""

    name: str
    input_shape: tuple[int, ...]  # per sample
    layers: tuple[Layer, ...]


def model_layers(name: str) -> ModelLayers:
    """The layer list of zoo model ``name`` (shapes, kernels, FLOPs), for graph rewrites."""
    if not isinstance(name, str) or name not in _BUILDERS:
        raise GraphError(f"unknown model {name!r}; known models: {', '.join(list_models())}")
    net = _BUILDERS[name]()
    return ModelLayers(name, net.input_shape, tuple(net.layers))


def check_batch_size(batch_size) -> int:
    """``batch_size`` as an int, or a clear :class:`GraphError` when it is not a positive integer."""
    try:
        if isinstance(batch_size, bool):
            raise TypeError
        b = operator.index(batch_size)
    except TypeError:
        raise GraphError(f"batch_size must be a positive integer (>= 1), got {batch_size!r}") from None
    if b < 1:
        raise GraphError(f"batch_size must be a positive integer (>= 1), got {batch_size!r}")
    return b


def build_model(name: str, batch_size: int = 1) -> Graph:
    """The training graph of zoo model ``name`` (see :data:`MODELS`) at ``batch_size``, or of a
    generated graph's spec (``layered:250:1``, see :mod:`poet.graph.generate`)."""
    from .generate import is_spec

    if is_spec(name):
        from .generate import generate

        return generate(name, batch_size if isinstance(batch_size, int) and batch_size >= 1 else 1)
    if not isinstance(name, str) or name not in _BUILDERS:
        raise GraphError(f"unknown model {name!r}; known models: {', '.join(list_models())}")
    return _to_graph(name, _BUILDERS[name](), check_batch_size(batch_size))
