"""A training graph read as a chain of layers, or the reason it is not one.

The chain algorithms (POFO, :mod:`.pofo`) need the shape they were published for: forward
nodes ``f_0 .. f_{N-1}`` in a path (each reads only the one before), then backward nodes in
reverse layer order, ``b_{N-1}`` first, each reading only the backward node before it and, of
the forward tensors, at most the layer's input ``x_{i-1}`` and its output ``x_i``.  The zoo's
``linear``, ``vgg16`` and ``vgg16_cifar`` are chains (the loss counts as the last layer); a
residual network is not: its first branch point has two successors in the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...graph.core import BACKWARD, FORWARD, CostedGraph


@dataclass(frozen=True)
class Chain:
    """Layer ``i``'s forward node is ``fwd[i]``, its backward node ``bwd[i]``; ``reads_input[i]`` /
    ``reads_output[i]``: whether ``bwd[i]`` reads ``x_{i-1}`` / ``x_i``."""

    fwd: tuple[int, ...]
    bwd: tuple[int, ...]
    reads_input: tuple[bool, ...]
    reads_output: tuple[bool, ...]

    @property
    def layers(self) -> int:
        return len(self.fwd)


class NotAChain(ValueError):
    """The graph is not a chain; the message names the first node at fault."""


def _label(g: CostedGraph, v: int) -> str:
    return f"node {v} ({g.nodes[v].name})"


def read_chain(g: CostedGraph) -> Chain:
    """The chain view of ``g``, or :class:`NotAChain` naming the first node that breaks it."""
    n = len(g.nodes)
    fwd = [v for v in range(n) if g.nodes[v].kind == FORWARD]
    bwd = [v for v in range(n) if g.nodes[v].kind == BACKWARD]
    for v in range(n):  # a branch in either pass, whatever else is wrong
        same = [s for s in g.succs[v] if g.nodes[s].kind == g.nodes[v].kind]
        if len(same) > 1:
            names = ", ".join(_label(g, s) for s in same)
            raise NotAChain(
                f"{_label(g, v)} has more than one successor in the {g.nodes[v].kind} pass ({names}); "
                "POFO's dynamic program handles chains only (linear, vgg16, vgg16_cifar)"
            )
    if fwd != list(range(len(fwd))):
        v = next(v for v in range(n) if g.nodes[v].kind == BACKWARD)
        raise NotAChain(f"{_label(g, v)} is a backward node before the end of the forward pass")
    if len(bwd) != len(fwd):
        raise NotAChain(
            f"the graph has {len(fwd)} forward and {len(bwd)} backward nodes; a chain has one backward node per layer"
        )
    L = len(fwd)
    layer_of_bwd = {b: L - 1 - j for j, b in enumerate(bwd)}  # bwd[j] is the backward of layer L-1-j
    # the first node (in id order) whose successors do not fit the chain
    for v in range(n):
        succ = g.succs[v]
        if v < L:
            allowed = {v + 1} if v + 1 < L else set()
            allowed |= {bwd[L - 1 - v]}  # b_v may read its output
            if v + 1 < L:
                allowed.add(bwd[L - 2 - v])  # b_{v+1} may read its input
            fsucc = [s for s in succ if s < L]
        else:
            i = layer_of_bwd[v]
            allowed = {bwd[L - i]} if i > 0 else set()  # b_{i-1}
            fsucc = list(succ)
        if len(fsucc) > 1 or any(s not in allowed for s in succ):
            names = ", ".join(_label(g, s) for s in succ)
            raise NotAChain(
                f"{_label(g, v)} has more than one successor ({names}) beyond what a chain allows; "
                "POFO's dynamic program handles chains only (linear, vgg16, vgg16_cifar)"
            )
    for i in range(1, L):
        if g.preds[i] != (i - 1,):
            raise NotAChain(f"{_label(g, i)} must read exactly the forward node before it, {_label(g, i - 1)}")
    if L and any(p < L for p in g.preds[0]):
        raise NotAChain(f"{_label(g, 0)} reads another node")
    reads_in, reads_out = [], []
    for i in range(L):
        b = bwd[L - 1 - i]
        preds = set(g.preds[b])
        if i < L - 1 and bwd[L - 2 - i] not in preds:
            raise NotAChain(f"{_label(g, b)} does not read the gradient {_label(g, bwd[L - 2 - i])}")
        reads_in.append(i > 0 and (i - 1) in preds)
        reads_out.append(i in preds)
    return Chain(tuple(fwd), tuple(bwd[::-1]), tuple(reads_in), tuple(reads_out))
