"""Dropout in C: the counter-based mask equals poet.cbackend.rng's bit for bit (every layout, seed,
unit and step), the output and gradient are aten's arithmetic on that mask bit for bit, and the masks
behave like Bernoulli draws (keep rate, independence across nodes and steps)."""

from __future__ import annotations

import ctypes
import itertools

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from ckernel_cases import empty_layouts, layouts, randn  # noqa: E402
from ckernel_specs import set_step_seed  # noqa: E402

from poet.cbackend import hostlib, rng, vocabulary  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402

aten = torch.ops.aten


def c_step_seed(base: int, step: int) -> int:
    lib = hostlib.library()
    lib.pk_rng_step_seed.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    lib.pk_rng_step_seed.restype = ctypes.c_uint64
    return int(lib.pk_rng_step_seed(ctypes.c_uint64(base), ctypes.c_uint32(step)))


def dropout(x, p, train, unit, out_layout=None):
    y = torch.full(x.shape, float("nan")) if out_layout is None else out_layout
    m = torch.zeros(x.shape, dtype=torch.bool)
    hostlib.call("native_dropout", [x], [y, m], (float(p), int(train), unit))
    return y, m


@pytest.mark.parametrize(
    "seed, unit", [(0, 0), (1, 7), (2**40 + 3, rng.unit_of("native_dropout")), (2**64 - 1, 2**32 - 1)]
)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_and_output_equal_the_python_reference_on_every_layout(seed, unit, p):
    x0 = randn(4, 5, 6)
    set_step_seed(seed)
    want_out, want_mask = rng.native_dropout(x0, p, True, seed, unit)
    for (nx, x), (no, y) in itertools.product(layouts(x0), empty_layouts(x0.shape)):
        _, m = dropout(x, p, True, unit, y)
        assert torch.equal(m, want_mask), (nx, no)
        assert torch.equal(y, want_out), (nx, no)


def test_output_is_atens_arithmetic_on_the_mask():
    x = randn(1000)
    x[:4] = torch.tensor([float("inf"), -0.0, float("nan"), 1e-38])
    set_step_seed(5)
    y, m = dropout(x, 0.3, True, 11)
    assert torch.equal(y.isnan(), (x * m).isnan())
    ok = ~y.isnan()
    assert torch.equal(y[ok], x.mul(m).mul_(1 / 0.7)[ok])
    g = randn(1000, seed=2)
    gi = torch.empty(1000)
    hostlib.call("native_dropout_backward", [g, m], [gi], (1 / 0.7,))
    assert torch.equal(gi, aten.native_dropout_backward(g, m, 1 / 0.7))


def test_keep_rate_and_independence():
    x = torch.ones(200_000)
    set_step_seed(123)
    rates = []
    masks = []
    for unit in (1, 2):
        _, m = dropout(x, 0.2, True, unit)
        rates.append(float(m.float().mean()))
        masks.append(m)
    set_step_seed(124)  # the next step
    masks.append(dropout(x, 0.2, True, 1)[1])
    sigma = (0.8 * 0.2 / x.numel()) ** 0.5
    assert all(abs(r - 0.8) < 5 * sigma for r in rates), rates
    agree = 0.8**2 + 0.2**2  # two independent masks agree this often
    for a, b in itertools.combinations(masks, 2):
        assert abs(float((a == b).float().mean()) - agree) < 5 * sigma


def test_edges_and_eval():
    x = randn(3, 4)
    y, m = dropout(x, 0.0, True, 3)
    assert m.all() and torch.equal(y, x)
    y, m = dropout(x, 1.0, True, 3)
    assert not m.any() and torch.equal(y, torch.zeros(3, 4))
    y, m = dropout(x, 0.5, False, 3)
    assert m.all() and torch.equal(y, x)
    with pytest.raises(hostlib.KernelError, match="bad arguments"):
        dropout(x, 1.5, True, 3)


def test_step_seeds_agree_and_the_hook_reproduces_the_kernel():
    base = 2**33 + 17
    x = randn(7, 9)
    hook = rng.dropout_hook(base)

    class Node:  # what the reference run hands the hook: the FX node (its name) and its arguments
        name = "native_dropout_3"

    for step in range(3):
        assert c_step_seed(base, step) == rng.step_seed(base, step)
        set_step_seed(c_step_seed(base, step))
        y, m = dropout(x, 0.25, True, rng.unit_of(Node.name))
        want_y, want_m = hook(step)(Node, (x, 0.25, True))
        assert torch.equal(m, want_m) and torch.equal(y, want_y)


def test_unit_of_is_fnv1a():
    assert rng.unit_of("") == 0x811C9DC5
    assert rng.unit_of("a") == 0xE40C292C
    assert rng.unit_of("native_dropout") != rng.unit_of("native_dropout_1")


def test_the_traced_dropout_nodes_carry_their_unit():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.3)).train()
    prog = export_training_graph(model, (randn(2, 4),), lambda out: out.sum())
    nodes = [n for n in prog.gm.graph.nodes if n.target == aten.native_dropout.default]
    assert nodes
    for n in nodes:
        spec = vocabulary.spec_for(n)
        assert spec.kernel == "native_dropout" and spec.scalars == (0.3, 1, rng.unit_of(n.name))
