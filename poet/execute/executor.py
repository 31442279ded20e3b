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
from ..schedule.core import Op, Schedule
from .activation_store import ActivationStore, SeededReplay, unique_bytes
from .run_result import InstructionRecord, RunResult
from .store import PagingError, PagingStore
from .timing import RunQueueClock

__all__ = ["ExecutionError", "Executor", "InstructionRecord", "RunResult", "ScheduleRun", "run_schedule"]


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
        # graph outputs, staged here until the whole schedule has run (reused from run to run)
        self.staged_grads: dict[str, torch.Tensor] = {}
        self.staged_buffers: dict[str, torch.Tensor] = {}
        self.seeded_units = [u.id for u in program.units if u.seeded]  # in eager order

    # ------------------------------------------------------------------ run
    def run(self, schedule: Schedule, batch=None, *, optimizer=None, apply: bool = True, callback=None) -> RunResult:
        """Execute ``schedule`` on ``batch`` (inputs + targets, as at extraction; default: the example batch).

        With ``apply`` the buffer updates and gradients are written to the model
        after the schedule succeeded (``.grad`` accumulates like ``backward()``),
        then ``optimizer.step()`` runs if an optimizer is given.
        """
        self._check_runnable(schedule)
        state = ScheduleRun(self, schedule, self._fixed_values(batch))
        state.execute(callback)
        res = state.result()
        if apply:
            self.apply(res, optimizer=optimizer)
        return res

    def _check_runnable(self, schedule: Schedule) -> None:
        p, g = self.program, schedule.graph
        if len(g) != len(p.groups):
            raise ExecutionError(
                f"the schedule has {len(g)} nodes but the program has {len(p.groups)} "
                f"({p.granularity} granularity); plan and run the same program"
            )
        if not schedule.steps:
            raise ExecutionError(
                f"the schedule has no steps (status {schedule.status}): {schedule.report.message or 'nothing to run'}"
            )

    def stage(self, binding, val) -> None:
        """Copy a graph output (a gradient or a buffer update) into its staging buffer."""
        staged = self.staged_grads if binding.role == "grad" else self.staged_buffers
        dst = staged.get(binding.name)
        if dst is None or dst.shape != val.shape or dst.dtype != val.dtype:
            fmt = {"memory_format": torch.preserve_format} if binding.role == "grad" else {}
            dst = staged[binding.name] = torch.empty_like(val, **fmt)
        dst.copy_(val)

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
                    self.staged_grads.pop(name, None)
                else:
                    prm.grad.add_(gval)
        if optimizer is not None:
            optimizer.step()
        res.applied = True


class ScheduleRun:
    """The state of one :meth:`Executor.run`: the activation store, the generator states, the graph
    outputs still to stage, and what is measured per instruction.  ``execute`` runs the steps in
    order (one ``step`` each); ``result`` turns what was measured into a :class:`RunResult`."""

    def __init__(self, executor: Executor, schedule: Schedule, fixed_vals: list):
        p = self.program = executor.program
        self.executor = executor
        self.schedule = schedule
        self.graph = schedule.graph
        self.fixed_vals = fixed_vals
        self.consts = traced_constants(p.gm)
        staged = list(executor.staged_grads.values()) + list(executor.staged_buffers.values())
        fixed_tensors = [t for t in fixed_vals + list(self.consts.values()) + staged if isinstance(t, torch.Tensor)]
        self.measured_fixed = (
            unique_bytes(fixed_vals + list(self.consts.values()))
            + unique_bytes(list(executor.staged_grads.values()))
            + unique_bytes(list(executor.staged_buffers.values()))
        )
        self.store = ActivationStore({t.untyped_storage()._cdata for t in fixed_tensors})
        self.rng = SeededReplay(p, executor.seeded_units)
        self.pending = list(range(len(p.bindings)))  # graph outputs not staged yet
        self.staged_loss = None
        self.predicted_live = 0  # the validator's activation bytes
        self.intra_peak = 0  # live bytes, including a multi-op node's temporaries
        self.records: list[InstructionRecord] = []
        self.seconds = dict.fromkeys(Op, 0.0)
        self.cpu_seconds = dict(self.seconds)
        self.busy_seconds = dict(self.seconds)
        self.bytes_written = self.bytes_read = 0

    # -------------------------------------------------------------- the steps
    def execute(self, callback=None) -> None:
        """Every step in order; on failure the generator is restored and an ExecutionError (or the
        PagingError) raised naming the step."""
        steps = self.schedule.steps
        pstore = None
        runq = RunQueueClock()
        try:
            if any(s.op in (Op.PAGE_OUT, Op.PAGE_IN) for s in steps):
                ex = self.executor
                pstore = PagingStore(ex.paging_dir, swap_file=ex.swap_file, fsync=ex.fsync, drop_cache=ex.drop_cache)
            # grad mode as when the joint graph was traced: some kernels consult it (the CPU LSTM's
            # mkldnn_rnn_layer returns no workspace under no_grad, and its backward then fails).
            # Every input is detached, so no autograd graph is built.
            with torch.enable_grad():
                for idx, s in enumerate(steps):
                    rec = self.timed_step(idx, s.op, s.node, pstore, runq)
                    if callback is not None:
                        callback(idx, rec)
            if self.pending:
                missing = ", ".join(
                    self.program.bindings[i].role + " " + self.program.bindings[i].name for i in self.pending
                )
                raise ExecutionError(f"the schedule never produced: {missing}")
        except (PagingError, ExecutionError):
            self.rng.restore_initial()
            raise
        except Exception as e:
            self.rng.restore_initial()
            failed = steps[len(self.records)]
            raise ExecutionError(
                f"executing step {len(self.records)} ({failed.op} node {failed.node}) failed: {type(e).__name__}: {e}"
            ) from e
        finally:
            runq.close()
            self.store.clear()
            if pstore is not None:
                self.bytes_written, self.bytes_read = pstore.bytes_written, pstore.bytes_read
                pstore.close()
        self.rng.continue_as_eager()

    def timed_step(
        self, idx: int, op: Op, v: int, pstore: PagingStore | None, runq: RunQueueClock
    ) -> InstructionRecord:
        """One instruction, with its wall, CPU and busy seconds and the live bytes after it."""
        t0 = time.perf_counter()
        c0 = time.process_time()
        q0 = runq.waited()
        self.step(idx, op, v, pstore)
        dt = time.perf_counter() - t0
        dc = time.process_time() - c0
        db = max(0.0, dt - (runq.waited() - q0))
        self.seconds[op] += dt
        self.cpu_seconds[op] += dc
        self.busy_seconds[op] += db
        live = self.store.live_bytes
        self.intra_peak = max(self.intra_peak, live)
        rec = InstructionRecord(op, v, dt, live, self.predicted_live, dc, db)
        self.records.append(rec)
        return rec

    def step(self, idx: int, op: Op, v: int, pstore: PagingStore | None) -> None:
        ram = self.graph.ram
        if op == Op.COMPUTE:
            if v in self.store:
                raise ExecutionError(f"step {idx}: node {v} computed while in RAM")
            self.compute(v)
            self.predicted_live += ram[v]
        elif op == Op.PAGE_OUT:
            pstore.write(v, list(self.store.values[v].values()))
        elif op == Op.PAGE_IN:
            if v in self.store:
                raise ExecutionError(f"step {idx}: node {v} paged in while in RAM")
            self.store.add(v, dict(zip(self.program.group_outputs(v), pstore.read(v))))
            self.predicted_live += ram[v]
        elif op == Op.FREE:
            self.store.pop(v)
            self.predicted_live -= ram[v]
        else:
            raise ExecutionError(f"step {idx}: unknown op {op!r}")

    def compute(self, v: int) -> None:
        """Run node ``v``'s aten calls; keep its exported values; stage the outputs it completes."""
        p = self.program
        local: dict = {}  # this node's units' values, exported or temporary
        cache: dict = {}  # views re-derived for this node
        temp_peak = self.store.live_bytes
        grp = p.groups[v]
        for u in grp:
            n = p.unit_node[u]
            args = torch.fx.node.map_arg(n.args, lambda x: self.fetch(x, local, cache))
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda x: self.fetch(x, local, cache))
            if p.units[u].seeded:
                local[u] = self.rng.run(u, n.target, args, kwargs)
            else:
                local[u] = n.target(*args, **kwargs)
            if len(grp) > 1:
                temps = unique_bytes(list(local.values()), exclude=self.store.fixed_keys)
                temp_peak = max(temp_peak, self.store.live_bytes + temps)
        self.store.add(v, {u: local[u] for u in p.group_outputs(v)})
        self.intra_peak = max(self.intra_peak, temp_peak, self.store.live_bytes)
        self.stage_completed(local, cache)

    # ------------------------------------------------------------ the values
    def unit_value(self, u: int, local: dict):
        if u in local:
            return local[u]
        p = self.program
        vals = self.store.values.get(p.owner[u])
        if vals is None or u not in vals:
            raise ExecutionError(f"value of aten op {p.units[u].fx_name} (poet node {p.owner[u]}) is not in RAM")
        return vals[u]

    def fetch(self, a, local: dict, cache: dict):
        """The value of fx node ``a`` as an argument: fixed, a constant, a unit's value (or an item of
        it), or a view re-derived from its base."""
        kind = self.program.fx_info[a.name]
        tag = kind[0]
        if tag == "fixed":
            return self.fixed_vals[kind[1]]
        if tag == "const":
            return self.consts[kind[1]]
        if tag == "unit":
            return self.unit_value(kind[1], local)
        if tag == "item":
            return self.unit_value(kind[1], local)[kind[2]]
        if tag == "alias":
            if a.name in cache:
                return cache[a.name]
            args = torch.fx.node.map_arg(a.args, lambda x: self.fetch(x, local, cache))
            kwargs = torch.fx.node.map_arg(a.kwargs, lambda x: self.fetch(x, local, cache))
            v = args[0][args[1]] if a.target is operator.getitem else a.target(*args, **kwargs)
            cache[a.name] = v
            return v
        raise ExecutionError(f"{a.name} was removed as dead code but is read")

    def stage_completed(self, local: dict, cache: dict) -> None:
        """Stage every graph output (loss, gradient, buffer update) whose units are now all in RAM."""
        if not self.pending:
            return
        p = self.program
        avail = set(local)
        for vals in self.store.values.values():
            avail.update(vals)
        for bi in list(self.pending):
            b = p.bindings[bi]
            if all(u in avail for u in b.units):
                val = self.fetch(b.fx_node, local, cache)
                with torch.no_grad():
                    if b.role == "loss":
                        self.staged_loss = val.detach().clone()
                    else:
                        self.executor.stage(b, val)
                self.pending.remove(bi)

    # ------------------------------------------------------------ the result
    def predicted_seconds(self) -> dict:
        tot, g, steps = self.schedule.totals, self.graph, self.schedule.steps
        if tot is None:
            return {}
        return {
            "compute": tot.compute_time_s,
            "total": tot.runtime_s,
            "page_out": sum(g.nodes[s.node].pageout_time_s for s in steps if s.op == Op.PAGE_OUT),
            "page_in": sum(g.nodes[s.node].pagein_time_s for s in steps if s.op == Op.PAGE_IN),
        }

    def result(self) -> RunResult:
        tot, g, records = self.schedule.totals, self.graph, self.records
        seconds, cpu, busy = (
            {str(k): x for k, x in d.items()} for d in (self.seconds, self.cpu_seconds, self.busy_seconds)
        )
        for d in (seconds, cpu, busy):
            d["total"] = sum(d.values())
        ex = self.executor
        return RunResult(
            loss=self.staged_loss,
            grads=dict(ex.staged_grads),
            buffer_updates=dict(ex.staged_buffers),
            records=records,
            fixed_ram_bytes=g.fixed_ram_bytes,
            measured_fixed_bytes=self.measured_fixed,
            peak_live_bytes=max((r.live_bytes for r in records), default=0),
            intra_peak_live_bytes=self.intra_peak,
            predicted_peak_bytes=tot.peak_ram_bytes
            if tot
            else g.fixed_ram_bytes + max(r.predicted_bytes for r in records),
            budget_bytes=self.schedule.budget.ram_bytes,
            bytes_written=self.bytes_written,
            bytes_read=self.bytes_read,
            predicted_bytes_paged_out=tot.bytes_paged_out if tot else 0,
            predicted_bytes_paged_in=tot.bytes_paged_in if tot else 0,
            seconds=seconds,
            predicted_seconds=self.predicted_seconds(),
            rng_replays=self.rng.replays,
            cpu_seconds=cpu,
            busy_seconds=busy,
        )


def run_schedule(program, schedule: Schedule, batch=None, **kw) -> RunResult:
    """One-shot: ``Executor(program, ...).run(schedule, batch)``."""
    ex_kw = {k: kw.pop(k) for k in ("paging_dir", "swap_file", "fsync", "drop_cache") if k in kw}
    return Executor(program, **ex_kw).run(schedule, batch, **kw)
