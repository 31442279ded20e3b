"""Small zoo-layer networks the C backend's channel-group tests compile (written with NetBuilder)."""

from __future__ import annotations

from poet.graph.zoo import DATA, ModelLayers
from poet.graph.zoo_layers import NetBuilder


def block_net(channels=8, hw=(6, 6)) -> ModelLayers:
    """A residual block: 3x3 convolutions with BatchNorm and ReLU, an add, global pooling, a classifier."""
    net = NetBuilder((3, *hw))
    x = net.relu("relu1", net.batchnorm("bn1", net.conv("conv1", DATA, channels, 3, 1, 1)))
    y = net.relu("relu2", net.batchnorm("bn2", net.conv("conv2", x, channels, 3, 1, 1)))
    y = net.batchnorm("bn3", net.conv("conv3", y, channels, 3, 1, 1))
    y = net.relu("relu3", net.add("add", y, x))
    y = net.flatten("flatten", net.avgpool("pool", y, net.shape(y)[1]))
    net.linear("fc", y, 5)
    return ModelLayers("block_net", net.input_shape, tuple(net.layers))
