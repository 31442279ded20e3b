"""The zoo networks' reference modules compute what their graphs stand for: same parameters, same
per-layer output sizes as the graph's forward nodes, a training step that backpropagates."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poet.graph.zoo import DTYPE_BYTES, build_model, model_layers  # noqa: E402
from poet.graph.zoo_torch import zoo_module  # noqa: E402


@pytest.mark.parametrize("name", ["linear", "resnet18_cifar", "vgg16_cifar"])
def test_reference_module_matches_the_graph(name):
    ml = model_layers(name)
    m = zoo_module(name, seed=1)
    g = build_model(name, batch_size=2)
    assert sum(p.numel() for p in m.parameters()) * DTYPE_BYTES == g.param_bytes
    sizes = {}
    hooks = [
        mod.register_forward_hook(lambda _m, _i, out, key=key: sizes.__setitem__(key, out.numel()))
        for key, mod in m.mods.items()
    ]
    x = torch.randn(2, *ml.input_shape)
    y = m(x)
    for h in hooks:
        h.remove()
    assert tuple(y.shape) == (2, *ml.layers[-1].shape)
    by_name = {n.name: n for n in g.nodes}
    for key, numel in sizes.items():
        assert by_name[key.replace("__", ".")].output_bytes == DTYPE_BYTES * numel, key
    torch.nn.functional.cross_entropy(y, torch.tensor([1, 7])).backward()
    assert all(p.grad is not None for p in m.parameters())


def test_same_seed_same_weights():
    a, b = zoo_module("linear", seed=3), zoo_module("linear", seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = zoo_module("linear", seed=4)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))
