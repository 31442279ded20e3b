"""The benchmark zoo: structure, honest backward dependencies, sizes, errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poet.graph.core import BACKWARD, FORWARD, Graph, GraphError
from poet.graph.zoo import MODELS, build_model, list_models

NAMES = ["linear", "vgg16", "vgg16_cifar", "resnet18", "resnet18_cifar", "resnet50", "bert", "transformer"]

# node counts are part of the contract (schedules saved for a model refer to node ids)
NODE_COUNTS = {
    "linear": 20,
    "vgg16": 80,
    "vgg16_cifar": 80,
    "resnet18": 140,
    "resnet18_cifar": 138,
    "resnet50": 352,
    "bert": 338,
    "transformer": 30,
}

# Parameter counts of the reference architectures (weights + biases, batchnorm/layernorm
# gamma and beta; batchnorm running statistics are buffers and not counted).  BERT counts
# the 12 encoder blocks only: no token/position embeddings, no pooler or task head.
EXPECTED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "resnet18_cifar": 11_173_962,
    "bert": 85_054_464,
    "transformer": 85_054_464 // 12,
}

# what each op's backward reads from the forward pass (besides incoming gradients)
READS_INPUT = {"conv2d", "linear", "batchnorm", "layernorm", "maxpool", "gelu", "matmul"}
READS_OUTPUT = {"relu", "softmax"}
READS_NOTHING = {"add", "flatten", "dropout", "avgpool"}


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    return {m: build_model(m) for m in NAMES}


def ids(g: Graph) -> dict[str, int]:
    return {nd.name: i for i, nd in enumerate(g.nodes)}


def fwd_preds(g: Graph, i: int) -> set[int]:
    return {p for p in g.preds[i] if g.nodes[p].kind == FORWARD}


def bwd_preds(g: Graph, i: int) -> set[int]:
    return {p for p in g.preds[i] if g.nodes[p].kind == BACKWARD}


# ---------------------------------------------------------------- catalogue


def test_catalogue():
    assert list_models() == NAMES
    assert list(MODELS) == NAMES
    assert all(isinstance(d, str) and d for d in MODELS.values())


@pytest.mark.parametrize("name", NAMES)
def test_structure(name, graphs):
    g = graphs[name]
    n = len(g)
    assert n == NODE_COUNTS[name]
    assert all(u < v for u, v in g.edges)
    L = g.meta["forward_layers"]
    # forward layers, loss, loss backward, then one backward per layer
    assert [nd.kind for nd in g.nodes] == [FORWARD] * (L + 1) + [BACKWARD] * (L + 1)
    assert g.nodes[L].name == "loss" and g.nodes[L + 1].name == "bwd.loss"
    # backward nodes mirror the forward layers in reverse order
    for k in range(L):
        f, b = g.nodes[k], g.nodes[n - 1 - k]
        assert b.name == f"bwd.{f.name}" and b.op == f.op and b.param_bytes == 0
    # loss backward reads the loss node and the logits, and is read by the logits' backward
    assert set(g.preds[L + 1]) == {L - 1, L}
    assert L + 1 in g.preds[L + 2]
    # names unique, ops set, meta complete and JSON-able
    assert len({nd.name for nd in g.nodes}) == n
    assert all(nd.op for nd in g.nodes)
    assert g.meta["model"] == name and g.meta["batch_size"] == 1 and g.meta["input_shape"][0] == 1
    json.dumps(g.meta)
    # everything ends in the gradient: every node except sinks among backward nodes has a reader
    for i, nd in enumerate(g.nodes):
        if nd.kind == FORWARD:
            assert g.succs[i], f"{nd.name} is never read"


@pytest.mark.parametrize("name", NAMES)
def test_deterministic(name, graphs):
    again = build_model(name)
    assert again == graphs[name]
    assert again.edges == graphs[name].edges
    assert [nd.name for nd in again.nodes] == [nd.name for nd in graphs[name].nodes]


# ---------------------------------------------------------------- honest backward deps


@pytest.mark.parametrize("name", NAMES)
def test_backward_dependency_rules(name, graphs):
    """Every backward node reads exactly the consumers' gradients and the tensors its op needs."""
    g = graphs[name]
    n, L = len(g), g.meta["forward_layers"]
    bwd_of = {k: n - 1 - k for k in range(L)}
    bwd_of[L] = L + 1  # the loss
    for k in range(L):
        f, b = g.nodes[k], bwd_of[k]
        consumers = [c for c in g.succs[k] if g.nodes[c].kind == FORWARD]
        assert bwd_preds(g, b) == {bwd_of[c] for c in consumers}, f.name
        fp = fwd_preds(g, b)
        if f.op in READS_INPUT:
            assert fp == set(g.preds[k]), f.name
        elif f.op in READS_OUTPUT:
            assert fp == {k}, f.name
        else:
            assert f.op in READS_NOTHING, f.op
            assert fp == set(), f.name


def test_resnet18_cifar_examples(graphs):
    g = graphs["resnet18_cifar"]
    i = ids(g)
    # ReLU backward reads its own output, not its input (the batchnorm)
    r = i["layer1.0.relu1"]
    assert r in g.preds[i["bwd.layer1.0.relu1"]]
    assert i["layer1.0.bn1"] not in g.preds[i["bwd.layer1.0.relu1"]]
    # skip-add backward reads no forward tensor, only the gradient from the block's relu
    assert fwd_preds(g, i["bwd.layer2.0.add"]) == set()
    assert bwd_preds(g, i["bwd.layer2.0.add"]) == {i["bwd.layer2.0.relu2"]}
    # conv backward reads the conv's input (for the weight gradient), not its output
    c = i["layer1.0.conv2"]
    assert fwd_preds(g, i["bwd.layer1.0.conv2"]) == {i["layer1.0.relu1"]}
    assert c not in g.preds[i["bwd.layer1.0.conv2"]]
    # a branch point (block output read by the next block's conv1 and its downsample conv)
    # gets its gradient only after both branches
    assert bwd_preds(g, i["bwd.layer1.1.relu2"]) == {i["bwd.layer2.0.conv1"], i["bwd.layer2.0.downsample.conv"]}
    # identity shortcut: branch read by conv1 and by the add
    assert bwd_preds(g, i["bwd.layer1.0.relu2"]) == {i["bwd.layer1.1.conv1"], i["bwd.layer1.1.add"]}
    # CIFAR stem: 3x3 conv, no maxpool
    assert "maxpool" not in i
    assert g.nodes[i["conv1"]].output_bytes == 4 * 64 * 32 * 32
    # the first conv reads the data: no input gradient, only the weight gradient
    b = g.nodes[i["bwd.conv1"]]
    assert b.output_bytes == 0 and b.flops == pytest.approx(g.nodes[i["conv1"]].flops)
    assert fwd_preds(g, i["bwd.conv1"]) == set()
    assert 50 <= g.meta["forward_layers"] <= 70


def test_bert_attention_examples(graphs):
    g = graphs["bert"]
    i = ids(g)
    p = "block3.attn."
    # Q K^T backward needs both operands; softmax backward its output; P V backward both operands
    assert fwd_preds(g, i["bwd." + p + "scores"]) == {i[p + "query"], i[p + "key"]}
    assert fwd_preds(g, i["bwd." + p + "softmax"]) == {i[p + "softmax"]}
    assert fwd_preds(g, i["bwd." + p + "context"]) == {i[p + "softmax"], i[p + "value"]}
    # GELU and layernorm read their inputs
    assert fwd_preds(g, i["bwd.block3.ffn.gelu"]) == {i["block3.ffn.fc1"]}
    assert fwd_preds(g, i["bwd.block3.ffn.ln"]) == {i["block3.ffn.add"]}
    # the block input feeds query, key, value and the residual add: four gradients meet
    assert bwd_preds(g, i["bwd.block2.ffn.ln"]) == {i["bwd." + p + s] for s in ("query", "key", "value", "add")}
    # scores are (heads, seq, seq)
    assert g.nodes[i[p + "scores"]].output_bytes == 4 * 12 * 512 * 512
    assert g.nodes[i["bwd." + p + "scores"]].output_bytes == 2 * 4 * 512 * 768


@pytest.mark.parametrize("name", NAMES)
def test_gradient_sizes(name, graphs):
    """A backward node's output is the gradient w.r.t. the layer's node inputs."""
    g = graphs[name]
    n, L = len(g), g.meta["forward_layers"]
    assert g.nodes[L + 1].output_bytes == g.nodes[L - 1].output_bytes  # d loss / d logits
    for k in range(L):
        f, b = g.nodes[k], g.nodes[n - 1 - k]
        ins = list(g.preds[k])
        if not ins:
            assert b.output_bytes == 0
        elif f.op == "add":
            assert b.output_bytes == f.output_bytes
        else:
            assert b.output_bytes == sum(g.nodes[p].output_bytes for p in ins)
        if f.param_bytes and ins:  # grad-input + grad-weight ~ 2x forward
            assert 1.9 * f.flops <= b.flops <= 2.1 * f.flops, f.name


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_param_counts(name, graphs):
    params = graphs[name].param_bytes / 4
    assert params == pytest.approx(EXPECTED_PARAMS[name], rel=0.02)


def test_param_counts_small_models(graphs):
    # VGG-16 at 32x32 with the POET-style classifier 512-4096-4096-10
    assert graphs["vgg16_cifar"].param_bytes / 4 == pytest.approx(14_714_688 + 2_101_248 + 16_781_312 + 40_970)
    assert graphs["linear"].param_bytes < 1_000_000  # microcontroller-sized


@pytest.mark.parametrize(
    "name,gmac", [("resnet18", 1.82), ("resnet50", 4.11), ("vgg16", 15.47), ("resnet18_cifar", 0.556)]
)
def test_forward_flops(name, gmac, graphs):
    g = graphs[name]
    fwd = sum(nd.flops for nd in g.nodes if nd.kind == FORWARD)
    assert fwd == pytest.approx(2 * gmac * 1e9, rel=0.10)
    bwd = sum(nd.flops for nd in g.nodes if nd.kind == BACKWARD)
    assert 1.7 * fwd <= bwd <= 2.2 * fwd  # backward ~ twice forward


def test_known_shapes(graphs):
    i = ids(graphs["resnet18"])
    nd = graphs["resnet18"].nodes
    assert nd[i["conv1"]].output_bytes == 4 * 64 * 112 * 112
    assert nd[i["maxpool"]].output_bytes == 4 * 64 * 56 * 56
    assert nd[i["layer4.1.relu2"]].output_bytes == 4 * 512 * 7 * 7
    assert nd[i["fc"]].output_bytes == 4 * 1000
    assert nd[i["conv1"]].flops == 2 * 7 * 7 * 3 * 64 * 112 * 112
    j = ids(graphs["vgg16"])
    assert graphs["vgg16"].nodes[j["fc6"]].param_bytes == 4 * (25088 * 4096 + 4096)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(NAMES), batch=st.integers(2, 16))
def test_batch_scaling(name, batch):
    one, many = build_model(name), build_model(name, batch_size=batch)
    assert many.edges == one.edges and len(many) == len(one)
    assert many.meta["batch_size"] == batch and many.meta["input_shape"][0] == batch
    assert many.meta["input_shape"][1:] == one.meta["input_shape"][1:]
    for a, b in zip(one.nodes, many.nodes):
        assert (a.name, a.kind, a.op, a.param_bytes) == (b.name, b.kind, b.op, b.param_bytes)
        assert b.output_bytes == batch * a.output_bytes
        assert b.flops == pytest.approx(batch * a.flops)


# ---------------------------------------------------------------- errors


def test_unknown_model_lists_names():
    with pytest.raises(GraphError) as e:
        build_model("resnet19")
    assert isinstance(e.value, ValueError)
    msg = str(e.value)
    assert "resnet19" in msg and all(m in msg for m in NAMES)


@pytest.mark.parametrize("bad", [0, -3, 1.5, "2", None, True])
def test_bad_batch_size(bad):
    with pytest.raises(GraphError, match="batch_size"):
        build_model("linear", batch_size=bad)
