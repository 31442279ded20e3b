"""PyTorch models in: the true aten-level training graph of a module with its loss.

``export_training_graph(model, example_inputs, loss_fn=...)`` traces one
training iteration (forward, loss, backward) with ``torch.export`` followed by
``aot_export_joint_with_descriptors`` (fallback: ``aot_export_module(...,
trace_joint=True)``) and returns a :class:`TorchProgram`: the poet
:class:`~poet.graph.core.Graph` of that iteration plus everything needed to
execute each poet node on real tensors (see :mod:`poet.execute`).

How the FX joint graph becomes poet nodes
-----------------------------------------
* Every aten call that is not an alias becomes one *unit*.  An op that returns a
  tuple (``native_batch_norm``, ``native_dropout``, ``convolution_backward``...)
  is one unit whose bytes are all its outputs; ``getitem`` selects from it.
* Views (``op.is_view``: view, t, permute, expand, detach, ...) and
  ``_unsafe_view`` are aliases: zero bytes, never paged, re-derived from their
  base whenever a consumer needs them.  The poet edge goes from the base unit
  to the consumer.
* Placeholders (parameters, buffers, the batch, the loss tangent) are fixed RAM.
* Units that feed no graph output are dropped (except seeded random ops, which
  must still draw from the generator to keep the RNG stream of eager mode).
* Node ids follow the FX order (a deterministic topological order).
* bytes = unique storages of the tensors in ``meta['val']``; FLOPs by aten op
  family (matmul/conv/attention from :mod:`torch.utils.flop_counter`, norms,
  softmax, reductions and elementwise from the element counts).

The default granularity is one poet node per unit.  :meth:`TorchProgram.coarsen`
groups units by module (``nn_module_stack``; backward ops via ``seq_nr``) into
a layer-level graph; a group runs its units in order and keeps only the
outputs needed outside it.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .core import BACKWARD, FORWARD, Graph, Node

try:  # the module must import without torch; the functions need it
    import torch
    import torch.fx
except Exception:  # pragma: no cover
    torch = None


class ExtractionError(RuntimeError):
    """The model could not be traced into a training graph."""


# --------------------------------------------------------------------------------------
# Small helpers on FX values


def _tensors(val) -> list:
    if torch is not None and isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        out = []
        for x in val:
            out.extend(_tensors(x))
        return out
    return []


def tensor_bytes(val) -> int:
    """Bytes of the unique storages behind a tensor or a tuple of tensors."""
    total = 0
    seen = set()
    for t in _tensors(val):
        try:
            st = t.untyped_storage()
            nb = int(st.nbytes())
            key = st._cdata
        except Exception:
            nb = t.numel() * t.element_size()
            key = id(t)
        if nb == 0:
            nb = t.numel() * t.element_size()
        if key in seen:
            continue
        seen.add(key)
        total += nb
    return total


def _numel(val) -> int:
    return sum(int(t.numel()) for t in _tensors(val))


def _is_alias_op(target) -> bool:
    if torch is None:
        return False
    if target is operator.getitem:
        return False
    if target in (torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default):
        return True
    return bool(getattr(target, "is_view", False))


def _is_seeded(target) -> bool:
    tags = getattr(target, "tags", ())
    return torch is not None and torch.Tag.nondeterministic_seeded in tags


def _op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    if torch is not None and isinstance(target, torch._ops.OpOverload):
        return str(target)  # e.g. aten.convolution.default
    return str(getattr(target, "__name__", None) or target)


# FLOP multipliers per output element for elementwise families (rest: 1 per element)
_ELEMENTWISE_COST = {
    "exp": 4,
    "log": 4,
    "tanh": 6,
    "sigmoid": 5,
    "gelu": 8,
    "gelu_backward": 10,
    "erf": 6,
    "pow": 4,
    "rsqrt": 2,
    "sqrt": 2,
    "div": 1,
    "sigmoid_backward": 3,
    "tanh_backward": 3,
    "silu": 5,
    "silu_backward": 8,
    "native_dropout": 2,
    "native_dropout_backward": 2,
}


def op_flops(target, args, kwargs, out_val) -> float:
    """FLOPs of one aten call from the shapes of its (meta) arguments and output."""
    if torch is None:
        return 0.0
    packet = getattr(target, "overloadpacket", None)
    try:
        from torch.utils.flop_counter import flop_registry

        fn = flop_registry.get(packet) or flop_registry.get(target)
    except Exception:  # pragma: no cover
        fn = None
    if fn is not None:
        try:
            return float(fn(*args, **kwargs, out_val=out_val))
        except Exception:
            pass
    base = getattr(packet, "__name__", _op_name(target)).split(".")[-1]
    in_numel = sum(_numel(a) for a in args if isinstance(a, (tuple, list)) or _tensors(a))
    out_numel = _numel(out_val)
    if "batch_norm" in base or "layer_norm" in base or "group_norm" in base:
        return float((10 if "backward" in base else 6) * max(in_numel, out_numel))
    if "softmax" in base:
        return float((4 if "backward" in base else 5) * max(in_numel, out_numel))
    if base in (
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "var",
        "std",
        "var_mean",
        "nll_loss_forward",
        "nll_loss_backward",
        "norm",
        "linalg_vector_norm",
        "embedding_dense_backward",
    ):
        return float(max(in_numel, out_numel))
    return float(_ELEMENTWISE_COST.get(base, 1) * max(out_numel, 1))


# --------------------------------------------------------------------------------------
# Program description


@dataclass
class Unit:
    """One non-alias aten call of the joint graph (the finest poet node)."""

    id: int
    fx_name: str
    op: str
    kind: str
    bytes: int
    flops: float
    seeded: bool
    preds: tuple[int, ...]
    module: str = ""
    seq_nr: int | None = None


@dataclass
class Binding:
    """A graph output the executor must collect: the loss, a gradient, a buffer update."""

    role: str  # 'loss' | 'grad' | 'buffer'
    name: str  # parameter / buffer name (model naming), '' for the loss
    fx_node: Any  # the FX node holding the value
    units: tuple[int, ...] = ()  # root units the value comes from (empty: a placeholder)


@dataclass
class TorchProgram:
    """The joint training graph of a module, executable node by node.

    ``graph`` is the poet :class:`Graph`; ``groups[v]`` lists the units poet
    node ``v`` runs (one unit per node at aten granularity).
    """

    name: str
    gm: Any  # torch.fx.GraphModule (joint forward+backward)
    units: list[Unit]
    groups: list[tuple[int, ...]]
    graph: Graph
    placeholders: list[tuple[str, str, Any]]  # (role, name, fx node): param/buffer/input/tangent
    bindings: list[Binding]
    model: Any
    params: dict[str, Any]  # name -> nn.Parameter of the user's model
    buffers: dict[str, Any]  # name -> buffer tensor of the user's model
    fixed_breakdown: dict[str, int]
    granularity: str = "aten"
    unit_node: dict[int, Any] = field(default_factory=dict)  # unit id -> FX node
    fx_info: dict[str, tuple] = field(
        default_factory=dict
    )  # fx name -> ('unit', u) | ('item', u, i) | ('alias', roots) | ('fixed', k)
    aten_units: int = 0
    example_batch: tuple = ()
    eager_difference: float | None = None  # see _eager_difference

    @property
    def fixed_ram_bytes(self) -> int:
        return int(sum(self.fixed_breakdown.values()))

    def costed(self, device="m4", fixed_ram_bytes: int | None = None):
        """The costed graph on ``device`` (fixed RAM: params, grads, buffers, batch, optimizer state)."""
        from ..hardware.cost import linear_cost_model
        from ..hardware.device import load_device

        fixed = self.fixed_ram_bytes if fixed_ram_bytes is None else int(fixed_ram_bytes)
        dev = load_device(device)
        if dev.families:  # a measured profile prices each aten op of a node by its family
            from ..hardware.profile_model import price_program

            return price_program(self, dev, fixed)
        return linear_cost_model(self.graph, dev, fixed)

    def group_outputs(self, v: int) -> tuple[int, ...]:
        """Units of node ``v`` whose values outlive the node's instruction."""
        return self._exports[v]

    def coarsen(self, by: str = "module", depth: int | None = None, max_nodes: int | None = None) -> TorchProgram:
        """A layer-level program: units grouped by owning module (see :func:`coarsen`)."""
        return coarsen(self, by=by, depth=depth, max_nodes=max_nodes)

    def summary(self) -> str:
        g = self.graph
        nf, nb = len(g.forward_ids()), len(g.backward_ids())
        lines = [
            f"{self.name}: {len(g)} poet nodes ({self.granularity}; {nf} forward, {nb} backward) "
            f"from {self.aten_units} aten ops, {len(g.edges)} edges",
            "fixed RAM " + ", ".join(f"{k} {v} B" for k, v in self.fixed_breakdown.items()),
        ]
        if self.eager_difference:
            lines.append(
                f"note: the traced step's loss and gradients differ from eager loss.backward() by up to "
                f"{self.eager_difference:.2g} (torch.export traces some modules, e.g. nn.GRU, into ops "
                f"that round differently); plans reproduce the traced step exactly"
            )
        return "\n".join(lines)

    # ---- internals filled by _finish
    _exports: list[tuple[int, ...]] = field(default_factory=list, repr=False)
    owner: list[int] = field(default_factory=list, repr=False)  # unit id -> poet node


class _WithLoss(torch.nn.Module if torch is not None else object):
    def __init__(self, model, loss_fn, n_inputs: int):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.n_inputs = n_inputs

    def forward(self, *batch):
        out = self.model(*batch[: self.n_inputs])
        if self.loss_fn is None:
            loss = out
        else:
            loss = self.loss_fn(out, *batch[self.n_inputs :])
        if hasattr(loss, "loss") and not isinstance(loss, torch.Tensor):
            loss = loss.loss
        return loss


def optimizer_state_bytes(optimizer, params: dict) -> int:
    """Bytes of optimizer state per step (SGD momentum: 1x params, Adam: 2x params)."""
    pb = sum(p.numel() * p.element_size() for p in params.values() if p.requires_grad)
    if optimizer is None:
        return 0
    if isinstance(optimizer, str):
        name, momentum = optimizer.lower(), None
    else:
        name = type(optimizer).__name__.lower()
        momentum = (optimizer.defaults or {}).get("momentum")
    if name in ("adam", "adamw"):
        return 2 * pb
    if name == "sgd":
        return pb if (momentum is None or momentum) else 0
    if name in ("sgd-momentum", "momentum"):
        return pb
    return 0


def export_training_graph(
    model,
    example_inputs: Sequence,
    loss_fn: Callable | None = None,
    targets: Sequence = (),
    *,
    name: str | None = None,
    optimizer=None,
    granularity: str = "aten",
) -> TorchProgram:
    """Trace ``loss_fn(model(*example_inputs), *targets)`` (or ``model(*inputs)`` if it is the loss).

    The model must be in the mode you train in (``model.train()``); its
    parameters, buffers and the example batch become fixed RAM, as do the
    gradients and the optimizer state (``optimizer``: an instance or 'sgd',
    'adam').  ``granularity='layer'`` returns the coarsened program.
    """
    if torch is None:  # pragma: no cover
        raise ExtractionError("PyTorch is not installed: pip install 'poet-edge[torch]'")
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    targets = tuple(targets) if isinstance(targets, (tuple, list)) else (targets,)
    batch = example_inputs + targets
    wrapper = _WithLoss(model, loss_fn, len(example_inputs))
    name = name or type(model).__name__

    gm, placeholders_desc, outputs_desc = _trace_joint(wrapper, batch)

    # A tied parameter (an embedding shared with the output layer) has one name per module that
    # holds it; the traced graph may use any of them.  Every alias maps to the first name, the
    # one named_parameters() reports, so the tensor is bound, counted and given its grad once.
    canonical: dict[str, str] = {}
    for named in (wrapper.named_parameters, wrapper.named_buffers):
        first: dict[int, str] = {}
        for k, t in named(remove_duplicate=False):
            canonical[k] = first.setdefault(id(t), k)

    # user-model names (strip the wrapper prefix)
    def uname(n: str) -> str:
        n = canonical.get(n, canonical.get("model." + n, n))
        return n[len("model.") :] if n.startswith("model.") else n

    params = {uname(k): p for k, p in wrapper.named_parameters()}
    buffers = {uname(k): b for k, b in wrapper.named_buffers()}
    traced = _run_traced(gm, placeholders_desc, params, buffers, batch, uname)
    prog = _build(
        gm,
        placeholders_desc,
        outputs_desc,
        name=name,
        model=model,
        params=params,
        buffers=buffers,
        batch=batch,
        uname=uname,
        optimizer=optimizer,
        measured=traced.sizes,
    )
    prog.eager_difference = _eager_difference(wrapper, batch, outputs_desc, traced.outputs, uname)
    if granularity in ("layer", "module"):
        prog = prog.coarsen()
    elif granularity != "aten":
        raise ExtractionError(f"granularity must be 'aten' or 'layer', got {granularity!r}")
    return prog


def _trace_joint(wrapper, batch):
    """(gm, [(role, name) per placeholder], [(role, name) per output]) of the joint graph."""
    try:
        exported = torch.export.export(wrapper, batch)
    except Exception as e:
        raise ExtractionError(f"torch.export could not trace the model with its loss: {e}") from e
    mod = exported.module()
    try:
        from torch._functorch._aot_autograd import descriptors as D
        from torch._functorch.aot_autograd import aot_export_joint_with_descriptors

        with contextlib.ExitStack() as stack:  # leaving the stack closes the fake mode
            joint = aot_export_joint_with_descriptors(stack, mod, batch, _record_nn_module_stack=True)
        gm = joint.graph_module
        ph, outs = [], []
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                d = n.meta.get("desc")
                if isinstance(d, D.ParamAOTInput):
                    ph.append(("param", d.target))
                elif isinstance(d, D.BufferAOTInput):
                    ph.append(("buffer", d.target))
                elif isinstance(d, D.PlainAOTInput):
                    ph.append(("input", str(d.idx)))
                elif isinstance(d, D.TangentAOTInput):
                    ph.append(("tangent", ""))
                else:
                    raise ExtractionError(f"unsupported joint-graph input {d!r}")
            elif n.op == "output":
                for d in n.meta.get("desc") or []:
                    if isinstance(d, D.InputMutationAOTOutput):
                        tgt = d.mutated_input
                        if not isinstance(tgt, D.BufferAOTInput):
                            raise ExtractionError(f"the training step mutates {tgt!r}; only buffers may be mutated")
                        outs.append(("buffer", tgt.target))
                    elif isinstance(d, D.PlainAOTOutput):
                        outs.append(("loss", "") if d.idx == 0 else ("extra", str(d.idx)))
                    elif isinstance(d, D.GradAOTOutput):
                        g = d.grad_of
                        outs.append(("grad", g.target) if isinstance(g, D.ParamAOTInput) else ("none", ""))
                    else:
                        outs.append(("none", ""))
        return gm, ph, outs
    except ExtractionError:
        raise
    except Exception as first:  # fallback: positional binding
        try:
            return _trace_joint_fallback(mod, batch)
        except Exception as e:
            raise ExtractionError(f"could not build the joint training graph: {first}; fallback: {e}") from e


def _trace_joint_fallback(mod, batch):
    from torch._functorch.aot_autograd import aot_export_module

    gm, sig = aot_export_module(mod, batch, trace_joint=True, output_loss_index=0)
    pnames = list(sig.parameters)
    bnames = list(sig.buffers)
    ph = [("param", n) for n in pnames] + [("buffer", n) for n in bnames]
    n_ph = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    ph += [("input", str(i)) for i in range(n_ph - len(ph))]
    outs = []
    for b in sig.buffers_to_mutate.values():
        outs.append(("buffer", b))
    outs.append(("loss", ""))
    for p in sig.backward_signature.gradients_to_parameters.values():
        outs.append(("grad", p))
    return gm, ph, outs


def _build(gm, ph_desc, out_desc, *, name, model, params, buffers, batch, uname, optimizer, measured) -> TorchProgram:
    fx_nodes = list(gm.graph.nodes)
    placeholders = []
    info: dict[str, tuple] = {}
    k = 0
    for n in fx_nodes:
        if n.op == "placeholder":
            role, nm = ph_desc[k]
            placeholders.append((role, uname(nm) if role in ("param", "buffer") else nm, n))
            info[n.name] = ("fixed", k)
            k += 1

    # classify call_function nodes
    cand: list = []  # FX nodes that are units (before dead-code removal)
    for n in fx_nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            src = info[n.args[0].name]
            if src[0] == "unit":
                info[n.name] = ("item", src[1], n.args[1])
            else:
                info[n.name] = ("alias", src[1] if src[0] == "alias" else ())
            continue
        if _is_alias_op(n.target):
            roots = set()
            for a in n.all_input_nodes:
                roots |= set(_roots(info, a))
            info[n.name] = ("alias", tuple(sorted(roots)))
            continue
        info[n.name] = ("unit", len(cand))
        cand.append(n)

    out_node = next(n for n in fx_nodes if n.op == "output")
    out_args = out_node.args[0]
    bindings: list[Binding] = []
    for (role, nm), a in zip(out_desc, out_args):
        if role in ("loss", "grad", "buffer") and a is not None:
            bindings.append(Binding(role, uname(nm) if nm else nm, a))

    # liveness: units reachable backwards from the bindings, plus seeded units
    cand_preds: list[set[int]] = []
    for n in cand:
        ps = set()
        for a in n.all_input_nodes:
            ps |= set(_roots(info, a))
        cand_preds.append(ps)
    live = set()
    stack = []
    for b in bindings:
        stack.extend(_roots(info, b.fx_node))
    stack.extend(i for i, n in enumerate(cand) if _is_seeded(n.target))
    while stack:
        u = stack.pop()
        if u in live:
            continue
        live.add(u)
        stack.extend(cand_preds[u])
    keep = [i for i in range(len(cand)) if i in live]
    renum = {old: new for new, old in enumerate(keep)}

    # rewrite info with the new numbering
    for key, val in list(info.items()):
        if val[0] == "unit":
            info[key] = ("unit", renum[val[1]]) if val[1] in renum else ("dead",)
        elif val[0] == "item":
            info[key] = ("item", renum[val[1]], val[2]) if val[1] in renum else ("dead",)
        elif val[0] == "alias":
            info[key] = ("alias", tuple(sorted(renum[r] for r in val[1] if r in renum)))

    # module of each unit: own nn_module_stack for forward ops; backward ops inherit by seq_nr
    seq_module: dict[int, str] = {}
    units: list[Unit] = []
    unit_node = {}
    for new, old in enumerate(keep):
        n = cand[old]
        tag = n.meta.get("partitioner_tag", "is_forward")
        kind = BACKWARD if tag == "is_backward" else FORWARD
        stackm = n.meta.get("nn_module_stack") or {}
        mod_path = ""
        if stackm:
            mod_path = list(stackm.values())[-1][0]
            mod_path = uname(mod_path) if mod_path != "model" else ""
        seq = n.meta.get("seq_nr")
        if kind == FORWARD and seq is not None and seq not in seq_module:
            seq_module[seq] = mod_path
        if kind == BACKWARD:
            mod_path = seq_module.get(seq, mod_path)
        val = n.meta.get("val")
        args_meta = torch.fx.node.map_arg(n.args, lambda a: a.meta.get("val"))
        kwargs_meta = torch.fx.node.map_arg(n.kwargs, lambda a: a.meta.get("val"))
        units.append(
            Unit(
                id=new,
                fx_name=n.name,
                op=_op_name(n.target),
                kind=kind,
                bytes=measured[n.name],
                flops=op_flops(n.target, args_meta, kwargs_meta, val),
                seeded=_is_seeded(n.target),
                preds=tuple(sorted(renum[p] for p in cand_preds[old])),
                module=mod_path,
                seq_nr=seq,
            )
        )
        unit_node[new] = n
    for b in bindings:
        b.units = tuple(_roots(info, b.fx_node))

    fixed = _fixed_breakdown(params, buffers, batch, bindings, optimizer)
    prog = TorchProgram(
        name=name,
        gm=gm,
        units=units,
        groups=[(u.id,) for u in units],
        graph=None,
        placeholders=placeholders,
        bindings=bindings,
        model=model,
        params=params,
        buffers=buffers,
        fixed_breakdown=fixed,
        unit_node=unit_node,
        fx_info=info,
        aten_units=len(units),
        example_batch=tuple(batch),
    )
    _finish(prog, "aten")
    return prog


def program_from_joint_graph(
    gm, program: TorchProgram, *, name: str | None = None, flops: dict[str, float] | None = None
) -> TorchProgram:
    """A program from a rewritten joint graph ``gm`` of ``program`` (e.g. a tiled one).

    ``gm`` keeps ``program``'s placeholders (same names, same order) and outputs the
    values of ``program.bindings`` in their order.  Bytes are measured by running it
    once on the example batch, as at extraction; ``flops`` (fx name -> FLOPs) replaces
    the estimate of ops the FLOP counter does not know (Python functions).
    """
    ph_desc = [(role, nm) for role, nm, _ in program.placeholders]
    out_desc = [(b.role, b.name) for b in program.bindings]
    batch = program.example_batch
    traced = _run_traced(gm, ph_desc, program.params, program.buffers, batch, lambda n: n)
    prog = _build(
        gm,
        ph_desc,
        out_desc,
        name=name or program.name,
        model=program.model,
        params=program.params,
        buffers=program.buffers,
        batch=batch,
        uname=lambda n: n,
        optimizer=None,
        measured=traced.sizes,
    )
    prog.fixed_breakdown = dict(program.fixed_breakdown)
    prog.eager_difference = program.eager_difference
    if flops:
        for u in prog.units:
            if u.fx_name in flops:
                u.flops = float(flops[u.fx_name])
    _finish(prog, "aten")
    return prog


def placeholder_values(placeholders, params, buffers, batch) -> list:
    """Real values for the joint graph's placeholders ``(role, name, fx node)``: the parameters
    and buffers (detached), the batch, and the loss tangent d loss / d loss = 1."""
    vals = []
    for role, name, n in placeholders:
        if role == "param":
            vals.append(params[name].detach())
        elif role == "buffer":
            vals.append(buffers[name].detach())
        elif role == "input":
            x = batch[int(name)]
            vals.append(x.detach() if isinstance(x, torch.Tensor) else x)
        else:
            ref = n.meta["val"]
            vals.append(torch.ones(tuple(ref.shape), dtype=ref.dtype))
    return vals


@dataclass
class _TracedRun:
    sizes: dict[str, int]  # fx name -> bytes of the op's real outputs
    outputs: tuple  # the joint graph's outputs (loss, grads, buffer updates)


def _run_traced(gm, ph_desc, params, buffers, batch, uname) -> _TracedRun:
    """One run of the traced step on the example batch, for the bytes of every op's real outputs.

    The traced (fake) outputs' sizes are not always the kernels': the CPU LSTM's
    ``mkldnn_rnn_layer`` workspace is 0 B when traced and 28 kB for a 16-unit layer when
    run, so a plan priced from them exceeds its budget.  The run is the one plain
    training step the plan replaces; the generator's state is restored afterwards.
    """
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = placeholder_values(
        [(role, uname(name) if role in ("param", "buffer") else name, n) for (role, name), n in zip(ph_desc, phs)],
        params,
        buffers,
        batch,
    )
    sizes: dict[str, int] = {}
    outs: list = []

    class Measure(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op == "output":  # the flat list the output descriptors name, before regrouping
                outs.extend(self.map_nodes_to_values(n.args[0], n))
            out = super().run_node(n)
            if n.op == "call_function":
                sizes[n.name] = tensor_bytes(out)
            return out

    rng = torch.get_rng_state()
    try:
        with torch.enable_grad():  # as traced; see the executor
            Measure(gm).run(*vals)
    except Exception as e:
        raise ExtractionError(f"the traced training step failed on the example batch: {type(e).__name__}: {e}") from e
    finally:
        torch.set_rng_state(rng)
    return _TracedRun(sizes, tuple(outs))


def _eager_difference(wrapper, batch, out_desc, outputs, uname) -> float | None:
    """Largest absolute difference between the traced step's loss and gradients and eager autograd's.

    torch.export decomposes ops whose eager kernels are fused (``nn.GRU`` on the CPU
    becomes matmuls and pointwise ops), and the decomposition rounds differently.
    The executor reproduces the traced step exactly, so this is what a comparison
    with ``loss.backward()`` will show.  Run on copies of the parameters and buffers
    (the model is untouched); ``None`` if eager mode could not be run that way.
    """
    try:
        ps = {k: p.detach().clone().requires_grad_(p.requires_grad) for k, p in wrapper.named_parameters()}
        bs = {k: b.detach().clone() for k, b in wrapper.named_buffers()}
        trained = [k for k, p in ps.items() if p.requires_grad]
        rng = torch.get_rng_state()
        try:
            with torch.enable_grad():
                loss = torch.func.functional_call(wrapper, {**ps, **bs}, tuple(batch))
                grads = torch.autograd.grad(loss, [ps[k] for k in trained], allow_unused=True)
        finally:
            torch.set_rng_state(rng)
    except Exception:
        return None
    eager = {"": loss.detach()}
    eager.update({uname(k): g for k, g in zip(trained, grads)})
    worst = 0.0
    for (role, name), val in zip(out_desc, outputs):
        key = "" if role == "loss" else uname(name) if role == "grad" else None
        ref = eager.get(key) if key is not None else None
        if ref is None or not isinstance(val, torch.Tensor) or ref.shape != val.shape:
            continue
        worst = max(worst, float((ref - val).abs().max()) if val.numel() else 0.0)
    return worst


def _roots(info, a) -> tuple[int, ...]:
    v = info.get(a.name)
    if v is None or v[0] in ("fixed", "dead"):
        return ()
    if v[0] in ("unit", "item"):
        return (v[1],)
    return tuple(v[1])


def _fixed_breakdown(params, buffers, batch, bindings, optimizer) -> dict[str, int]:
    pb = sum(p.numel() * p.element_size() for p in params.values())
    gb = sum(p.numel() * p.element_size() for p in params.values() if p.requires_grad)
    bb = sum(b.numel() * b.element_size() for b in buffers.values())
    mutated = {b.name for b in bindings if b.role == "buffer"}
    sb = sum(buffers[n].numel() * buffers[n].element_size() for n in mutated if n in buffers)
    ib = sum(t.numel() * t.element_size() for t in batch if isinstance(t, torch.Tensor))
    out = {
        "params": int(pb),
        "grads": int(gb),
        "buffers": int(bb),
        "buffer_updates": int(sb),
        "batch": int(ib),
        "tangent": 4,
    }
    ob = optimizer_state_bytes(optimizer, params)
    if ob:
        out["optimizer_state"] = int(ob)
    return out


def _finish(prog: TorchProgram, granularity: str) -> None:
    """Fill graph, owner map and group exports from ``prog.units`` and ``prog.groups``."""
    owner = [0] * len(prog.units)
    for v, grp in enumerate(prog.groups):
        for u in grp:
            owner[u] = v
    # a unit is exported if a unit of another group or a graph output reads it
    needed_outside = set()
    for u in prog.units:
        for p in u.preds:
            if owner[p] != owner[u.id]:
                needed_outside.add(p)
    for b in prog.bindings:
        needed_outside.update(b.units)
    exports = []
    nodes = []
    edges = set()
    for v, grp in enumerate(prog.groups):
        ex = tuple(u for u in grp if u in needed_outside or len(grp) == 1)
        exports.append(ex)
        us = [prog.units[u] for u in grp]
        kind = BACKWARD if any(x.kind == BACKWARD for x in us) else FORWARD
        if len(grp) == 1:
            nm = us[0].fx_name
            op = us[0].op
        else:
            labels = getattr(prog, "group_labels", None)
            label = (labels[v] if labels else us[0].module) or "<top>"
            nm = f"{label}:{'bwd' if kind == BACKWARD else 'fwd'}:{v}"
            op = "group(" + ",".join(sorted({x.op.split(".")[-2] if x.op.count(".") >= 2 else x.op for x in us})) + ")"
        nodes.append(
            Node(
                name=nm,
                kind=kind,
                output_bytes=int(sum(prog.units[u].bytes for u in ex)),
                flops=float(sum(x.flops for x in us)),
                op=op,
            )
        )
        for x in us:
            for p in x.preds:
                if owner[p] != v:
                    edges.add((owner[p], v))
    meta = {
        "source": "torch",
        "granularity": granularity,
        "aten_ops": prog.aten_units,
        "fixed_ram": dict(prog.fixed_breakdown),
    }
    prog.graph = Graph(name=prog.name, nodes=tuple(nodes), edges=tuple(sorted(edges)), meta=meta)
    prog.owner = owner
    prog._exports = exports
    prog.granularity = granularity


def coarsen(
    prog: TorchProgram, by: str = "module", depth: int | None = None, max_nodes: int | None = None
) -> TorchProgram:
    """Group consecutive units of the same module (and direction) into one poet node.

    A unit's module is its ``nn_module_stack`` path (backward ops: the path of
    the forward op with the same ``seq_nr``) truncated to ``depth`` components.
    Ops of the top-level module join the preceding group of the same
    direction.  Groups are runs of consecutive units in the topological order,
    so the grouped graph stays acyclic with node ids in topological order.

    Without ``depth`` the deepest depth giving at most ``max_nodes`` nodes is
    used (default ``max_nodes``: a third of the aten units, at least 8).
    """
    if by != "module":
        raise ValueError("only by='module' is supported")
    units = [u for grp in prog.groups for u in grp]
    maxdepth = max((len(prog.units[u].module.split(".")) for u in units if prog.units[u].module), default=1)

    def grouping(d: int | None) -> list[list[int]]:
        groups: list[list[int]] = []
        labels.clear()
        last = None
        for u in units:
            un = prog.units[u]
            m = un.module
            if d is not None and m:
                m = ".".join(m.split(".")[:d])
            if not m and groups and last is not None and last[1] == un.kind:
                groups[-1].append(u)  # top-level functional op: part of the preceding layer
                continue
            k = (m, un.kind)
            if groups and k == last:
                groups[-1].append(u)
            else:
                groups.append([u])
                labels.append(m)
                last = k
        return groups

    labels: list[str] = []

    if depth is not None:
        groups = grouping(depth)
    else:
        target = max_nodes if max_nodes is not None else max(8, len(units) // 3)
        for d in range(maxdepth, 0, -1):
            groups = grouping(d)
            if len(groups) <= target:
                break
    new = TorchProgram(
        name=prog.name,
        gm=prog.gm,
        units=prog.units,
        groups=[tuple(g) for g in groups],
        graph=None,
        placeholders=prog.placeholders,
        bindings=prog.bindings,
        model=prog.model,
        params=prog.params,
        buffers=prog.buffers,
        fixed_breakdown=dict(prog.fixed_breakdown),
        unit_node=prog.unit_node,
        fx_info=prog.fx_info,
        aten_units=prog.aten_units,
        example_batch=prog.example_batch,
        eager_difference=prog.eager_difference,
    )
    new.group_labels = list(labels)
    _finish(new, "layer")
    return new


__all__ = [
    "Binding",
    "ExtractionError",
    "TorchProgram",
    "Unit",
    "coarsen",
    "export_training_graph",
    "placeholder_values",
    "program_from_joint_graph",
    "op_flops",
    "optimizer_state_bytes",
    "tensor_bytes",
]
