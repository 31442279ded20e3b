"""Fusion in tiled graphs: which layers are computed inside their neighbours' tiles instead of stored.

A GELU between two linears (a transformer's FFN) is fused when either linear is
split: the rewrite (:mod:`poet.graph.tiling`) then makes no node for it, and the
linear after it does its work on the fly (see :func:`fused_activations`).
"""

from __future__ import annotations

from .zoo import DATA


def fused_activations(layers, n_of: list[int]) -> dict[int, tuple[int, int]]:
    """GELUs fused into the linears around them: GELU index -> (the linear it reads, the linear reading it).

    Where a sequence GELU sits between two linears that read nothing else of each other and one of
    them is split, the GELU's output is never stored: the linear after it applies GELU to the first
    linear's tiles element by element as it reads them (forward), its weight gradient recomputes
    GELU the same way (extra FLOPs, costed), and its grad-input tiles multiply by GELU'(x) on the
    way out, so they are the gradient of the first linear's output.  That removes a tensor four
    times the hidden size per token, and GELU's backward, whose working set (three such rows) sets
    the tiled minimum otherwise.
    """
    consumers: list[list[int]] = [[] for _ in layers]
    for i, lay in enumerate(layers):
        for x in dict.fromkeys(lay.inputs):
            if x != DATA:
                consumers[x].append(i)
    fused = {}
    for g, lay in enumerate(layers):
        if lay.op != "gelu" or len(lay.shape) != 2 or len(lay.inputs) != 1 or lay.inputs[0] == DATA:
            continue
        f = lay.inputs[0]
        if consumers[f] != [g] or len(consumers[g]) != 1:
            continue
        c = consumers[g][0]
        lin = layers[f], layers[c]
        if any(x.op != "linear" or len(x.shape) != 2 for x in lin) or layers[c].inputs != (g,):
            continue
        if max(n_of[f], n_of[c]) > 1:
            fused[g] = (f, c)
    return fused
