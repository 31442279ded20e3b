"""Small trainable models and generated data (no downloads) for demos, tests and ``poet train``."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class _Block(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class SmallResNet(nn.Module):
    """A ResNet in miniature: conv stem, BatchNorm, residual blocks, dropout, linear head."""

    def __init__(self, channels: int = 8, blocks: int = 2, num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(*[_Block(channels) for _ in range(blocks)])
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)))
        h = self.blocks(h)
        return self.fc(self.dropout(h.mean((2, 3))))


class _DepthwiseBlock(nn.Module):
    """MobileNet's building block: 3x3 depthwise convolution, then 1x1 pointwise, each with BN + ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return F.relu(self.bn2(self.pw(F.relu(self.bn1(self.dw(x))))))


class DepthwiseNet(nn.Module):
    """A MobileNet in miniature: conv stem, depthwise-separable blocks, global pooling, linear head."""

    def __init__(self, channels: int = 16, num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(
            _DepthwiseBlock(channels, 2 * channels, stride=2),
            _DepthwiseBlock(2 * channels, 2 * channels),
            _DepthwiseBlock(2 * channels, 4 * channels, stride=2),
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(4 * channels, num_classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(self.dropout(h.mean((2, 3))))


def resnet_training_graph(blocks: int, device: str, channels: int = 16):
    """A SmallResNet's training graph exported op by op (about 16 nodes per block, one 1x3x32x32
    sample, seeded), priced on ``device``: the op-level graph of the solver benchmarks and tests."""
    from .graph.torch_export import export_training_graph
    from .hardware.cost import costed_program

    torch.manual_seed(0)
    model = SmallResNet(channels=channels, blocks=blocks).train()
    x, y = torch.randn(1, 3, 32, 32), torch.tensor([3])
    program = export_training_graph(model, (x,), F.cross_entropy, (y,), name=f"aten_resnet{blocks}")
    return costed_program(program, device)


class _InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int = 2):
        super().__init__()
        h = c * expand
        self.expand = nn.Conv2d(c, h, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(h)
        self.dw = nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False)
        self.bn2 = nn.BatchNorm2d(h)
        self.project = nn.Conv2d(h, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu6(self.bn1(self.expand(x)))
        h = F.relu6(self.bn2(self.dw(h)))
        return x + self.bn3(self.project(h))


class DepthwiseResNet(nn.Module):
    """MobileNetV2-style residual network: strided stem, inverted residual blocks with depthwise convs."""

    def __init__(self, channels: int = 8, blocks: int = 2, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(*[_InvertedResidual(channels) for _ in range(blocks)])
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        h = F.relu6(self.bn(self.stem(x)))
        h = self.blocks(h)
        return self.fc(h.mean((2, 3)))


class _CausalBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    """A small causal transformer language model: token + position embeddings, attention, GELU MLP."""

    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 2, layers: int = 2, max_len: int = 128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.Sequential(*[_CausalBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.blocks(self.tok(ids) + self.pos(pos))
        return self.head(self.ln(h))


def lm_loss(logits, targets):
    """Next-token cross-entropy over every position."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, layers: int = 3, num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        mods = []
        d = d_in
        for _ in range(layers):
            mods += [nn.Linear(d, hidden), nn.GELU(), nn.Dropout(dropout)]
            d = hidden
        mods.append(nn.Linear(d, num_classes))
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x)


def small_bert(
    num_labels: int = 3,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    vocab: int = 100,
    max_len: int = 32,
    dropout: float = 0.1,
):
    """A BERT-style classifier from a ``transformers`` BertConfig (random weights, nothing downloaded)."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_len,
        num_labels=num_labels,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    cfg._attn_implementation = "eager"
    return BertForSequenceClassification(cfg)


def bert_loss(output, labels):
    """Cross-entropy on a ``transformers`` classifier output."""
    return F.cross_entropy(output.logits, labels)


# ------------------------------------------------------------------ generated data
class ImageData:
    """Images whose class is decided by a fixed random linear teacher (learnable, deterministic)."""

    def __init__(self, batch_size: int = 8, size: int = 16, num_classes: int = 10, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.bs, self.size, self.k = batch_size, size, num_classes
        self.teacher = torch.randn(3 * size * size, num_classes, generator=self.g)

    def batch(self):
        x = torch.randn(self.bs, 3, self.size, self.size, generator=self.g)
        y = (x.flatten(1) @ self.teacher).argmax(1)
        return (x,), (y,)


class VectorData:
    def __init__(self, batch_size: int = 8, d_in: int = 32, num_classes: int = 10, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.bs, self.d = batch_size, d_in
        self.teacher = torch.randn(d_in, num_classes, generator=self.g)

    def batch(self):
        x = torch.randn(self.bs, self.d, generator=self.g)
        return (x,), ((x @ self.teacher).argmax(1),)


class NextTokenData:
    """Token sequences from a fixed random bigram table; targets are the next tokens."""

    def __init__(self, batch_size: int = 2, seq_len: int = 16, vocab: int = 64, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.bs, self.n, self.vocab = batch_size, seq_len, vocab
        self.table = torch.randint(0, vocab, (vocab,), generator=self.g)

    def batch(self):
        first = torch.randint(0, self.vocab, (self.bs, 1), generator=self.g)
        seq = [first]
        for _ in range(self.n):
            seq.append(self.table[seq[-1]])
        ids = torch.cat(seq, 1)
        return (ids[:, :-1],), (ids[:, 1:],)


class TokenData:
    """Token sequences; the label is which third of the vocabulary the first tokens mostly come from."""

    def __init__(self, batch_size: int = 4, seq_len: int = 16, vocab: int = 100, num_labels: int = 3, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.bs, self.n, self.vocab, self.k = batch_size, seq_len, vocab, num_labels

    def batch(self):
        ids = torch.randint(0, self.vocab, (self.bs, self.n), generator=self.g)
        y = (ids[:, :4].float().mean(1) * self.k / self.vocab).long().clamp(max=self.k - 1)
        return (ids,), (y,)


MODELS = {
    "cnn": "small ResNet-style CNN (BatchNorm, residuals, dropout) on generated 16x16 images",
    "bert": "2-layer BERT-style classifier from a transformers BertConfig on generated tokens",
    "mlp": "3-layer MLP on generated vectors",
    "dwcnn": "small MobileNet-style CNN (depthwise-separable convolutions, BatchNorm) on generated 16x16 images",
    "dwnet": "MobileNetV2-style residual network with depthwise convolutions on generated 16x16 images",
    "gpt": "small causal transformer language model (attention, LayerNorm, GELU) on generated token sequences",
}


def build(name: str, batch_size: int = 8, seed: int = 0, dropout: float = 0.1):
    """(model, loss_fn, data) for a built-in demo model; the model is initialised from ``seed``."""
    torch.manual_seed(seed)
    if name == "cnn":
        return SmallResNet(dropout=dropout), nn.CrossEntropyLoss(), ImageData(batch_size, seed=seed + 1)
    if name == "dwcnn":
        return DepthwiseNet(dropout=dropout), nn.CrossEntropyLoss(), ImageData(batch_size, seed=seed + 1)
    if name == "mlp":
        return MLP(dropout=dropout), nn.CrossEntropyLoss(), VectorData(batch_size, seed=seed + 1)
    if name == "bert":
        return small_bert(dropout=dropout), bert_loss, TokenData(batch_size, seed=seed + 1)
    if name == "dwnet":
        return DepthwiseResNet(), nn.CrossEntropyLoss(), ImageData(batch_size, seed=seed + 1)
    if name == "gpt":
        return TinyGPT(), lm_loss, NextTokenData(1, seq_len=128, seed=seed + 1)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def load(spec: str, batch_size: int = 8, seed: int = 0, dropout: float = 0.1):
    """(model, loss_fn, data) for ``--model``: a built-in name, or ``module:function`` returning them
    (``data.batch() -> (inputs, targets)``; the module is looked up in the current directory, then
    on ``PYTHONPATH``).  ValueError saying what is wrong with a user's function."""
    if ":" not in spec:
        return build(spec, batch_size=batch_size, seed=seed, dropout=dropout)
    import importlib
    import os
    import sys

    mod, fn = spec.split(":", 1)
    if os.getcwd() not in sys.path:  # a console script does not put it there; python -m does
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod)
    except ImportError as e:
        raise ValueError(
            f"--model {spec}: cannot import {mod!r} ({e}); run from the directory that "
            f"holds it, or add that directory to PYTHONPATH"
        ) from e
    make = getattr(module, fn, None)
    if not callable(make):
        raise ValueError(f"--model {spec}: {mod} has no function {fn!r}")
    try:
        made = make()
    except Exception as e:  # noqa: BLE001 - the user's code: say whose and what, not a traceback
        raise ValueError(f"--model {spec}: {mod}.{fn}() raised {type(e).__name__}: {e}") from e
    if not (isinstance(made, tuple) and len(made) == 3):
        raise ValueError(f"--model {spec}: {mod}.{fn}() must return (model, loss_fn, data), got {type(made).__name__}")
    return made
