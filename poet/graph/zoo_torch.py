"""A zoo network as a real ``torch.nn.Module``: the reference a compiled or executed zoo schedule is
checked against.

:func:`zoo_module` builds, from the same layer list :func:`poet.graph.zoo.build_model` turns into a
graph (:func:`poet.graph.zoo.model_layers`), a module computing exactly what the graph's nodes stand
for: convolutions with the zoo's kernel, stride, padding and bias; BatchNorm in training (affine);
ReLU; skip-adds; max and average pooling; flatten; linear layers; dropout; LayerNorm, GELU and the
attention matmuls of the encoder (scores ``Q K^T`` per head, unscaled, as the zoo counts them; softmax
over keys; context ``P V``).  The loss is the cross-entropy of the last layer, mean over the batch, as
the zoo's loss node.  Parameters are created in layer order, so ``named_parameters()`` is
``<layer>.weight`` / ``<layer>.bias`` for every layer that has them.
"""

from __future__ import annotations

from .zoo import DATA, ModelLayers, model_layers

__all__ = ["zoo_module"]


def _torch():
    import torch  # a zoo graph needs no torch; only its reference module does

    return torch


def _conv_bias(lay, cin: int) -> bool:
    weights = lay.kernel * lay.kernel * cin * lay.shape[0]
    if lay.params not in (weights, weights + lay.shape[0]):
        raise ValueError(f"layer {lay.name}: {lay.params} parameters fit no {lay.kernel}x{lay.kernel} conv")
    return lay.params == weights + lay.shape[0]


def _build(ml: ModelLayers, dropout: float):
    torch = _torch()
    nn = torch.nn

    class ZooModule(nn.Module):
        """The zoo model ``ml`` layer by layer (see the module docstring)."""

        def __init__(self):
            super().__init__()
            self.ml = ml
            self.mods = nn.ModuleDict()
            for lay in ml.layers:
                ins = [ml.input_shape if x == DATA else ml.layers[x].shape for x in lay.inputs]
                key = lay.name.replace(".", "__")
                if lay.op == "conv2d":
                    cin = ins[0][0]
                    m = nn.Conv2d(cin, lay.shape[0], lay.kernel, lay.stride, lay.pad, bias=_conv_bias(lay, cin))
                elif lay.op == "linear":
                    fin = ins[0][-1]
                    m = nn.Linear(fin, lay.shape[-1], bias=lay.params == fin * lay.shape[-1] + lay.shape[-1])
                elif lay.op == "batchnorm":
                    m = nn.BatchNorm2d(lay.shape[0]) if len(lay.shape) == 3 else nn.BatchNorm1d(lay.shape[0])
                elif lay.op == "layernorm":
                    m = nn.LayerNorm(lay.shape[-1])
                elif lay.op == "dropout":
                    m = nn.Dropout(dropout)
                elif lay.op in ("relu", "add", "maxpool", "avgpool", "flatten", "gelu", "softmax", "matmul"):
                    m = None
                else:
                    raise ValueError(f"layer {lay.name}: op {lay.op!r} has no reference module")
                if m is not None:
                    self.mods[key] = m

        def layer_module(self, name: str):
            return self.mods[name.replace(".", "__")]

        def forward(self, x):
            F = torch.nn.functional
            outs = []
            for lay in ml.layers:
                a = [x if i == DATA else outs[i] for i in lay.inputs]
                key = lay.name.replace(".", "__")
                op = lay.op
                if op in ("conv2d", "linear", "batchnorm", "layernorm", "dropout"):
                    y = self.mods[key](a[0])
                elif op == "relu":
                    y = F.relu(a[0])
                elif op == "gelu":
                    y = F.gelu(a[0])
                elif op == "add":
                    y = a[0] + a[1]
                elif op == "maxpool":
                    y = F.max_pool2d(a[0], lay.kernel, lay.stride, lay.pad)
                elif op == "avgpool":
                    y = F.avg_pool2d(a[0], lay.kernel, lay.stride)
                elif op == "flatten":
                    y = a[0].flatten(1)
                elif op == "softmax":
                    y = a[0].softmax(-1)
                elif op == "matmul" and len(lay.shape) == 3:  # scores: (B,S,H*D) x (B,S,H*D) -> (B,H,S,S)
                    q, k = (t.unflatten(-1, (lay.heads, -1)).transpose(1, 2) for t in a)
                    y = q @ k.transpose(-2, -1)
                elif op == "matmul":  # context: (B,H,S,S) x (B,S,H*D) -> (B,S,H*D)
                    v = a[1].unflatten(-1, (lay.heads, -1)).transpose(1, 2)
                    y = (a[0] @ v).transpose(1, 2).flatten(2)
                else:  # pragma: no cover - __init__ refused it
                    raise ValueError(op)
                outs.append(y)
            return outs[-1]

    return ZooModule()


def zoo_module(model: str | ModelLayers, *, seed: int = 0, dropout: float = 0.0):
    """The zoo model as an ``nn.Module`` in training mode, parameters drawn from ``seed``."""
    ml = model_layers(model) if isinstance(model, str) else model
    torch = _torch()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        m = _build(ml, dropout)
    n = sum(p.numel() for p in m.parameters())
    expect = sum(lay.params for lay in ml.layers)
    if n != expect:
        raise AssertionError(f"{ml.name}: reference module has {n} parameters, the layer list {expect}")
    return m.train()
