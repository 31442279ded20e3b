"""Instructions a compiled zoo step executes on the Cortex-M4, measured per node and predicted per schedule.

A zoo program's kernels read row sources spread over several nodes' blocks, and a streamed one reads its
weights from ``weights.bin``: they cannot be probed one call at a time as a traced program's are
(:mod:`poet.cbackend.instructions`). So every node is measured in place, on the emulator, with its real
kernels and real inputs, under a **calibration schedule** of the same graph: each node in graph order is
computed, paged out, freed and paged in again (so it stays resident for the nodes that read it), then the
update runs. One run gives each node's compute (its kernels, their weight transfers included, and the runtime
around them), page-out, page-in and free, and the update. A node is freed once more after its last reader
(those steps are not measured), so the calibration's arena holds the live nodes, not the whole graph. A
prediction adds these up along any schedule of the graph, per kind; a recomputation costs what the first
computation cost (a zoo program has no graph-output copies). Not modelled: the CRC table built by a run's
first page-out (about 10,000 instructions, in whichever node pages first) and instructions that depend on the
values (ReLU, max pooling), which differ between the calibration's inputs and the run's by the arena's
contents only where a schedule recomputes from other values -- it never does: the step is deterministic.

The calibration's arena lives outside the budget (the external region, 16 MiB): a graph whose live activations
do not fit there cannot be measured this way (the error says so).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..schedule.core import HEURISTIC, Budget, Op, Schedule, Step
from ..schedule.validate import validate
from . import qemu_m4
from .arena import plan_arena
from .instructions import InstructionModel, NodeInstructions
from .layout import write_batches
from .lower_zoo import ZooProgram, lower_zoo
from .project import write_project

__all__ = ["calibration_schedule", "measure_zoo"]

PER_NODE = (Op.COMPUTE, Op.PAGE_OUT, Op.FREE, Op.PAGE_IN)


def calibration_schedule(schedule: Schedule) -> Schedule:
    """Every node of ``schedule``'s graph computed, paged out, freed and paged in, in graph order, and freed
    again once its last reader is computed (so the arena holds the live nodes, not the whole graph; a node
    no other reads stays), validated."""
    g = schedule.graph
    last = list(range(len(g.nodes)))
    for u, v in g.edges:
        last[u] = max(last[u], v)
    done: dict[int, list[int]] = {}
    for u, v in enumerate(last):
        if v != u:
            done.setdefault(v, []).append(u)
    steps = tuple(
        st
        for v in range(len(g.nodes))
        for st in (*(Step(op, v) for op in PER_NODE), *(Step(Op.FREE, u) for u in done.get(v, ())))
    )
    budget = Budget(ram_bytes=g.fixed_ram_bytes + sum(g.ram) + 1)
    s = Schedule(g, budget, steps, HEURISTIC, "calibration")
    return s.with_(totals=validate(g, steps, budget))


def measure_zoo(program: ZooProgram, schedule: Schedule, *, poison: bool, timeout_s: float = 600.0) -> InstructionModel:
    """Per-node instructions of ``program`` (the graph of ``schedule``) on the emulator, with the update of
    the schedule's weight placement (``poison``: frees fill blocks with NaN, as a ``--check`` run does)."""
    cal = calibration_schedule(schedule)
    kp = lower_zoo(program, cal)
    with tempfile.TemporaryDirectory(prefix="poet-zoo-calibration-") as tmp:
        project = write_project(
            kp, cal, plan_arena(cal), Path(tmp) / "project", params_in_ram=False, lr=0.05, poison=poison,
            batch=tuple(program.example_batch),
        )  # fmt: skip
        try:
            build = qemu_m4.build(project.path, qemu_m4.RAM_REGION_MAX, defines=(qemu_m4.ARENA_EXTERNAL,))
        except qemu_m4.TargetError as e:
            raise qemu_m4.TargetError(
                f"measuring the instructions of {program.name} needs all its activations in the emulated board's "
                f"external region and its code and batch in flash; it does not link: {e}"
            ) from e
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        if kp.stream is not None:
            kp.stream.write(run_dir, program.params)
        if not project.layout.batch_in_flash:
            write_batches(project.layout, [tuple(program.example_batch)], run_dir / "batch.bin")
        out = qemu_m4.run(build, run_dir, count=True, timeout_s=timeout_s)
    if not out.ok:
        raise qemu_m4.TargetError(f"the calibration step failed on the emulator: {out.problem()}\n{out.text[-2000:]}")
    marks = out.marks or ()
    if len(marks) != len(cal.steps) + 2:
        raise qemu_m4.TargetError(f"the calibration left {len(marks)} instruction marks, expected {len(cal.steps) + 2}")
    d = [b - a for a, b in zip(marks, marks[1:])]  # per calibration step, then the update
    at = {st.node: j for j, st in reversed(list(enumerate(cal.steps))) if st.op == Op.COMPUTE}  # its 4 steps start
    nodes = tuple(
        NodeInstructions(
            kernels=d[at[v]], first=0, again=0, page_out=d[at[v] + 1], page_in=d[at[v] + 3],
            free=d[at[v] + 2], free_poisoned=d[at[v] + 2],
        )
        for v in range(len(schedule.graph.nodes))
    )  # fmt: skip
    return InstructionModel(
        program=program.name,
        node_names=tuple(n.name for n in schedule.graph.nodes),
        nodes=nodes,
        momentum=0.0,
        update_in_ram=d[-1],
        update_in_ram_later=d[-1],
        update_last_extra=0,
        update_in_flash=d[-1],
        first_page_extra=0,
        kernel_counts={},
    )
