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
        self.blocks = nn.Sequential(_DepthwiseBlock(channels, 2 * channels, stride=2),
                                    _DepthwiseBlock(2 * channels, 2 * channels),
                                    _DepthwiseBlock(2 * channels, 4 * channels, stride=2))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(4 * channels, num_classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(self.dropout(h.mean((2, 3))))


def resnet_training_graph(blocks: int, device: str, channels: int = 16):
    """A SmallResNet's training graph exported op by op (about 16 nodes per block, one 1x3x32x32
    sample, seeded), priced on ``device``: the op-level graph of the solver benchmarks and tests."""
    from ..graph.torch_export import export_training_graph
    torch.manual_seed(0)
    model = SmallResNet(channels=channels, blocks=blocks).train()
    x, y = torch.randn(1, 3, 32, 32), torch.tensor([3])
    return export_training_graph(model, (x,), F.cross_entropy, (y,), name=f"aten_resnet{blocks}").costed(device)


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, layers: int = 3, num_classes: int = 10,
                 dropout: float = 0.0):
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


def small_bert(num_labels: int = 3, hidden: int = 32, layers: int = 2, heads: int = 2, vocab: int = 100,
               max_len: int = 32, dropout: float = 0.1):
    """A BERT-style classifier from a ``transformers`` BertConfig (random weights, nothing downloaded)."""
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=2 * hidden, max_position_embeddings=max_len, num_labels=num_labels,
                     hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
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


class TokenData:
    """Token sequences; the label is which third of the vocabulary the first tokens mostly come from."""

    def __init__(self, batch_size: int = 4, seq_len: int = 16, vocab: int = 100, num_labels: int = 3,
                 seed: int = 0):
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
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
