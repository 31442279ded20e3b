"""Dropout's masks as the C kernels draw them, bit for bit (runtime/pk_rng.h, kernels_dropout.c).

torch's generator cannot run on a device, so the compiled step draws dropout masks from a
counter-based hash: element ``i`` (row-major) of the output of node ``unit`` in a step with seed
``seed`` is kept iff ``bits(key(seed, unit), i) < keep_below(p)``.  The runtime sets each step's
seed (``step_seed(base, step)``); a node's unit is ``unit_of(node name)``, a scalar of its kernel
call.  This module computes the same masks in numpy, so a PyTorch reference run (the check against
PyTorch) can use them: :func:`dropout_hook` is what it plugs into its run of the traced step.
"""

from __future__ import annotations

import numpy as np

MASK32 = 0xFFFFFFFF


def _mix32(x: np.ndarray) -> np.ndarray:
    """The bijective 32-bit mixer of pk_rng (MurmurHash3's finaliser), on uint32 arrays."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> np.uint32(13))
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> np.uint32(16))


def _u32(v: int) -> np.ndarray:
    return np.array([v & MASK32], dtype=np.uint32)


def step_seed(base: int, step: int) -> int:
    """The seed of step ``step`` of a run seeded ``base`` (C: pk_rng_step_seed)."""
    return (int(base) + int(step)) & 0xFFFFFFFFFFFFFFFF


def unit_of(name: str) -> int:
    """A node's unit number: the 32-bit FNV-1a hash of its FX name (stable across runs and machines)."""
    h = 0x811C9DC5
    for b in name.encode():
        h = ((h ^ b) * 0x01000193) & MASK32
    return h


def key(seed: int, unit: int) -> int:
    """One node's key in one step (C: pk_rng_key)."""
    seed &= 0xFFFFFFFFFFFFFFFF
    k = _mix32(_u32(seed) ^ np.uint32(0x243F6A88))
    k = _mix32(k ^ _u32(seed >> 32))
    return int(_mix32(k ^ _u32(unit))[0])


def bits(k: int, n: int) -> np.ndarray:
    """The random bits of elements 0 .. n-1 under key ``k`` (C: pk_rng_bits)."""
    kk = np.uint32(k & MASK32)
    i = np.arange(n, dtype=np.uint32)
    return _mix32(_mix32(i + kk) ^ kk)


def keep_below(p: float) -> int:
    """An element is kept iff its bits are below this (C: pk_rng_keep_below)."""
    keep = 1.0 - float(p)
    if not keep > 0.0:
        return 0
    if keep >= 1.0:
        return 1 << 32
    return int(keep * 4294967296.0)


def keep_mask(seed: int, unit: int, shape, p: float) -> np.ndarray:
    """The dropout mask (True: kept) of a node's output of ``shape``."""
    n = int(np.prod(shape)) if len(shape) else 1
    return (bits(key(seed, unit), n).astype(np.uint64) < keep_below(p)).reshape(tuple(shape))


def native_dropout(x, p: float, train, seed: int, unit: int):
    """``(output, mask)`` of aten.native_dropout on tensor ``x`` with the C kernel's mask, computed as
    aten computes it: ``x * mask * (1 / (1 - p))``; not training: ``(x.clone(), all True)``."""
    import torch

    if train is not None and not train:
        return x.clone(), torch.ones(x.shape, dtype=torch.bool)
    mask = torch.from_numpy(keep_mask(seed, unit, tuple(x.shape), p))
    scale = 0.0 if 1.0 - p == 0.0 else 1.0 / (1.0 - p)
    return x.mul(mask).mul_(scale), mask


def dropout_hook(base: int = 0):
    """For a PyTorch reference run of the traced step: ``hook(step)(node, args) -> (output, mask)``
    replacing a native_dropout node's draw by the C kernel's mask of that step."""

    def for_step(step: int):
        seed = step_seed(base, step)

        def draw(node, args):
            x, p = args[0], float(args[1])
            train = args[2] if len(args) > 2 else True
            return native_dropout(x, p, train, seed, unit_of(node.name))

        return draw

    return for_step
