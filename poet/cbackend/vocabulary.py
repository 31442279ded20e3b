"""The C backend's vocabulary: every op family's specs, loaded, and the one lookup the lowering uses."""

from __future__ import annotations

from . import (  # noqa: F401  (each family module registers its specs on import)
    ops_arith,
    ops_attention,
    ops_batchnorm,
    ops_conv,
    ops_dropout,
    ops_elementwise,
    ops_gelu,
    ops_index,
    ops_layout,
    ops_loss,
    ops_matmul,
    ops_norm,
    ops_pool,
    ops_softmax,
)
from .opspec import SPECS, CallSpec, SpecFn, UnsupportedOp, target_key

__all__ = ["registered", "spec_for"]


def registered() -> dict[str, SpecFn]:
    """Every op with a spec, by registry key."""
    return dict(SPECS)


def spec_for(node) -> CallSpec:
    """The kernel call of FX node ``node``, or :class:`UnsupportedOp` naming it and its op."""
    key = target_key(node.target)
    fn = SPECS.get(key)
    if fn is None:
        raise UnsupportedOp(
            f"the C backend has no kernel for {key} (node {node.name}); "
            f"it supports {len(SPECS)} ops, listed in poet/cbackend/ops_*.py"
        )
    return fn(node)
