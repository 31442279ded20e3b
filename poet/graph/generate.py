"""Generated training graphs: families of shapes nobody tuned the solvers for.

The zoo holds real networks; these are torture cases.  Each family builds a
forward dataflow graph, seeded, and :func:`training_graph` adds the loss and the
backward pass the way the zoo does (a node's backward reads the gradients of all
of its consumers and the forward tensors its derivative needs).  The result is a
structural :class:`~poet.graph.core.Graph`; a device's cost model prices it like
any zoo model.  A spec ``FAMILY:NODES[:SEED]`` (``layered:250:1``) names one
graph and is accepted wherever a model name is (``poet solve --model
layered:250:1 --device a72``, ``poet export-graph``), so a torture case can be
written out as a ``poet-graph/1`` file and shared.

``NODES`` is the size of the whole training graph (forward, loss and backward),
to within a few nodes.  Families:

* ``layered`` (alias ``rl``): random layered DAGs with dense skip connections,
  in the spirit of the layered graphs of Gagrani et al., *Neural Topological
  Ordering for Computation Graphs* (NeurIPS 2022, appendix A): layers of random
  width; each node reads every node of the layer below with probability 0.2 (at
  least one) and every older node with probability 0.2 / distance in layers;
  random output sizes.  (Our own generator, not theirs: the statistics differ.)
* ``fan``: blocks of one node fanning out to many short branches and one node
  reading all of them (wide fan-out and fan-in).
* ``chain``: one long chain (deep recomputation chains).
* ``diamond``: stacked diamonds, each with an inner diamond in one arm.
* ``unet``: an encoder halving its outputs, a decoder doubling them, and a skip
  edge from every encoder level to its decoder level (big tensors alive long).
* ``tiny-huge``: a random DAG of tiny outputs with one huge node in the middle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .core import BACKWARD, FORWARD, Graph, GraphError, Node

# what a node's backward reads besides the incoming gradients: its inputs, its output or nothing
_SAVES = ("input", "output", "none")


@dataclass
class _Forward:
    """A forward graph being built: per node its output bytes, FLOPs and inputs (older ids)."""

    name: str
    sizes: list[int] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    inputs: list[list[int]] = field(default_factory=list)

    def add(self, size: int, inputs, rnd: random.Random) -> int:
        self.sizes.append(max(4, int(size)) // 4 * 4)
        # FLOPs per output element: element-wise (a few) up to matmul-like (hundreds)
        self.flops.append(float(self.sizes[-1] // 4 * rnd.choice((2, 8, 50, 200))))
        self.inputs.append(sorted(set(inputs)))
        return len(self.sizes) - 1

    def __len__(self) -> int:
        return len(self.sizes)


def _size(rnd: random.Random, lo: int = 1024, hi: int = 65536) -> int:
    """An output size spread evenly over the powers of two between lo and hi (a log-uniform draw)."""
    return int(lo * (hi / lo) ** rnd.random())


def _layered(n: int, rnd: random.Random, density: float = 0.2) -> _Forward:
    f = _Forward("layered")
    layers: list[list[int]] = []
    while len(f) < n:
        width = min(n - len(f), rnd.randint(2, 12))
        layer = []
        for _ in range(width):
            if not layers:
                layer.append(f.add(_size(rnd), (), rnd))
                continue
            below = layers[-1]
            ins = [u for u in below if rnd.random() < density] or [rnd.choice(below)]
            for dist, older in enumerate(reversed(layers[:-1]), start=2):
                ins += [u for u in older if rnd.random() < density / dist]
            layer.append(f.add(_size(rnd), ins, rnd))
        layers.append(layer)
    return f


def _fan(n: int, rnd: random.Random) -> _Forward:
    f = _Forward("fan")
    hub = f.add(_size(rnd), (), rnd)
    while len(f) < n:
        ends = []
        for _ in range(min(max(1, (n - len(f)) // 2), rnd.randint(8, 24))):
            x = hub
            for _ in range(rnd.randint(1, 2)):
                x = f.add(_size(rnd), (x,), rnd)
            ends.append(x)
        hub = f.add(_size(rnd), ends, rnd)
    return f


def _chain(n: int, rnd: random.Random) -> _Forward:
    f = _Forward("chain")
    x = f.add(_size(rnd), (), rnd)
    while len(f) < n:
        x = f.add(_size(rnd), (x,), rnd)
    return f


def _diamond(n: int, rnd: random.Random) -> _Forward:
    f = _Forward("diamond")
    top = f.add(_size(rnd), (), rnd)
    while len(f) < n:
        left = f.add(_size(rnd), (top,), rnd)
        a = f.add(_size(rnd), (top,), rnd)  # the right arm is itself a diamond
        b = f.add(_size(rnd), (a,), rnd)
        c = f.add(_size(rnd), (a,), rnd)
        right = f.add(_size(rnd), (b, c), rnd)
        top = f.add(_size(rnd), (left, right, top), rnd)
    return f


def _unet(n: int, rnd: random.Random) -> _Forward:
    f = _Forward("unet")
    # per level: two convolutions down, two up; sizes halve going down
    levels = max(2, min(12, n // 8))
    per_level = max(1, n // (4 * levels))
    size = 1 << 20
    x = f.add(size, (), rnd)
    skips = []
    for _ in range(levels):
        for _ in range(per_level):
            x = f.add(size, (x,), rnd)
        skips.append(x)
        size = max(256, size // 2)
        x = f.add(size, (x,), rnd)  # downsample
    for skip in reversed(skips):
        size = f.sizes[skip]
        x = f.add(size, (x,), rnd)  # upsample
        x = f.add(size, (x, skip), rnd)  # concatenate with the encoder's level
        for _ in range(per_level - 1):
            x = f.add(size, (x,), rnd)
    while len(f) < n:
        x = f.add(f.sizes[x], (x,), rnd)
    return f


def _tiny_huge(n: int, rnd: random.Random) -> _Forward:
    f = _Forward("tiny-huge")
    huge_at = n // 2
    for i in range(n):
        ins = rnd.sample(range(i), k=min(i, rnd.randint(1, 3))) if i else ()
        if i == huge_at:
            f.add(40 * n, ins, rnd)  # about a third of all the tiny ones together
        else:
            f.add(rnd.randint(16, 256), ins, rnd)
    return f


FAMILIES = {
    "layered": _layered,
    "fan": _fan,
    "chain": _chain,
    "diamond": _diamond,
    "unet": _unet,
    "tiny-huge": _tiny_huge,
}
ALIASES = {"rl": "layered"}
MIN_NODES = 8
MAX_NODES = 100_000


def training_graph(f: _Forward, rnd: random.Random, name: str, batch_size: int = 1) -> Graph:
    """The forward graph with a loss reading every forward output nobody reads, and its backward pass.

    Backward node ids run in reverse forward order, so every edge goes from a lower id to a
    higher one.  Backward node ``bwd.fV`` outputs the gradient with respect to node V's output
    (the same size; the weight gradient is folded in), summed over V's consumers: it reads the
    backward nodes of all of them (the loss's for a node nobody reads), and the forward tensors
    its derivative needs: V's inputs, V's output or neither (drawn per node).  (The zoo's
    convention, a gradient with respect to a layer's inputs, would make a node with twenty inputs
    produce a gradient twenty times its size: on dense DAGs the backward pass would hold most of
    the RAM.)
    """
    nf = len(f)
    consumers: list[list[int]] = [[] for _ in range(nf)]
    for v, ins in enumerate(f.inputs):
        for u in ins:
            consumers[u].append(v)
    sinks = [v for v in range(nf) if not consumers[v]]
    loss, loss_bwd = nf, nf + 1

    def bwd(v: int) -> int:
        return nf + 2 + (nf - 1 - v)

    b = batch_size
    nodes = [Node(f"f{v}", FORWARD, b * f.sizes[v], b * f.flops[v], 0, "op") for v in range(nf)]
    edges = [(u, v) for v in range(nf) for u in f.inputs[v]]
    nodes.append(Node("loss", FORWARD, 4 * b, float(b * sum(f.sizes[s] for s in sinks)), 0, "loss"))
    edges += [(s, loss) for s in sinks]
    nodes.append(Node("bwd.loss", BACKWARD, 4 * b, float(b * sum(f.sizes[s] for s in sinks)), 0, "loss"))
    edges += [(loss, loss_bwd)] + [(s, loss_bwd) for s in sinks]
    for v in reversed(range(nf)):
        nodes.append(Node(f"bwd.f{v}", BACKWARD, b * f.sizes[v], 2.0 * b * f.flops[v], 0, "op"))
        me = bwd(v)
        edges += [(bwd(c), me) for c in consumers[v]] or [(loss_bwd, me)]
        saves = rnd.choice(_SAVES)
        if saves == "input":
            edges += [(u, me) for u in f.inputs[v]]
        elif saves == "output":
            edges.append((v, me))
    meta = {"model": name, "batch_size": b, "generated": name, "forward_nodes": nf}
    return Graph(name=name, nodes=tuple(nodes), edges=tuple(edges), meta=meta)


def parse_spec(spec: str) -> tuple[str, int, int]:
    """``FAMILY:NODES[:SEED]`` -> (family, nodes, seed); a clear error for anything else."""
    parts = spec.split(":")
    family = ALIASES.get(parts[0], parts[0])
    if family not in FAMILIES or len(parts) not in (2, 3):
        raise GraphError(
            f"{spec!r} is not a generated graph: write FAMILY:NODES[:SEED], e.g. layered:250:1, with "
            f"FAMILY one of {', '.join([*FAMILIES, *ALIASES])}"
        )
    try:
        nodes = int(parts[1])
        seed = int(parts[2]) if len(parts) == 3 else 0
    except ValueError:
        raise GraphError(f"{spec!r}: NODES and SEED must be whole numbers, e.g. layered:250:1") from None
    if not MIN_NODES <= nodes <= MAX_NODES:
        raise GraphError(f"{spec!r}: NODES must be between {MIN_NODES} and {MAX_NODES:,}")
    return family, nodes, seed


def is_spec(name: object) -> bool:
    """Does ``name`` look like a generated graph's spec (a known family, then a colon)?"""
    return isinstance(name, str) and ALIASES.get(name.split(":")[0], name.split(":")[0]) in FAMILIES and ":" in name


def generate(spec: str, batch_size: int = 1) -> Graph:
    """The training graph named by ``spec`` (``FAMILY:NODES[:SEED]``); the same spec, the same graph."""
    family, nodes, seed = parse_spec(spec)
    rnd = random.Random(f"{family}:{nodes}:{seed}")
    forward = FAMILIES[family](max(3, (nodes - 2) // 2), rnd)
    return training_graph(forward, rnd, f"{family}:{nodes}:{seed}", batch_size)
