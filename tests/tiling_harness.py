"""The differential harness of the tiled executor: one aten op at a time, tiled, against eager.

A case is a small function of a few tensors calling the op under test (``make_fx`` traces it into
an aten graph with fake values, as ``torch.export`` gives the joint graph), with inputs drawn by
hypothesis: shapes, tile counts and layouts (contiguous, transposed in memory, channels-last,
strided slices, broadcast operands, inputs whose mean dwarfs their spread).  The graph becomes a
:class:`~poet.graph.torch_export.TorchProgram` (its outputs bound like gradients), is tiled by
:func:`poet.execute.tiled.tile_program` with every op split, and runs on the executor under a
schedule that recomputes; its outputs are compared with the op run eagerly on the same tensors.

An input marked *tiled* reaches the op through ``aten.clone`` (itself tiled), so the op reads tiles;
an untiled one is a whole tensor the op's tiles slice.  :mod:`tiling_cases` draws the cases.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from numerics import tiled_error
from torch.fx.experimental.proxy_tensor import make_fx

from poet.execute import Executor, reference_schedule
from poet.execute.tiled import tile_program
from poet.execute.tiled_views import ALIAS_RULES
from poet.graph.torch_export import program_from_joint_graph
from poet.graph.torch_program import Binding
from poet.hardware.cost import costed_program

aten = torch.ops.aten


@dataclass
class Case:
    """``fn(*inputs)`` calls ``op``; ``tiled[i]``: input ``i`` reaches it through a tiled clone (``"batch"``:
    tiled by samples, see :func:`_source`)."""

    op: object
    fn: object
    inputs: tuple
    tiled: tuple = ()
    exact: bool = False  # every output bit for bit (elementwise ops, views, data movement)
    may_decline: str = ""  # why the rule may leave this draw whole (it must then say so)
    notes: dict = field(default_factory=dict)


def _as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def traced(case: Case):
    """The case's function with its tiled inputs cloned first, traced to an aten graph with fake values."""

    def f(*xs):
        xs = [_source(x, t) for x, t in zip(xs, case.tiled or (False,) * len(xs))]
        return _as_tuple(case.fn(*xs))

    return make_fx(f, tracing_mode="fake")(*case.inputs)


def _source(x, how):
    """How an input reaches the op: whole, in the tiles ``clone`` gets (rows of N x C x H x W, tokens...),
    or (``"batch"``) in tiles of whole samples, through a (N, rest) clone viewed back."""
    if how == "batch":
        packed = aten.clone.default(x, memory_format=torch.contiguous_format)
        return aten.view.default(aten.clone.default(aten.view.default(packed, [x.shape[0], -1])), list(x.shape))
    return aten.clone.default(x) if how else x


def op_program(gm, inputs):
    """A :class:`TorchProgram` of a traced function: inputs as the batch, outputs bound as gradients."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = next(n for n in gm.graph.nodes if n.op == "output")
    template = types.SimpleNamespace(
        name="op",
        placeholders=[("input", str(i), n) for i, n in enumerate(phs)],
        bindings=[Binding("grad", f"out{i}", None) for i in range(len(out.args[0]))],
        params={},
        buffers={},
        example_batch=tuple(inputs),
        model=None,
        fixed_breakdown={},
        eager_difference=0.0,
    )
    return program_from_joint_graph(gm, template)


@dataclass
class Outcome:
    """What one case gave: was the op tiled (or why not), and its error in units of the bound."""

    tiled: bool
    reason: str
    error: float  # worst tiled_error over the outputs (0: bitwise)
    bitwise: bool
    report: object


def _declined(rep, names, op) -> str:
    for nm in names:
        if nm in rep.untiled:
            return rep.untiled[nm]
    whole = [f"{k}: {w}" for k, w in rep.assembled.items() if str(op) in w]
    return "; ".join(whole)


class EagerFailed(Exception):
    """The op itself fails on the drawn inputs in eager mode (a PyTorch limit, e.g. a oneDNN layout it
    cannot reorder): nothing to compare a tiled run with."""


def run_case(case: Case, count: int) -> Outcome:
    try:
        want = _as_tuple(case.fn(*case.inputs))
    except RuntimeError as e:
        raise EagerFailed(str(e)) from e
    gm = traced(case)
    names = [n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is case.op]
    assert names, f"the traced case holds no {case.op}"
    prog = op_program(gm, case.inputs)
    tp, rep = tile_program(prog, count, 0, 0)
    res = Executor(tp).run(reference_schedule(costed_program(tp, "m4"), "remat", every=2), case.inputs, apply=False)
    got = [res.grads[f"out{i}"] for i in range(len(prog.bindings))]
    try:
        want64 = _as_tuple(case.fn(*(x.double() if x.is_floating_point() else x for x in case.inputs)))
    except RuntimeError:  # an op with a dtype argument: float32 only
        want64 = want
    worst, bitwise = 0.0, True
    for g, w, w64 in zip(got, want, want64):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if torch.equal(g, w) or (
            g.is_floating_point() and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(), w.nan_to_num())
        ):
            continue
        bitwise = False
        if not g.is_floating_point():
            worst = float("inf")
            continue
        worst = max(worst, tiled_error(g, w, w64.to(torch.float64)))
    if case.op in ALIAS_RULES:  # a view applied tile by tile is no op of its own: its input stayed in tiles
        tiled = not any(str(case.op) in why for why in rep.assembled.values())
    else:
        tiled = any(nm in rep.tiled for nm in names)
    return Outcome(tiled, "" if tiled else _declined(rep, names, case.op), worst, bitwise, rep)


# ------------------------------------------------------------------ drawing tensors
def dims(draw, nd: int, *, rows=(3, 9), lo=1, hi=4) -> tuple:
    """A small shape: for 4-D (N, C, H, W) with H from ``rows``; else sizes in [lo, hi] and one of ``rows``."""
    if nd == 4:
        return (
            draw(st.integers(1, 3)),
            draw(st.integers(1, 4)),
            draw(st.integers(*rows)),
            draw(st.integers(2, 6)),
        )
    shape = [draw(st.integers(lo, hi)) for _ in range(nd)]
    shape[draw(st.integers(0, nd - 1))] = draw(st.integers(*rows))
    return tuple(shape)


LAYOUTS = ("contiguous", "transposed", "channels_last", "strided")


def laid_out(draw, t: torch.Tensor, *, inner: bool = False) -> torch.Tensor:
    """``t``'s values in a drawn memory layout: contiguous, dims swapped in memory, channels-last, or a
    strided slice (``inner``: the last dim stays packed, as the fused attention kernel requires)."""
    kind = draw(st.sampled_from(LAYOUTS[:2] if inner else LAYOUTS))
    last = t.dim() - 1 if inner else t.dim()
    if kind == "transposed" and last >= 2:
        i, j = draw(st.sampled_from([(a, b) for a in range(last) for b in range(a + 1, last)]))
        return t.transpose(i, j).contiguous().transpose(i, j)
    if kind == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if kind == "strided" and t.dim() >= 1:
        wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    return t


def values(draw, shape, *, positive=False, shifted=False, dtype=torch.float32, inner=False) -> torch.Tensor:
    """Seeded values: normal, or positive (for log, sqrt, pow...), or with a mean far larger than the spread."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    t = torch.randn(shape, generator=g)
    if positive:
        t = t.abs() + 0.5
    if shifted:
        spread = draw(st.sampled_from([1.0, 0.05]))
        shift = draw(st.sampled_from([0.0, 30.0, 1000.0]))
        t = t * spread + shift
    return laid_out(draw, t, inner=inner)


def broadcast_shape(draw, shape) -> tuple:
    """A shape that broadcasts to ``shape``: the same, its trailing dims, or with some dims 1, or a scalar."""
    kind = draw(st.sampled_from(["same", "trailing", "ones", "scalar"]))
    if kind == "trailing":
        return tuple(shape[draw(st.integers(1, len(shape))) :]) or ()
    if kind == "ones":
        return tuple(1 if draw(st.booleans()) else s for s in shape)
    if kind == "scalar":
        return ()
    return tuple(shape)
