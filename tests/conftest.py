import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

from poet.graph.core import CostedGraph, CostedNode  # noqa: E402


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own empty solve cache: none reads or fills the user's."""
    monkeypatch.setenv("POET_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def training_chain(n_layers: int, seed: int = 0, *, skip: bool = False) -> CostedGraph:
    """A tiny forward chain with its backward chain; conv-like grads read the layer input.

    With ``skip``, the last backward node also reads the first forward output.
    """
    rnd = random.Random(seed)

    def node(name, kind):
        size = rnd.randint(1, 6) * 100
        return CostedNode(
            name,
            kind,
            size,
            compute_time_s=rnd.uniform(0.5, 2.0),
            compute_energy_j=rnd.uniform(1.0, 3.0),
            pagein_time_s=rnd.uniform(0.05, 0.6),
            pagein_energy_j=rnd.uniform(0.05, 1.5),
            pageout_time_s=rnd.uniform(0.05, 0.6),
            pageout_energy_j=rnd.uniform(0.05, 1.5),
        )

    nodes, edges = [], []
    for i in range(n_layers):
        nodes.append(node(f"f{i}", "forward"))
        if i:
            edges.append((i - 1, i))
    for j in range(n_layers):
        b, f = n_layers + j, n_layers - 1 - j
        nodes.append(node(f"b{f}", "backward"))
        edges.append((f, b) if j == 0 else (b - 1, b))
        if j and f >= 0:
            edges.append((f, b))
    if skip and n_layers > 2:
        edges.append((0, 2 * n_layers - 1))
    return CostedGraph(f"chain{n_layers}", tuple(nodes), tuple(edges))


def random_dag(seed: int, n: int, fixed_ram_bytes: int = 0) -> CostedGraph:
    """A random DAG with random sizes (some zero) and costs, for property tests."""
    rnd = random.Random(seed)
    nodes, edges = [], []
    for v in range(n):
        nodes.append(
            CostedNode(
                f"n{v}",
                "forward" if v < n // 2 else "backward",
                rnd.choice([0, 64, 128, 512, 1000]),
                rnd.uniform(0, 2),
                rnd.uniform(0, 2),
                rnd.uniform(0, 1),
                rnd.uniform(0, 1),
                rnd.uniform(0, 1),
                rnd.uniform(0, 1),
            )
        )
        if v:
            for u in rnd.sample(range(v), k=min(v, rnd.randint(1, 3))):
                edges.append((u, v))
    return CostedGraph(f"dag{seed}", tuple(nodes), tuple(edges), fixed_ram_bytes=fixed_ram_bytes)


def relu_chain(blocks: int, seed: int = 0) -> CostedGraph:
    """conv -> bias -> relu blocks with their backward, dependencies as in the zoo.

    A conv's grad reads the conv's input, a bias-add's grad reads nothing, a ReLU's
    grad reads its output: so the conv and bias outputs are dead once the ReLU has
    run, and restoring a ReLU output by recomputation needs the whole block again
    (a recomputation cascade).
    """
    rnd = random.Random(seed)
    nodes, edges = [], []

    def node(name, kind, cheap=False):
        size = rnd.randint(1, 6) * 100
        scale = 0.1 if cheap else 1.0
        nodes.append(
            CostedNode(
                name,
                kind,
                size,
                compute_time_s=scale * rnd.uniform(0.5, 2.0),
                compute_energy_j=scale * rnd.uniform(1.0, 3.0),
                pagein_time_s=rnd.uniform(0.05, 0.6),
                pagein_energy_j=rnd.uniform(0.05, 1.5),
                pageout_time_s=rnd.uniform(0.05, 0.6),
                pageout_energy_j=rnd.uniform(0.05, 1.5),
            )
        )
        return len(nodes) - 1

    x = None
    outs = []
    for k in range(blocks):
        c = node(f"conv{k}", "forward")
        if x is not None:
            edges.append((x, c))
        e = node(f"bias{k}", "forward", cheap=True)
        edges.append((c, e))
        r = node(f"relu{k}", "forward", cheap=True)
        edges.append((e, r))
        outs.append((x, r))
        x = r
    g_prev = None
    for k in reversed(range(blocks)):
        x_in, r = outs[k]
        gr = node(f"relu{k}.grad", "backward", cheap=True)
        edges.append((r, gr))
        if g_prev is not None:
            edges.append((g_prev, gr))
        ge = node(f"bias{k}.grad", "backward", cheap=True)
        edges.append((gr, ge))
        gc = node(f"conv{k}.grad", "backward")
        edges.append((ge, gc))
        if x_in is not None:
            edges.append((x_in, gc))
        g_prev = gc
    return CostedGraph(f"relu_chain{blocks}", tuple(nodes), tuple(edges))


BOUND_STRATEGIES = ({}, {"remat": False}, {"paging": False})


def bound_case(seed: int):
    """A small graph (a training chain, a conv-bias-ReLU chain or a random DAG), a RAM budget from its
    minimum to half-way to keep-all, a deadline or none, and a strategy's techniques: where a lower bound
    is checked against the exact optimum (kind 0 and 1 are chains, kind 2 a random DAG)."""
    from poet.schedule import Budget
    from poet.solve.baselines import keep_all_peak

    rnd = random.Random(seed)
    kind = seed % 3
    if kind == 0:
        g = training_chain(rnd.randint(2, 4), seed, skip=rnd.random() < 0.5)
    elif kind == 1:
        g = relu_chain(rnd.choice([1, 2]), seed)
    else:
        g = random_dag(seed, rnd.randint(5, 10))
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    ram = max(1, int(lo + rnd.choice([0.0, 0.2, 0.5]) * (hi - lo)))
    slack = rnd.choice([None, 1.1, 1.5, 3.0])
    return g, Budget(ram, None if slack is None else slack * g.plain_runtime_s), rnd.choice(BOUND_STRATEGIES), kind


def stage_optimum(g, b, strategy) -> float | None:
    """The MILP's proven optimum (the stage form the bounds are about), None when infeasible."""
    from poet.solve.lp import solve_highs
    from poet.solve.milp import build

    f = build(g, b, **strategy)
    r = solve_highs(f.problem, gap=1e-9, time_limit=60)
    assert r.status in ("optimal", "infeasible"), r.detail
    return None if r.x is None else r.objective * f.energy_unit


@pytest.fixture(scope="module")
def graph_dict():
    """A small valid poet-graph/1 document (a training chain), for the bad-input tests to break."""
    from poet.graph.io import graph_to_dict

    return graph_to_dict(training_chain(4, seed=2))


@pytest.fixture(scope="module")
def schedule_dict():
    """A small valid poet-schedule/1 document (a paging solve of that chain), for the bad-input tests."""
    from poet.schedule.io import schedule_to_dict
    from poet.solve.api import solve

    return schedule_to_dict(solve(training_chain(4, seed=2), memory="80%", runtime="3x", strategy="paging"))
