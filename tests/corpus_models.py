"""Third-party model definitions for the whole-model corpus: ``transformers`` at tiny configs, random weights.

Nobody here wrote these modules; each is built from its library's config class (no weights are
downloaded) and wrapped so that ``loss_fn(model(*inputs), *targets)`` is one training step, as a
user of :func:`poet.plan` would write it.  Every case returns ``(model, inputs, targets, loss_fn)``
with the model in the mode it trains in and dropout off (a tiled step draws no masks; see
docs/torch.md, "Not tiled yet").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

VOCAB = 48


class Logits(torch.nn.Module):
    """A ``transformers`` model returning its ``logits`` (and taking a mask when the case has one)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, mask=None):
        if mask is None:
            return self.model(x).logits
        return self.model(x, attention_mask=mask).logits


def token_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@dataclass(frozen=True)
class Case:
    """One corpus architecture: what it is, and how to build it."""

    name: str
    family: str  # what it stands for: text transformer, vision transformer, CNN with BatchNorm, ...
    build: object  # () -> (model, inputs, targets, loss_fn)


def _tokens(batch: int, seq: int):
    return torch.randint(0, VOCAB, (batch, seq)), torch.randint(0, VOCAB, (batch, seq))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    ids, y = _tokens(1, 16)
    return Logits(GPT2LMHeadModel(cfg)).train(), (ids,), (y,), token_loss


def bert_masked():
    """BERT classifying padded sequences: an attention mask with padding (not causal)."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3,
    )  # fmt: skip
    ids = torch.randint(0, VOCAB, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0  # the second sequence is padded
    return Logits(BertForSequenceClassification(cfg)).train(), (ids, mask), (torch.tensor([0, 2]),), F.cross_entropy


def llama():
    """LLaMA-style: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, causal."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    ids, y = _tokens(1, 16)
    return Logits(LlamaForCausalLM(cfg)).train(), (ids,), (y,), token_loss


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5,
    )  # fmt: skip
    x = torch.randn(2, 3, 16, 16)
    return Logits(ViTForImageClassification(cfg)).train(), (x,), (torch.tensor([1, 4]),), F.cross_entropy


def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=5,
    )  # fmt: skip
    x = torch.randn(2, 3, 32, 32)
    return Logits(ResNetForImageClassification(cfg)).train(), (x,), (torch.tensor([0, 3]),), F.cross_entropy


def mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    cfg = MobileNetV2Config(
        num_channels=3, image_size=32, depth_multiplier=0.25, classifier_dropout_prob=0.0, num_labels=5,
    )  # fmt: skip
    x = torch.randn(2, 3, 32, 32)
    return Logits(MobileNetV2ForImageClassification(cfg)).train(), (x,), (torch.tensor([2, 1]),), F.cross_entropy


def convnext():
    """ConvNeXt: depthwise 7x7 convolutions, LayerNorm over channels (channels-last permutes), GELU."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    cfg = ConvNextConfig(
        num_channels=3, patch_size=2, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], drop_path_rate=0.0,
        num_labels=5,
    )  # fmt: skip
    x = torch.randn(2, 3, 16, 16)
    return Logits(ConvNextForImageClassification(cfg)).train(), (x,), (torch.tensor([4, 0]),), F.cross_entropy


def distilbert_masked():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=16, dropout=0.0,
        attention_dropout=0.0, seq_classif_dropout=0.0, num_labels=3,
    )  # fmt: skip
    ids = torch.randint(0, VOCAB, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, 9:] = 0
    return (
        Logits(DistilBertForSequenceClassification(cfg)).train(),
        (ids, mask),
        (torch.tensor([1, 0]),),
        F.cross_entropy,
    )


CASES = {
    c.name: c
    for c in (
        Case("gpt2", "text transformer, causal", gpt2),
        Case("bert", "text transformer, padding mask", bert_masked),
        Case("llama", "text transformer, RMSNorm + rotary + grouped-query, causal", llama),
        Case("distilbert", "text transformer, padding mask", distilbert_masked),
        Case("vit", "vision transformer", vit),
        Case("resnet", "CNN with BatchNorm and residuals", resnet),
        Case("mobilenet_v2", "CNN with depthwise convolutions, BatchNorm, ReLU6", mobilenet_v2),
        Case("convnext", "CNN with depthwise 7x7 convolutions and channels-last LayerNorm", convnext),
    )
}


def build(name: str, seed: int = 0):
    """``(model, inputs, targets, loss_fn)`` of corpus case ``name``, with weights drawn from ``seed``."""
    torch.manual_seed(seed)
    return CASES[name].build()
