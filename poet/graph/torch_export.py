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

from .core import BACKWARD, FORWARD
from .torch_ops import ExtractionError, is_alias_op, is_seeded_op, op_flops, op_name, tensor_bytes
from .torch_program import Binding, TorchProgram, Unit, coarsen, finish_program
from .torch_run import eager_difference, placeholder_values, run_traced

try:  # the module must import without torch; the functions need it
    import torch
    import torch.fx
except Exception:  # pragma: no cover
    torch = None


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
    traced = run_traced(gm, placeholders_desc, params, buffers, batch, uname)
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
    prog.eager_difference = eager_difference(wrapper, batch, outputs_desc, traced.outputs, uname)
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
        elif n.op == "get_attr":  # a constant the trace captured (a mask, an index table): fixed RAM
            info[n.name] = ("const", n.target)

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
        if is_alias_op(n.target):
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
    stack.extend(i for i, n in enumerate(cand) if is_seeded_op(n.target))
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
                op=op_name(n.target),
                kind=kind,
                bytes=measured[n.name],
                flops=op_flops(n.target, args_meta, kwargs_meta, val),
                seeded=is_seeded_op(n.target),
                preds=tuple(sorted(renum[p] for p in cand_preds[old])),
                module=mod_path,
                seq_nr=seq,
            )
        )
        unit_node[new] = n
    for b in bindings:
        b.units = tuple(_roots(info, b.fx_node))

    fixed = _fixed_breakdown(params, buffers, batch, bindings, optimizer)
    consts = traced_constants(gm)
    if any(t.numel() for t in consts.values()):
        fixed["constants"] = sum(t.numel() * t.element_size() for t in consts.values())
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
    finish_program(prog, "aten")
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
    traced = run_traced(gm, ph_desc, program.params, program.buffers, batch, lambda n: n)
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
    finish_program(prog, "aten")
    return prog


def _roots(info, a) -> tuple[int, ...]:
    v = info.get(a.name)
    if v is None or v[0] in ("fixed", "const", "dead"):
        return ()
    if v[0] in ("unit", "item"):
        return (v[1],)
    return tuple(v[1])


def traced_constants(gm) -> dict:
    """The tensors a traced graph reads through ``get_attr`` (constants the trace captured), by target."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            obj = gm
            for part in n.target.split("."):
                obj = getattr(obj, part)
            out[n.target] = obj
    return out


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
    "traced_constants",
]
