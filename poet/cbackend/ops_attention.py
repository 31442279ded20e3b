"""Specs of attention (kernels: runtime/kernels_attention.c): the CPU flash-attention ops that
``F.scaled_dot_product_attention`` traces to, and the streamed attention tiles of
:mod:`poet.execute.tiled_attention`.

A tile's scale operations (``(("mul", c), ("div", c), ...)``, applied in order) and its causal rule
are flattened into scalars: the count, then ``(op, c)`` per operation (op 0 multiply, 1 divide),
then ``has_causal, causal, q0, k0``.
"""

from __future__ import annotations

from .opspec import CallSpec, UnsupportedOp, arg, register

SCALE_OPS = {"mul": 0, "div": 1}


def _sdpa_scalars(n, is_causal, dropout_p) -> tuple:
    if float(dropout_p) != 0.0:
        raise UnsupportedOp(
            f"{n.name}: attention dropout inside scaled_dot_product_attention has no C kernel "
            "(train with dropout_p=0, or apply nn.Dropout to the attention output instead)"
        )
    scale = n.kwargs.get("scale")  # None: the kernel takes aten's default, 1 / sqrt(E) in double
    return (int(bool(is_causal)), int(scale is not None), float(scale or 0.0))


@register("aten._scaled_dot_product_flash_attention_for_cpu.default")
def sdpa(n) -> CallSpec:
    q, k, v = n.args[:3]
    scalars = _sdpa_scalars(n, bool(arg(n, 4, "is_causal", False)), arg(n, 3, "dropout_p", 0.0))
    return CallSpec("sdpa", (q, k, v, n.kwargs.get("attn_mask")), scalars)


@register("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def sdpa_backward(n) -> CallSpec:
    dout, q, k, v, out, lse, dropout_p, is_causal = n.args[:8]
    scalars = _sdpa_scalars(n, is_causal, dropout_p)
    return CallSpec("sdpa_backward", (dout, q, k, v, out, lse, n.kwargs.get("attn_mask")), scalars)


def tile_scalars(scale, causal, q0, k0) -> tuple:
    """A streamed attention tile's scale operations and causal rule, flattened."""
    if len(scale) > 4:
        raise UnsupportedOp(f"attention tile with {len(scale)} scale operations (the C kernel takes up to 4)")
    flat: list = [len(scale)]
    for op, c in scale:
        flat += [SCALE_OPS[op], float(c)]
    return (*flat, int(causal is not None), int(causal or 0), int(q0), int(k0))


@register("poet.execute.tiled_ops.tile_attention_step")
def tile_attention_step(n) -> CallSpec:
    o, m, l, q, kt, v, scale, causal, q0, k0, last = n.args[:11]
    return CallSpec("attention_step", (o, m, l, q, kt, v), (*tile_scalars(scale, causal, q0, k0), int(bool(last))))


@register("poet.execute.tiled_ops.tile_attention_grad_stats")
def tile_attention_grad_stats(n) -> CallSpec:
    return CallSpec("attention_grad_stats", tuple(n.args[:3]))


@register("poet.execute.tiled_ops.tile_attention_grad_kv")
def tile_attention_grad_kv(n) -> CallSpec:
    acc_kt, acc_v, q, kt, v, do, stats, scale, causal, q0, k0 = n.args[:11]
    return CallSpec("attention_grad_kv", (acc_kt, acc_v, q, kt, v, do, stats), tile_scalars(scale, causal, q0, k0))


@register("poet.execute.tiled_ops.tile_attention_grad_q")
def tile_attention_grad_q(n) -> CallSpec:
    acc, q, kt, v, do, stats, scale, causal, q0, k0 = n.args[:10]
    return CallSpec("attention_grad_q", (acc, q, kt, v, do, stats), tile_scalars(scale, causal, q0, k0))


@register("poet.execute.tiled_ops.tile_zeros_like_pair")
def tile_zeros_like_pair(n) -> CallSpec:
    return CallSpec("zeros_like", tuple(n.args[:2]), (2,))
