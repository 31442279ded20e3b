"""The compiled step against PyTorch: same weights, same batches, results compared within a bound.

The reference is the traced training step (the joint aten graph, which equals eager
``loss.backward()`` bit for bit for the models POET traces; docs/torch.md, "Numerics") run by
PyTorch on the same parameters, buffers and batches, followed by the same update (SGD, optional
momentum, as ``torch.optim.SGD``).  For a tiled program the reference is the untiled step, so the
comparison covers tiling too.  The C kernels sum in other orders and use their own exp/log/tanh
(runtime/pk_math.c), so the results match within a bound, not bit for bit.

Measured per tensor as ``max |c - t| / max |t|`` (the loss: relative to itself); after several
steps the trajectories separate by more than one step's rounding, so training runs are held to the
bounds of ``poet train --check`` on tiled plans (the loss curve, and the final parameters relative
to the model's largest parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.fx

from ..execute.tiled import TRAINED_LOSS_BOUND, TRAINED_PARAM_BOUND
from ..graph.torch_run import placeholder_values
from .layout import StepResults

__all__ = [
    "STEP_BOUND",
    "CheckReport",
    "Comparison",
    "ReferenceRun",
    "compare",
    "dropout_reference",
    "reference_run",
]

STEP_BOUND = 1e-4  # one step: loss, every gradient, updated parameter and buffer, relative (see above)


@dataclass(frozen=True)
class ReferenceRun:
    """What PyTorch computed: per step the loss and the gradients, then the final state."""

    losses: tuple[float, ...]
    grads: tuple[dict, ...]
    params: dict
    buffers: dict
    grads64: dict  # the first step's gradients computed in float64 (how exact float32 can be)


def _double(x):
    """float32 values (tensors, dtype arguments, inside lists) as float64."""
    if isinstance(x, torch.Tensor):
        return x.double() if x.dtype == torch.float32 else x
    if x is torch.float32:
        return torch.float64
    if isinstance(x, (list, tuple)):
        return type(x)(_double(v) for v in x)
    if isinstance(x, dict):
        return {k: _double(v) for k, v in x.items()}
    return x


def _traced_step(program, params: dict, buffers: dict, batch, dropout=None, double: bool = False) -> dict:
    """One run of the joint graph: the value of every binding, by (role, name).  ``double``: every
    float32 value and dtype as float64 (the exact answer float32 arithmetic approximates)."""
    vals = placeholder_values(program.placeholders, params, buffers, batch)
    if double:
        vals = [_double(v) for v in vals]
    want = {b.fx_node.name: (b.role, b.name) for b in program.bindings}
    got: dict = {}

    class Step(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op == "call_function" and (double or (dropout is not None and _is_dropout(n))):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                if double:
                    args, kwargs = _double(args), _double(kwargs)
                out = dropout(n, args) if dropout is not None and _is_dropout(n) else n.target(*args, **kwargs)
            else:
                out = super().run_node(n)
            if n.name in want:
                got[want[n.name]] = out.detach().clone()
            return out

    with torch.enable_grad():
        Step(program.gm).run(*vals)
    return got


def _is_dropout(n) -> bool:
    return n.target is torch.ops.aten.native_dropout.default


def dropout_reference(rng_seed: int, compiled=None, reference=None):
    """``hook(step)(node, args)``: a reference run's dropout drawing the compiled step's masks
    (:mod:`poet.cbackend.rng`).  A mask is keyed by its node's name; when the reference is another
    program (the untiled step of a tiled one, where dropout stays whole), its dropout nodes are
    matched to the compiled program's in graph order."""
    from .rng import native_dropout, step_seed, unit_of

    names: dict[str, str] = {}
    if compiled is not None and reference is not None and compiled is not reference:
        ours = [n.name for n in reference.gm.graph.nodes if n.op == "call_function" and _is_dropout(n)]
        theirs = [n.name for n in compiled.gm.graph.nodes if n.op == "call_function" and _is_dropout(n)]
        if len(ours) != len(theirs):
            raise ValueError(f"the reference has {len(ours)} dropout ops, the compiled step {len(theirs)}")
        names = dict(zip(ours, theirs))

    def for_step(step: int):
        seed = step_seed(rng_seed, step)

        def draw(node, args):
            train = args[2] if len(args) > 2 else True
            return native_dropout(args[0], float(args[1]), train, seed, unit_of(names.get(node.name, node.name)))

        return draw

    return for_step


def reference_run(program, batches, *, lr: float, momentum: float = 0.0, dropout=None) -> ReferenceRun:
    """Train ``program``'s model for ``len(batches)`` steps in PyTorch from its current weights (the
    model is not changed): the traced step, buffer updates, then SGD as ``torch.optim.SGD``."""
    params = {k: p.detach().clone() for k, p in program.params.items()}
    buffers = {k: b.detach().clone() for k, b in program.buffers.items()}
    trainable = {k for k, p in program.params.items() if p.requires_grad}
    moms: dict = {}
    losses, grads = [], []
    rng = torch.get_rng_state()
    try:
        drop0 = None if dropout is None else dropout(0)
        out64 = _traced_step(program, params, buffers, batches[0], dropout=drop0, double=True) if batches else {}
        grads64 = {name: v.numpy().copy() for (role, name), v in out64.items() if role == "grad"}
        for s, batch in enumerate(batches):
            out = _traced_step(program, params, buffers, batch, dropout=None if dropout is None else dropout(s))
            losses.append(float(out[("loss", "")]))
            g = {name: v for (role, name), v in out.items() if role == "grad"}
            grads.append({k: v.numpy().copy() for k, v in g.items()})
            with torch.no_grad():
                for (role, name), v in out.items():
                    if role == "buffer":
                        buffers[name].copy_(v)
                for name, gv in g.items():
                    if name not in trainable:
                        continue
                    d = gv
                    if momentum:
                        d = moms[name] = gv.clone() if name not in moms else moms[name].mul_(momentum).add_(gv)
                    params[name].add_(d, alpha=-lr)
    finally:
        torch.set_rng_state(rng)
    return ReferenceRun(
        tuple(losses),
        tuple(grads),
        {k: v.numpy().copy() for k, v in params.items()},
        {k: v.numpy().copy() for k, v in buffers.items()},
        grads64,
    )


@dataclass(frozen=True)
class Comparison:
    """One compared quantity: the largest absolute difference and that relative to the reference's scale."""

    kind: str  # 'loss' | 'grad' | 'param' | 'buffer'
    name: str
    step: int | None  # 1-based training step, None for the final state
    max_abs: float
    relative: float
    bound: float
    # 'float32': PyTorch's result; 'float64': the exact one, where float32 itself is off (a cancelling
    # sum) and the bound is twice PyTorch's own float32 error
    against: str = "float32"

    @property
    def ok(self) -> bool:
        return self.relative <= self.bound


@dataclass(frozen=True)
class CheckReport:
    """Every comparison of a compiled run with PyTorch, and whether all are within their bounds."""

    rows: tuple[Comparison, ...]
    steps: int

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def worst(self, kind: str) -> Comparison | None:
        rows = [r for r in self.rows if r.kind == kind]
        return max(rows, key=lambda r: (not r.ok, r.relative / r.bound if r.bound else r.relative), default=None)

    def lines(self) -> list[str]:
        out = []
        for kind in ("loss", "grad", "param", "buffer"):
            w = self.worst(kind)
            if w is None:
                continue
            n = sum(1 for r in self.rows if r.kind == kind)
            bad = sum(1 for r in self.rows if r.kind == kind and not r.ok)
            where = f"{w.name} " if w.name else ""
            at = f"step {w.step}" if w.step is not None else "final"
            vs = " against float64 (a cancelling sum: twice PyTorch's own error)" if w.against == "float64" else ""
            out.append(
                f"{kind}: {n} compared, worst {where}({at}) {w.relative:.2e} of its scale{vs} "
                f"(max abs {w.max_abs:.2e}; bound {w.bound:.1e}): " + ("ok" if not bad else f"{bad} EXCEED the bound")
            )
        return out


def _rel(a, b) -> tuple[float, float]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0, 0.0
    diff = float(np.max(np.abs(a - b)))
    scale = float(np.max(np.abs(b)))
    return diff, (diff / scale if scale > 0 else diff)


def compare(res: StepResults, ref: ReferenceRun) -> CheckReport:
    """The compiled run's results against the reference's, each within its bound."""
    steps = len(ref.losses)
    if len(res.losses) != steps:
        raise ValueError(f"the compiled step ran {len(res.losses)} steps; the reference {steps}")
    rows = []
    loss_bound = STEP_BOUND if steps == 1 else TRAINED_LOSS_BOUND
    for s in range(steps):
        d, r = _rel(res.losses[s], ref.losses[s])
        rows.append(Comparison("loss", "", s + 1, d, r, loss_bound))
    for name, g in ref.grads[0].items():  # gradients: the first step (later ones follow other weights)
        d, r = _rel(res.grads[0][name], g)
        exact = ref.grads64.get(name)
        if r > STEP_BOUND and exact is not None:
            # a sum that cancels: float32 itself is far from exact there (docs/torch.md, "Tiling
            # numerics"); held to no more than twice PyTorch's own float32 error against float64
            own_abs, own = _rel(g, exact)
            mine_abs, mine = _rel(res.grads[0][name], exact)
            rows.append(Comparison("grad", name, 1, mine_abs, mine, max(2 * own, STEP_BOUND), against="float64"))
            continue
        rows.append(Comparison("grad", name, 1, d, r, STEP_BOUND))
    if steps == 1:
        for name, p in ref.params.items():
            d, r = _rel(res.params[name], p)
            rows.append(Comparison("param", name, None, d, r, STEP_BOUND))
    else:  # the model's largest |difference| over its largest |parameter| (tiled.parameter_difference)
        diff = max((_rel(res.params[k], p)[0] for k, p in ref.params.items()), default=0.0)
        scale = max((float(np.max(np.abs(p))) for p in ref.params.values() if np.size(p)), default=0.0)
        rows.append(Comparison("param", "(model)", None, diff, diff / scale if scale else diff, TRAINED_PARAM_BOUND))
    for name, b in ref.buffers.items():
        if np.issubdtype(np.asarray(b).dtype, np.integer):
            d = float(np.max(np.abs(np.asarray(res.buffers[name], np.int64) - np.asarray(b, np.int64)), initial=0))
            rows.append(Comparison("buffer", name, None, d, d, 0.0))
        else:
            d, r = _rel(res.buffers[name], b)
            rows.append(Comparison("buffer", name, None, d, r, STEP_BOUND if steps == 1 else TRAINED_PARAM_BOUND))
    return CheckReport(tuple(rows), steps)
