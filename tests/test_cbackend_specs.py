"""Every op spec against the op it stands for: the traced training steps of small models (the demo
MLP, causal transformer and BERT, transformers' GPT-2 and ViT with their SDPA attention, a module
calling F.scaled_dot_product_attention causal and masked), untiled and tiled, are run once; at each
node with a spec, the kernel is called on the node's real argument values (views as they are, the
spec's inputs broadcast where it says so) into fresh outputs of the op's own strides, and must give
the op's outputs: bit for bit for the kernels that move, select or sum in aten's order, within 1e-5 of
the largest value involved otherwise.  A spec that passed arguments in the wrong order or the wrong
scalars fails here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from poet import demo_models as models  # noqa: E402
from poet.cbackend import hostlib, vocabulary  # noqa: E402
from poet.cbackend.opspec import UnsupportedOp  # noqa: E402
from poet.cbackend.spec_check import SpecCall, relative_error, run_beside, run_host  # noqa: E402
from poet.execute.tiled import tile_program  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402

EXACT = {
    "copy", "cat", "stack", "masked_fill", "tril", "embedding", "embedding_backward", "gather", "index_select",
    "scatter_add", "index_add", "select_backward", "slice_backward", "nll_loss", "nll_loss_backward",
    "nll_partial", "nll_combine", "zeros_like", "relu", "threshold_backward", "native_dropout",
}  # fmt: skip
TOLERANCE = 1e-5


def run_specs(prog) -> dict[str, float]:
    """Every spec'd node of ``prog``'s step run on the host beside aten: kernel -> largest error."""
    errors: dict[str, float] = {}

    def visit(call: SpecCall) -> None:
        try:
            run_host(call)
        except hostlib.KernelError as e:
            raise AssertionError(f"{call.node} ({call.op}): {e}") from e
        err = relative_error(call)
        if call.kernel in EXACT or any(o is not None and not o.is_floating_point() for o in call.outputs):
            assert err == 0.0, f"{call.node} ({call.kernel}) differs from aten (relative error {err:.3g})"
        assert err <= TOLERANCE, f"{call.node} ({call.kernel}): relative error {err:.3g}"
        errors[call.kernel] = max(errors.get(call.kernel, 0.0), err)

    run_beside(prog, visit)
    return errors


def demo(name):
    if name == "gpt":
        torch.manual_seed(0)
        model, loss, data = models.TinyGPT(vocab=32, d=16, heads=2, layers=1, max_len=32), models.lm_loss, None
        data = models.NextTokenData(1, seq_len=16, vocab=32)
    elif name == "bert":
        torch.manual_seed(0)
        model, loss = models.small_bert(hidden=16, layers=1, heads=2, vocab=50, max_len=16), models.bert_loss
        data = models.TokenData(2, seq_len=8, vocab=50)
    else:
        model, loss, data = models.build(name)
    x, y = data.batch()
    return export_training_graph(model.train(), x, loss, y)


@pytest.mark.parametrize(
    "name, kernels",
    [
        ("mlp", {"matmul", "gelu", "gelu_backward", "log_softmax", "log_softmax_backward", "nll_loss"}),
        (
            "gpt",
            {
                "embedding",
                "embedding_backward",
                "layer_norm",
                "layer_norm_backward",
                "softmax",
                "masked_fill",
                "tril",
                "cat",
            },
        ),
        ("bert", {"gather", "select_backward", "tanh", "tanh_backward", "softmax_backward", "copy"}),
    ],
)
def test_demo_models_untiled_and_tiled(name, kernels):
    prog = demo(name)
    untiled = run_specs(prog)
    assert kernels <= set(untiled), f"kernels not reached: {kernels - set(untiled)}"
    tiled = run_specs(tile_program(prog, 2, 0, 0)[0])
    if name == "mlp":
        assert {"nll_partial", "nll_combine", "cat"} <= set(tiled)
    if name == "gpt":  # streamed attention and the token tiles' accumulations
        want = {
            "attention_step",
            "attention_grad_stats",
            "attention_grad_kv",
            "attention_grad_q",
            "layer_norm_param_grad",
        }
        assert want <= set(tiled), f"tile kernels not reached: {want - set(tiled)}"


def hf_model(kind):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2)
        cfg._attn_implementation = "sdpa"
        ids = torch.randint(0, 40, (2, 8))
        return (
            tf.GPT2LMHeadModel(cfg),
            (ids,),
            lambda o, t: F.cross_entropy(o.logits.flatten(0, 1), t.flatten()),
            (ids,),
        )
    cfg = tf.ViTConfig(
        image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, num_labels=3,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    return tf.ViTForImageClassification(cfg), (x,), lambda o, t: F.cross_entropy(o.logits, t), (y,)


@pytest.mark.parametrize("kind, kernels", [("gpt2", {"softmax", "masked_fill"}), ("vit", {"sdpa", "sdpa_backward"})])
def test_transformers_models(kind, kernels):
    model, x, loss, y = hf_model(kind)
    errors = run_specs(export_training_graph(model.train(), x, loss, y))
    assert kernels <= set(errors)


class Attention(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode, self.qkv = mode, nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
        if self.mode == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()
        mask = torch.ones(6, 6, dtype=torch.bool).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3).sum()


@pytest.mark.parametrize("mode", ["causal", "masked"])
def test_scaled_dot_product_attention_module(mode):
    torch.manual_seed(0)
    errors = run_specs(export_training_graph(Attention(mode).train(), (torch.randn(2, 6, 8),)))
    assert {"sdpa", "sdpa_backward"} <= set(errors)


def test_attention_dropout_is_refused_naming_the_node():
    """Training traces attention dropout as the math decomposition with native_dropout; a flash op that
    still carries a dropout probability (a hand-made graph) is refused, not run without it."""
    g = torch.fx.Graph()
    q = g.placeholder("q")
    node = g.call_function(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q, 0.5))
    with pytest.raises(UnsupportedOp, match=f"{node.name}: attention dropout"):
        vocabulary.spec_for(node)
