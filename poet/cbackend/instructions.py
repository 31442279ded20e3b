"""Instructions a compiled step executes on the Cortex-M4: measured per node, predicted per schedule,
compared with a run.

:func:`measure_program` measures, on the emulator, what every node of a traced program costs:

* **kernels**: each kernel call of the program, at its shapes and on the values the example
  batch gives it, between two instruction marks (:mod:`poet.cbackend.probe`);
* **the runtime around them**: the program compiled with empty kernels under a calibration
  schedule that, for each node in turn, computes it, pages it out, frees it, pages it in, frees it
  and computes it again, so one run measures every node's compute overhead (argument set-up,
  dispatch, and the graph-output copies made the first time), page-out, page-in and free (with and
  without the poisoning a ``--check`` run adds), and the update, for parameters in RAM and in flash.
  The arena of that build lives outside the budget (the external region), so any program whose
  parameters fit the board runs it.

A node's compute is then its kernels plus the runtime's part.  :meth:`InstructionModel.predict`
adds these up along any schedule of the program, per kind (compute, page_out, page_in, free,
update); :func:`measured_per_kind` reads the same sums off a run's marks, and
:class:`InstructionComparison` puts them side by side.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..fileio import atomic_write_text
from ..hardware.cost import costed_program
from ..schedule.core import HEURISTIC, Budget, Op, Schedule, Step
from ..schedule.validate import validate
from . import hostlib, probe, qemu_m4
from .arena import plan_arena
from .ir import KernelProgram
from .layout import write_batches
from .lower import lower_program
from .project import write_project
from .traced_calls import TracedCall, traced_calls

__all__ = [
    "KINDS",
    "InstructionComparison",
    "InstructionModel",
    "NodeInstructions",
    "calibration_steps",
    "measure_program",
    "measured_per_kind",
]

KINDS = ("compute", "page_out", "page_in", "free", "update")
CALIBRATION = (Op.COMPUTE, Op.PAGE_OUT, Op.FREE, Op.PAGE_IN, Op.FREE, Op.COMPUTE)  # per node, in graph order
WARM_UP = CALIBRATION[:5]  # node 0 once before: the first page of a run also builds the CRC table
PROBE_CHUNK = probe.DATA_MAX * 3 // 4  # data of the calls probed by one firmware


@dataclass(frozen=True)
class NodeInstructions:
    """What one node costs, in instructions."""

    kernels: int  # its kernel calls alone
    first: int  # the runtime around them at the node's first computation (with the graph-output copies)
    again: int  # ... at a recomputation
    page_out: int
    page_in: int
    free: int
    free_poisoned: int  # a free that fills the block with NaN (check runs)

    @property
    def compute(self) -> int:
        """A first computation, kernels included (what a plan prices every computation at)."""
        return self.kernels + self.first


@dataclass(frozen=True)
class InstructionModel:
    """Per-node instruction costs of one program (as measured by :func:`measure_program`)."""

    program: str
    node_names: tuple[str, ...]
    nodes: tuple[NodeInstructions, ...]
    momentum: float  # of the SGD update measured (momentum changes its instructions)
    # "update": from the schedule's last instruction to the end of the update, so the step's loss and
    # gradients written to out.bin too
    update_in_ram: int  # parameters in RAM: the first iteration (not the last)
    update_in_ram_later: int  # ... a later one (with momentum the first only sets the buffer)
    update_last_extra: int  # what the run's last iteration adds (it ends the loop differently)
    update_in_flash: int  # parameters const: the updated values written to out.bin (the only iteration)
    first_page_extra: int  # the first page_out of a run also builds the CRC table
    kernel_counts: dict  # "fx name: call signature" -> instructions, for every kernel call

    def step_costs(self, steps: Sequence[Step], *, poison: bool = False, first_iteration: bool = False) -> list[int]:
        """Instructions of each schedule instruction, in order (``first_iteration``: the run's first,
        whose first page_out also builds the CRC table)."""
        seen: set[int] = set()
        out = []
        crc_built = not first_iteration
        for s in steps:
            nd = self.nodes[s.node]
            if s.op == Op.COMPUTE:
                out.append(nd.kernels + (nd.again if s.node in seen else nd.first))
                seen.add(s.node)
            elif s.op == Op.PAGE_OUT:
                out.append(nd.page_out + (0 if crc_built else self.first_page_extra))
                crc_built = True
            elif s.op == Op.PAGE_IN:
                out.append(nd.page_in)
            else:
                out.append(nd.free_poisoned if poison else nd.free)
        return out

    def predict(
        self,
        steps: Sequence[Step],
        *,
        params_in_ram: bool,
        poison: bool = False,
        first_iteration: bool = False,
        last_iteration: bool = False,
    ) -> dict[str, int]:
        """Instructions per kind of one iteration (the schedule's instructions, then the update)."""
        out = dict.fromkeys(KINDS, 0)
        for s, n in zip(steps, self.step_costs(steps, poison=poison, first_iteration=first_iteration)):
            out[s.op] += n
        if params_in_ram:
            out["update"] = self.update_in_ram if first_iteration else self.update_in_ram_later
            out["update"] += self.update_last_extra if last_iteration else 0
        else:
            out["update"] = self.update_in_flash
        return out


def calibration_steps(n: int) -> tuple[Step, ...]:
    """For each node in graph order: compute, page_out, free, page_in, free, compute again (node 0
    once more before, to warm up: see :data:`WARM_UP`).

    Every earlier node stays in RAM, so each computation finds its inputs there; one run of it
    measures every node in every role."""
    return tuple(Step(op, 0) for op in WARM_UP) + tuple(Step(op, v) for v in range(n) for op in CALIBRATION)


def _say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def probe_kernels(calls: Sequence[TracedCall], *, progress=None, timeout_s: float = 600.0) -> list[int]:
    """Instructions of each call, measured on the emulator in as few firmwares as the probe's data
    block allows.  Every call is measured on its own values, even when another has the same shapes:
    kernels branch on the data (a ReLU on the sign of each element), so two such calls differ."""
    chunks: list[list[int]] = [[]]
    size, seen = 0, set()
    for i, c in enumerate(calls):
        ts = [t for t in (*c.probe.inputs, *c.probe.outputs) if t is not None]
        new = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}
        nbytes = sum(n for k, n in new.items() if k not in seen)
        if chunks[-1] and size + nbytes > PROBE_CHUNK:
            chunks.append([])
            size, seen = sum(new.values()), set(new)
        else:
            size += nbytes
            seen |= set(new)
        chunks[-1].append(i)
    counts = [0] * len(calls)
    for k, chunk in enumerate(chunks):
        _say(progress, f"measuring {len(chunk)} kernel calls on the emulator ({k + 1}/{len(chunks)})")
        r = probe.run_on_qemu([calls[i].probe for i in chunk], timeout_s=timeout_s)
        for i, n in zip(chunk, r.instructions):
            counts[i] = n
    return counts


def _nop_kernels(project: Path, kernels: Sequence[str]) -> None:
    """Replace the project's kernels by empty ones (same names, every call returns PK_OK)."""
    for p in project.glob("kernels_*.c"):
        p.unlink()
    body = "".join(
        f"PK_KERNEL({k}) {{\n    (void)t;\n    (void)nt;\n    (void)s;\n    (void)ns;\n    return PK_OK;\n}}\n"
        for k in kernels
    )
    (project / "pk_nop_kernels.c").write_text(
        '/* empty kernels: the runtime measured alone */\n#include "pk.h"\n' + body
    )


def _calibration_run(
    program,
    kp: KernelProgram,
    schedule: Schedule,
    folder: Path,
    *,
    params_in_ram: bool,
    poison: bool,
    momentum: float,
    iterations: int,
    timeout_s: float,
) -> list[list[int]]:
    """Per iteration, the instructions of each calibration step and of the update (last), empty kernels."""
    project = write_project(
        kp,
        schedule,
        plan_arena(schedule),
        folder / "project",
        params_in_ram=params_in_ram,
        lr=0.05,
        momentum=momentum,
        poison=poison,
        force=True,
    )
    _nop_kernels(project.path, project.tables.kernels)
    try:
        build = qemu_m4.build(project.path, qemu_m4.RAM_REGION_MAX, defines=(qemu_m4.ARENA_EXTERNAL,))
    except qemu_m4.TargetError as e:
        where = "RAM" if params_in_ram else "flash"
        raise qemu_m4.TargetError(
            f"measuring the step runtime of {program.name} needs its parameters in the emulated board's "
            f"{where} (4 MiB) beside the gradients and the batch; it does not link: {e}"
        ) from e
    run_dir = folder / "run"
    run_dir.mkdir(exist_ok=True)
    write_batches(project.layout, [tuple(program.example_batch)] * iterations, run_dir / "batch.bin")
    out = qemu_m4.run(build, run_dir, count=True, timeout_s=timeout_s)
    if not out.ok:
        raise qemu_m4.TargetError(f"the calibration step failed on the emulator: {out.problem()}\n{out.text[-2000:]}")
    marks = out.marks or ()
    per = len(schedule.steps) + 2
    if len(marks) != per * iterations:
        raise qemu_m4.TargetError(f"the calibration left {len(marks)} instruction marks, expected {per * iterations}")
    return [[b - a for a, b in zip(m, m[1:])] for m in (marks[t * per : (t + 1) * per] for t in range(iterations))]


def _cache_key(program, kp: KernelProgram, momentum: float) -> str:
    """What the measurement depends on: the runtime and kernel sources, the build flags, the
    emulator's version, the lowered program (calls, shapes, data), the example batch's values and
    the update's momentum."""
    h = hashlib.sha256(repr(float(momentum)).encode())
    runtime = [p for p in sorted(hostlib.RUNTIME.iterdir()) if p.is_file()]
    h.update(hostlib.content_hash(runtime, (*qemu_m4.COMPILE_FLAGS, qemu_m4.qemu_version())).encode())
    h.update(repr((kp.name, kp.nodes, kp.outputs, kp.loss_dtype)).encode())
    for item in (*kp.params, *kp.buffers, *kp.batch, *kp.consts):
        h.update(repr((item.name, item.dtype, item.sizes, item.trainable)).encode() + (item.data or b""))
    for x in program.example_batch:
        h.update(x.detach().contiguous().numpy().tobytes() if hasattr(x, "numpy") else repr(x).encode())
    return h.hexdigest()[:24]


def _cached(key: str) -> InstructionModel | None:
    path = hostlib.cache_dir() / "instructions" / f"{key}.json"
    try:
        d = json.loads(path.read_text())
        d["nodes"] = tuple(NodeInstructions(**n) for n in d["nodes"])
        d["node_names"] = tuple(d["node_names"])
        return InstructionModel(**d)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent, or written by another version: measure again


def _store(key: str, model: InstructionModel) -> None:
    path = hostlib.cache_dir() / "instructions" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(dataclasses.asdict(model)))


def measure_program(
    program,
    *,
    momentum: float = 0.0,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 600.0,
    cache: bool = True,
) -> InstructionModel:
    """Every node's instructions on the emulated Cortex-M4 (module docstring), the update measured
    with SGD of ``momentum`` (as the run will use); kept in the build cache
    (``$POET_CACHE_DIR/cbackend/instructions``) and measured again only when the program, its data,
    the momentum or the runtime changed."""
    kp = lower_program(program)
    key = _cache_key(program, kp, momentum)
    hit = _cached(key) if cache else None
    if hit is not None:
        _say(progress, f"per-node instructions of {program.name} from the cache")
        return hit
    calls = traced_calls(program, kp)
    counts = probe_kernels(calls, progress=progress, timeout_s=timeout_s)
    kernels = [0] * len(kp.nodes)
    for c, n in zip(calls, counts):
        kernels[c.node] += n
    g = costed_program(program, "m4")
    steps = calibration_steps(len(g.nodes))
    budget = Budget(ram_bytes=g.fixed_ram_bytes + sum(g.ram) + 1)
    schedule = Schedule(g, budget, steps, HEURISTIC, "calibration")
    schedule = schedule.with_(totals=validate(g, steps, budget))
    with tempfile.TemporaryDirectory(prefix="poet-calibration-") as tmp:
        _say(progress, f"measuring the step runtime around the kernels: {len(steps)} calibration instructions")
        ram, ram_later, ram_last = _calibration_run(
            program, kp, schedule, Path(tmp) / "ram", params_in_ram=True, poison=False, momentum=momentum,
            iterations=3, timeout_s=timeout_s,
        )  # fmt: skip
        (flash,) = _calibration_run(
            program, kp, schedule, Path(tmp) / "flash", params_in_ram=False, poison=True, momentum=0.0,
            iterations=1, timeout_s=timeout_s,
        )  # fmt: skip
    k, w = len(CALIBRATION), len(WARM_UP)
    nodes = tuple(
        NodeInstructions(
            kernels=kernels[v],
            first=ram[0] if v == 0 else ram[w + k * v],
            again=ram[w + k * v + 5],
            page_out=ram[w + k * v + 1],
            page_in=ram[w + k * v + 3],
            free=ram[w + k * v + 2],
            free_poisoned=flash[w + k * v + 2],
        )
        for v in range(len(g.nodes))
    )
    model = InstructionModel(
        program=program.name,
        node_names=tuple(nd.name for nd in g.nodes),
        nodes=nodes,
        momentum=float(momentum),
        update_in_ram=ram[-1],
        update_in_ram_later=ram_later[-1],
        update_last_extra=ram_last[-1] - ram_later[-1],
        update_in_flash=flash[-1],
        first_page_extra=ram[1] - ram[w + 1],
        kernel_counts={f"{c.call.fx_name}: {c.signature}": n for c, n in zip(calls, counts)},
    )
    _store(key, model)
    return model


def measured_per_kind(steps: Sequence[Step], marks: Sequence[int]) -> list[dict[str, int]]:
    """Instructions per kind of each iteration of a run, from its marks (the step program marks the
    start of each iteration, the end of every schedule instruction, and the end of the update)."""
    per = len(steps) + 2
    if not marks or len(marks) % per:
        raise ValueError(f"{len(marks)} instruction marks do not split into iterations of {per} marks")
    out = []
    for t in range(len(marks) // per):
        m = marks[t * per : (t + 1) * per]
        kinds = dict.fromkeys(KINDS, 0)
        for s, a, b in zip(steps, m, m[1:]):
            kinds[s.op] += b - a
        kinds["update"] = m[-1] - m[-2]
        out.append(kinds)
    return out


@dataclass(frozen=True)
class InstructionComparison:
    """Predicted beside measured instructions per iteration and per kind."""

    counts: dict  # kind -> number of schedule instructions of that kind per iteration
    predicted: tuple  # per iteration: kind -> instructions
    measured: tuple  # per iteration: kind -> instructions

    @classmethod
    def of(
        cls, model: InstructionModel, steps: Sequence[Step], marks: Sequence[int], *, params_in_ram: bool, poison: bool
    ) -> InstructionComparison:
        counts = dict.fromkeys(KINDS, 0)
        for s in steps:
            counts[s.op] += 1
        counts["update"] = 1
        measured = tuple(measured_per_kind(steps, marks))
        n = len(measured)
        predicted = tuple(
            model.predict(
                steps, params_in_ram=params_in_ram, poison=poison, first_iteration=t == 0, last_iteration=t == n - 1
            )
            for t in range(n)
        )
        return cls(counts, predicted, measured)

    def mean_predicted(self, kind: str) -> float:
        return sum(p[kind] for p in self.predicted) / len(self.predicted)

    def mean_measured(self, kind: str) -> float:
        return sum(m[kind] for m in self.measured) / len(self.measured)

    @property
    def total_error(self) -> float:
        """(predicted - measured) / measured of the mean iteration."""
        p = sum(map(self.mean_predicted, KINDS))
        m = sum(map(self.mean_measured, KINDS))
        return (p - m) / m if m else 0.0

    def lines(self) -> list[str]:
        n = len(self.measured)
        head = "instructions per iteration on qemu-m4: predicted (per-node costs measured on the emulator) beside "
        head += "measured (this run" + (f", mean of {n} iterations)" if n > 1 else ")")
        rows = [head, f"  {'kind':<9}{'count':>7}{'predicted':>16}{'measured':>16}{'error':>9}"]
        for k in (*KINDS, "total"):
            if k == "total":
                c, p, m = (
                    sum(self.counts.values()),
                    sum(map(self.mean_predicted, KINDS)),
                    sum(map(self.mean_measured, KINDS)),
                )
            else:
                c, p, m = self.counts[k], self.mean_predicted(k), self.mean_measured(k)
            err = f"{(p - m) / m:+.2%}" if m else ("0" if p == 0 else "n/a")
            rows.append(f"  {k:<9}{c:>7,}{p:>16,.0f}{m:>16,.0f}{err:>9}")
        if n > 1:
            totals = [sum(it.values()) for it in self.measured]
            rows.append(f"  measured iterations range from {min(totals):,} to {max(totals):,} instructions")
        return rows
