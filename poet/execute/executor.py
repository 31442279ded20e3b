"""Run a poet schedule on real tensors, instruction by instruction, without autograd.

The executor holds an *activation store*: for each poet node currently in RAM,
the real values of its exported units.  Instructions act on it:

* ``compute v``  -- run the aten calls of node ``v`` on real tensors (inputs
  fetched from the store; views re-derived from their base); a recompute of a
  seeded op (dropout) restores the generator state of that op's first draw;
* ``page_out v`` -- write the node's tensors to storage (:class:`PagingStore`);
* ``page_in v``  -- read them back, checking size and CRC-32;
* ``free v``     -- drop them.

Graph outputs (loss, parameter gradients, buffer updates such as BatchNorm
running statistics) are copied into staging buffers the first time their
node is computed.  Only after the whole schedule has run are they applied to
the model (buffers copied, ``.grad`` set, optional optimizer step): a failing
schedule (e.g. a page that cannot be written) leaves the model untouched.

Measured after every instruction: live bytes of the activation store (unique
storages of the tensors it holds, excluding storages of fixed tensors), plus
the graph's ``fixed_ram_bytes`` for comparison with the budget; bytes written
and read; seconds per instruction kind.
"""

from __future__ import annotations

import operator
import time

import torch
import torch.fx

from ..graph.torch_export import placeholder_values, traced_constants
from ..schedule.core import Schedule
from .run_result import InstructionRecord, RunResult
from .store import PagingError, PagingStore
from .timing import RunQueueClock

__all__ = ["ExecutionError", "Executor", "InstructionRecord", "RunResult", "run_schedule"]


class ExecutionError(RuntimeError):
    """A schedule that could not be executed on the program's tensors."""


class Executor:
    """Executes schedules of one :class:`~poet.graph.torch_export.TorchProgram`.

    paging_dir: directory for page files (default: a temporary directory,
    removed afterwards); swap_file: use one swap file instead.
    """

    def __init__(self, program, *, paging_dir=None, swap_file=None, fsync: bool = False, drop_cache: bool = False):
        self.program = program
        self.paging_dir = paging_dir
        self.swap_file = swap_file
        self.fsync = fsync
        self.drop_cache = drop_cache
        p = program
        self._grads = {}
        self._bufs = {}
        self._seeded = [u.id for u in p.units if u.seeded]
        self._seeded_pos = {u: i for i, u in enumerate(self._seeded)}

    # ------------------------------------------------------------------ run
    def run(self, schedule: Schedule, batch=None, *, optimizer=None, apply: bool = True, callback=None) -> RunResult:
        """Execute ``schedule`` on ``batch`` (inputs + targets, as at extraction; default: the example batch).

        With ``apply`` the buffer updates and gradients are written to the model
        after the schedule succeeded (``.grad`` accumulates like ``backward()``),
        then ``optimizer.step()`` runs if an optimizer is given.
        """
        p = self.program
        g = schedule.graph
        if len(g) != len(p.groups):
            raise ExecutionError(
                f"the schedule has {len(g)} nodes but the program has {len(p.groups)} "
                f"({p.granularity} granularity); plan and run the same program"
            )
        if not schedule.steps:
            raise ExecutionError(
                f"the schedule has no steps (status {schedule.status}): {schedule.report.message or 'nothing to run'}"
            )
        fixed_vals = self._fixed_values(batch)
        consts = traced_constants(p.gm)
        fixed_keys = {t.untyped_storage()._cdata for t in fixed_vals if isinstance(t, torch.Tensor)}
        fixed_keys.update(t.untyped_storage()._cdata for t in consts.values() if isinstance(t, torch.Tensor))
        for t in list(self._grads.values()) + list(self._bufs.values()):
            fixed_keys.add(t.untyped_storage()._cdata)
        measured_fixed = (
            _unique_bytes(fixed_vals + list(consts.values()))
            + _unique_bytes(list(self._grads.values()))
            + _unique_bytes(list(self._bufs.values()))
        )

        info = p.fx_info
        store: dict[int, dict[int, object]] = {}
        refcount: dict[int, list] = {}  # storage key -> [count, nbytes]
        live = [0]
        staged_loss = [None]
        pending = list(range(len(p.bindings)))
        rng0 = torch.get_rng_state()
        rng_before: dict[int, torch.Tensor] = {}
        rng_after: dict[int, torch.Tensor] = {}
        rng_replays = [0]
        ram = g.ram
        pred_live = 0
        records: list[InstructionRecord] = []
        seconds = {"compute": 0.0, "page_out": 0.0, "page_in": 0.0, "free": 0.0}
        cpu_seconds = dict(seconds)
        busy = dict(seconds)
        runq = RunQueueClock()
        intra_peak = [0]
        pstore = None

        def account(value, sign: int) -> None:
            for t in _flat_tensors(value):
                st = t.untyped_storage()
                k = st._cdata
                if k in fixed_keys:
                    continue
                if sign > 0:
                    ent = refcount.get(k)
                    if ent is None:
                        refcount[k] = [1, st.nbytes(), st]
                        live[0] += st.nbytes()
                    else:
                        ent[0] += 1
                else:
                    ent = refcount[k]
                    ent[0] -= 1
                    if ent[0] == 0:
                        live[0] -= ent[1]
                        del refcount[k]

        def unit_value(u: int, local: dict):
            if u in local:
                return local[u]
            vals = store.get(p.owner[u])
            if vals is None or u not in vals:
                raise ExecutionError(f"value of aten op {p.units[u].fx_name} (poet node {p.owner[u]}) is not in RAM")
            return vals[u]

        def fetch(a, local: dict, cache: dict):
            kind = info[a.name]
            tag = kind[0]
            if tag == "fixed":
                return fixed_vals[kind[1]]
            if tag == "const":
                return consts[kind[1]]
            if tag == "unit":
                return unit_value(kind[1], local)
            if tag == "item":
                return unit_value(kind[1], local)[kind[2]]
            if tag == "alias":
                if a.name in cache:
                    return cache[a.name]
                args = torch.fx.node.map_arg(a.args, lambda x: fetch(x, local, cache))
                kwargs = torch.fx.node.map_arg(a.kwargs, lambda x: fetch(x, local, cache))
                if a.target is operator.getitem:
                    v = args[0][args[1]]
                else:
                    v = a.target(*args, **kwargs)
                cache[a.name] = v
                return v
            raise ExecutionError(f"{a.name} was removed as dead code but is read")

        def ensure_rng(u: int) -> torch.Tensor:
            """Generator state before seeded unit ``u`` in eager order (simulating skipped draws)."""
            i = self._seeded_pos[u]
            if u in rng_before:
                return rng_before[u]
            if i == 0:
                rng_before[u] = rng0
                return rng0
            prev = self._seeded[i - 1]
            if prev not in rng_after:  # an earlier seeded op not yet run: draw its numbers on dummies
                st = ensure_rng(prev)
                n = p.unit_node[prev]
                args = torch.fx.node.map_arg(n.args, lambda x: _dummy(x.meta.get("val")))
                kwargs = torch.fx.node.map_arg(n.kwargs, lambda x: _dummy(x.meta.get("val")))
                torch.set_rng_state(st)
                n.target(*args, **kwargs)
                rng_after[prev] = torch.get_rng_state()
            rng_before[u] = rng_after[prev]
            return rng_before[u]

        def compute(v: int):
            local: dict = {}
            cache: dict = {}
            temp_peak = live[0]
            grp = p.groups[v]
            for u in grp:
                n = p.unit_node[u]
                args = torch.fx.node.map_arg(n.args, lambda x: fetch(x, local, cache))
                kwargs = torch.fx.node.map_arg(n.kwargs, lambda x: fetch(x, local, cache))
                if p.units[u].seeded:
                    torch.set_rng_state(ensure_rng(u))
                    if u in rng_after:
                        rng_replays[0] += 1
                    out = n.target(*args, **kwargs)
                    if u not in rng_after:
                        rng_after[u] = torch.get_rng_state()
                else:
                    out = n.target(*args, **kwargs)
                local[u] = out
                if len(grp) > 1:
                    temp_peak = max(temp_peak, live[0] + _unique_bytes(list(local.values()), exclude=fixed_keys))
            exports = p.group_outputs(v)
            vals = {u: local[u] for u in exports}
            store[v] = vals
            account(list(vals.values()), +1)
            intra_peak[0] = max(intra_peak[0], temp_peak, live[0])
            collect(local, cache)

        def collect(local: dict, cache: dict):
            if not pending:
                return
            avail = set(local)
            for vals in store.values():
                avail.update(vals)
            for bi in list(pending):
                b = p.bindings[bi]
                if all(u in avail for u in b.units):
                    val = fetch(b.fx_node, local, cache)
                    with torch.no_grad():
                        if b.role == "loss":
                            staged_loss[0] = val.detach().clone()
                        elif b.role == "grad":
                            dst = self._grads.get(b.name)
                            if dst is None or dst.shape != val.shape or dst.dtype != val.dtype:
                                dst = self._grads[b.name] = torch.empty_like(val, memory_format=torch.preserve_format)
                            dst.copy_(val)
                        else:
                            dst = self._bufs.get(b.name)
                            if dst is None or dst.shape != val.shape or dst.dtype != val.dtype:
                                dst = self._bufs[b.name] = torch.empty_like(val)
                            dst.copy_(val)
                    pending.remove(bi)

        need_store = any(s.op in ("page_out", "page_in") for s in schedule.steps)
        try:
            if need_store:
                pstore = PagingStore(
                    self.paging_dir, swap_file=self.swap_file, fsync=self.fsync, drop_cache=self.drop_cache
                )
            # grad mode as when the joint graph was traced: some kernels consult it (the CPU LSTM's
            # mkldnn_rnn_layer returns no workspace under no_grad, and its backward then fails).
            # Every input is detached, so no autograd graph is built.
            with torch.enable_grad():
                for idx, s in enumerate(schedule.steps):
                    op, v = s.op, s.node
                    t0 = time.perf_counter()
                    c0 = time.process_time()
                    q0 = runq.waited()
                    if op == "compute":
                        if v in store:
                            raise ExecutionError(f"step {idx}: node {v} computed while in RAM")
                        compute(v)
                        pred_live += ram[v]
                    elif op == "page_out":
                        pstore.write(v, list(store[v].values()))
                    elif op == "page_in":
                        if v in store:
                            raise ExecutionError(f"step {idx}: node {v} paged in while in RAM")
                        vals = pstore.read(v)
                        store[v] = dict(zip(p.group_outputs(v), vals))
                        account(vals, +1)
                        pred_live += ram[v]
                    elif op == "free":
                        vals = store.pop(v)
                        account(list(vals.values()), -1)
                        del vals
                        pred_live -= ram[v]
                    else:
                        raise ExecutionError(f"step {idx}: unknown op {op!r}")
                    dt = time.perf_counter() - t0
                    dc = time.process_time() - c0
                    db = max(0.0, dt - (runq.waited() - q0))
                    seconds[op] += dt
                    cpu_seconds[op] += dc
                    busy[op] += db
                    intra_peak[0] = max(intra_peak[0], live[0])
                    rec = InstructionRecord(op, v, dt, live[0], pred_live, dc, db)
                    records.append(rec)
                    if callback is not None:
                        callback(idx, rec)
            if pending:
                missing = ", ".join(p.bindings[i].role + " " + p.bindings[i].name for i in pending)
                raise ExecutionError(f"the schedule never produced: {missing}")
        except PagingError:
            torch.set_rng_state(rng0)
            raise
        except ExecutionError:
            torch.set_rng_state(rng0)
            raise
        except Exception as e:
            torch.set_rng_state(rng0)
            raise ExecutionError(
                f"executing step {len(records)} "
                f"({schedule.steps[len(records)].op} node {schedule.steps[len(records)].node}) "
                f"failed: {type(e).__name__}: {e}"
            ) from e
        finally:
            runq.close()
            store.clear()
            refcount.clear()
            if pstore is not None:
                bw, br = pstore.bytes_written, pstore.bytes_read
                pstore.close()
            else:
                bw = br = 0
        # the generator continues from where eager mode would be after the step
        if self._seeded:
            torch.set_rng_state(rng_after[self._seeded[-1]])

        tot = schedule.totals
        total = sum(seconds.values())
        seconds["total"] = total
        cpu_seconds["total"] = sum(cpu_seconds.values())
        busy["total"] = sum(busy.values())
        pred_secs = {}
        if tot is not None:
            pred_secs = {
                "compute": tot.compute_time_s,
                "total": tot.runtime_s,
                "page_out": sum(g.nodes[s.node].pageout_time_s for s in schedule.steps if s.op == "page_out"),
                "page_in": sum(g.nodes[s.node].pagein_time_s for s in schedule.steps if s.op == "page_in"),
            }
        res = RunResult(
            loss=staged_loss[0],
            grads=dict(self._grads),
            buffer_updates=dict(self._bufs),
            records=records,
            fixed_ram_bytes=g.fixed_ram_bytes,
            measured_fixed_bytes=measured_fixed,
            peak_live_bytes=max((r.live_bytes for r in records), default=0),
            intra_peak_live_bytes=intra_peak[0],
            predicted_peak_bytes=tot.peak_ram_bytes
            if tot
            else g.fixed_ram_bytes + max(r.predicted_bytes for r in records),
            budget_bytes=schedule.budget.ram_bytes,
            bytes_written=bw,
            bytes_read=br,
            predicted_bytes_paged_out=tot.bytes_paged_out if tot else 0,
            predicted_bytes_paged_in=tot.bytes_paged_in if tot else 0,
            seconds=seconds,
            predicted_seconds=pred_secs,
            rng_replays=rng_replays[0],
            cpu_seconds=cpu_seconds,
            busy_seconds=busy,
        )
        if apply:
            self.apply(res, optimizer=optimizer)
        return res

    # --------------------------------------------------------------- helpers
    def _fixed_values(self, batch):
        p = self.program
        if batch is None:
            batch = p.example_batch
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        for role, name, n in p.placeholders:
            if role == "input":
                i = int(name)
                if i >= len(batch):
                    raise ExecutionError(f"the batch has {len(batch)} tensors; the program was traced with more")
                x = batch[i]
                ref = n.meta.get("val")
                if (
                    isinstance(x, torch.Tensor)
                    and ref is not None
                    and (tuple(x.shape) != tuple(ref.shape) or x.dtype != ref.dtype)
                ):
                    raise ExecutionError(
                        f"batch tensor {i} has shape {tuple(x.shape)} {x.dtype}; the plan was "
                        f"made for {tuple(ref.shape)} {ref.dtype} (plan again for a new shape)"
                    )
        return placeholder_values(p.placeholders, p.params, p.buffers, batch)

    def apply(self, res: RunResult, optimizer=None) -> None:
        """Write buffer updates and gradients into the model, then step the optimizer."""
        p = self.program
        with torch.no_grad():
            for name, val in res.buffer_updates.items():
                p.buffers[name].copy_(val)
            for name, gval in res.grads.items():
                prm = p.params[name]
                if prm.grad is None:
                    prm.grad = gval  # hand the staging buffer over, as backward() would
                    self._grads.pop(name, None)
                else:
                    prm.grad.add_(gval)
        if optimizer is not None:
            optimizer.step()
        res.applied = True


def _flat_tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    out = []
    if isinstance(value, (tuple, list)):
        for x in value:
            out.extend(_flat_tensors(x))
    return out


def _unique_bytes(values, exclude=()) -> int:
    seen = set()
    total = 0
    for t in _flat_tensors(list(values)):
        st = t.untyped_storage()
        k = st._cdata
        if k in seen or k in exclude:
            continue
        seen.add(k)
        total += st.nbytes()
    return total


def _dummy(val):
    if isinstance(val, torch.Tensor):
        return torch.zeros(tuple(val.shape), dtype=val.dtype)
    if isinstance(val, (tuple, list)):
        return type(val)(_dummy(x) for x in val)
    return val


def run_schedule(program, schedule: Schedule, batch=None, **kw) -> RunResult:
    """One-shot: ``Executor(program, ...).run(schedule, batch)``."""
    ex_kw = {k: kw.pop(k) for k in ("paging_dir", "swap_file", "fsync", "drop_cache") if k in kw}
    return Executor(program, **ex_kw).run(schedule, batch, **kw)
