"""``poet profile --target qemu-m4``: a device profile in instructions, measured on the emulator.

Each program given (a model's traced step, and its tiled step when a budget asks for one) is
measured by :func:`poet.cbackend.instructions.measure_program`: every kernel call at its
shapes, and the step runtime around the kernels.  The profile file (device TOML, docs/mcu.md) holds
per node the instructions of a computation, a recomputation, a page-out, a page-in and a free, with
the declared clock and energies that turn them into seconds and joules; every command that takes
``--device`` plans with it (:mod:`poet.hardware.instructions`).  For graphs it did not measure, the
same measurements are fitted as operator families (``latency + FLOPs / rate``, in seconds at the
declared clock) and a storage line (``latency + bytes / rate``), so any graph can still be priced.
The file says which numbers are measured and which declared.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..hardware.device import load_device
from ..hardware.profile import OpSample, fit_families, toml_table, toml_value
from . import qemu_m4
from .instructions import InstructionModel, measure_program

__all__ = ["Declared", "default_declared", "profile_programs", "profile_toml"]

M4_CLOCK_HZ = 64e6  # the built-in m4 profile's part: nRF52840, Cortex-M4F @ 64 MHz


@dataclass(frozen=True)
class Declared:
    """What the emulator cannot measure, declared by the user (or taken from the built-in m4 profile)."""

    clock_hz: float
    joules_per_instruction: float
    joules_per_byte_paged: float
    source: str


def default_declared(clock_hz=None, joules_per_instruction=None, joules_per_byte_paged=None) -> Declared:
    """Each value as given, else from the built-in ``m4`` profile: its 64 MHz clock at one instruction
    per cycle, its compute power over that rate, its storage power over its write throughput."""
    m4 = load_device("m4")
    values = {
        "clock_hz": clock_hz,
        "joules_per_instruction": joules_per_instruction,
        "joules_per_byte_paged": joules_per_byte_paged,
    }
    for name, v in values.items():
        if v is not None and not 0 < v < float("inf"):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {v}")
    given = [name for name, v in values.items() if v is not None]
    hz = clock_hz if clock_hz is not None else M4_CLOCK_HZ
    src = ("given: " + ", ".join(given) + "; " if given else "") + (
        "defaults from the built-in m4 profile (nRF52840 @ 64 MHz, one instruction per cycle; "
        "its compute power / clock; its storage power / write throughput)"
    )
    return Declared(
        clock_hz=float(hz),
        joules_per_instruction=float(
            joules_per_instruction if joules_per_instruction is not None else m4.compute_power_w / M4_CLOCK_HZ
        ),
        joules_per_byte_paged=float(
            joules_per_byte_paged if joules_per_byte_paged is not None else m4.storage_power_w / m4.write_bytes_per_s
        ),
        source=src,
    )


def _line_fit(xs, ys) -> tuple[float, float]:
    """``y = a + b x`` by least squares, a >= 0, b > 0 (through the origin when the intercept would be < 0)."""
    import numpy as np

    x, y = np.asarray(xs, float), np.asarray(ys, float)
    if len(set(xs)) >= 2:
        b, a = np.polyfit(x, y, 1)
        if a >= 0 and b > 0:
            return float(a), float(b)
    return 0.0, float(max(y.sum() / max(x.sum(), 1.0), 1e-12))


def _samples(program, model: InstructionModel, hz: float) -> list[OpSample]:
    return [
        OpSample(program.units[grp[0]].op, program.units[grp[0]].flops, nd.compute / hz)
        for grp, nd in zip(program.groups, model.nodes)
    ]


def profile_toml(measured: Sequence[tuple[object, InstructionModel]], declared: Declared, *, command: str = "") -> str:
    """The device TOML of the measured programs (``(program, model)`` pairs)."""
    hz = declared.clock_hz
    samples = [s for prog, m in measured for s in _samples(prog, m, hz)]
    fams, rate = fit_families(samples)
    sizes = [n.output_bytes for prog, _ in measured for n in prog.graph.nodes]
    rd = _line_fit(sizes, [nd.page_in for _, m in measured for nd in m.nodes])
    wr = _line_fit(sizes, [nd.page_out for _, m in measured for nd in m.nodes])
    per_byte = (rd[1] + wr[1]) / 2
    storage_w = hz * (declared.joules_per_instruction + declared.joules_per_byte_paged / per_byte)
    names = ", ".join(m.program for _, m in measured)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"# poet profile --target qemu-m4: instructions of {names} measured on the emulated Cortex-M4F",
        f"# ({qemu_m4.qemu_version()}, mps2-an386, TCG plugin count), {when}.",
        "# Measured: [instructions] and its per-node tables.  Declared: clock_hz, joules_per_instruction,",
        "# joules_per_byte_paged.  Derived from both: [compute], its families, and [storage] (for graphs",
        "# whose nodes the tables do not have).",
        f"name = {toml_value('qemu-m4-' + '-'.join(m.program for _, m in measured))}",
        'part = "Cortex-M4F (QEMU mps2-an386): instructions measured, clock and energy declared"',
        f"ram_bytes = {4 << 20}",
    ]
    lines += toml_table(
        "compute",
        {
            "flops_per_s": rate,
            "energy_flops_per_s": rate,
            "power_w": declared.joules_per_instruction * hz,
            "source": "derived: the measured programs' FLOPs over their instructions at the declared clock; "
            "power = declared joules per instruction x clock",
        },
    )
    for f in fams:
        lines += toml_table(
            f"compute.families.{f.name}",
            {"latency_s": f.fit.latency_s, "flops_per_s": f.fit.bytes_per_s, "ops": f.ops},
        )
    lines += toml_table(
        "storage",
        {
            "read_latency_s": rd[0] / hz,
            "read_bytes_per_s": hz / rd[1],
            "write_latency_s": wr[0] / hz,
            "write_bytes_per_s": hz / wr[1],
            "power_w": storage_w,
            "source": f"derived: page-in {rd[0]:.0f} + {rd[1]:.2f} x bytes and page-out {wr[0]:.0f} + "
            f"{wr[1]:.2f} x bytes instructions (fit over the measured nodes) at the declared clock; power so "
            "that a paged byte costs its instructions' energy plus the declared energy per byte",
        },
    )
    lines += toml_table(
        "instructions",
        {
            "clock_hz": hz,
            "joules_per_instruction": declared.joules_per_instruction,
            "joules_per_byte_paged": declared.joules_per_byte_paged,
            "declared": declared.source,
            "measured": "instructions executed (TCG plugin): each kernel call of each program at its shapes "
            "on its example batch's values, and the step runtime around the kernels (a calibration schedule that "
            "computes, pages out, frees, pages in, frees and recomputes every node, with empty kernels)",
            "command": command,
        },
    )
    for _, m in measured:
        lines += toml_table(
            f"instructions.programs.{toml_value(m.program)}",
            {
                "update_momentum": m.momentum,
                "update_in_ram": m.update_in_ram,
                "update_in_ram_later": m.update_in_ram_later,
                "update_last_extra": m.update_last_extra,
                "update_in_flash": m.update_in_flash,
                "first_page_extra": m.first_page_extra,
                "kernel_calls": len(m.kernel_counts),
            },
        )
        lines.append(f"\n[instructions.programs.{toml_value(m.program)}.nodes]")
        for name, nd in zip(m.node_names, m.nodes):
            vals = {
                "compute": nd.compute,
                "recompute": nd.kernels + nd.again,
                "page_out": nd.page_out,
                "page_in": nd.page_in,
                "free": nd.free,
                "kernels": nd.kernels,
            }
            lines.append(f"{toml_value(name)} = {{" + ", ".join(f"{k} = {v}" for k, v in vals.items()) + "}")
        lines.append(f"\n[instructions.programs.{toml_value(m.program)}.kernels]")
        lines += [f"{toml_value(sig)} = {n}" for sig, n in m.kernel_counts.items()]
    return "\n".join(lines) + "\n"


def profile_programs(
    programs: Sequence[tuple[str, object]],
    *,
    momentum: float = 0.9,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 600.0,
) -> list[tuple[object, InstructionModel]]:
    """Each ``(label, program)`` measured on the emulator; the label names its table in the profile.
    The update is measured with SGD of ``momentum`` (``poet train``'s optimizer: 0.9)."""
    labels = [label for label, _ in programs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"two programs are both labelled {sorted(x for x in labels if labels.count(x) > 1)[0]!r}")
    out = []
    for label, p in programs:
        if progress:
            progress(f"measuring {label}: {len(p.graph.nodes)} nodes")
        m = measure_program(p, momentum=momentum, progress=progress, timeout_s=timeout_s)
        out.append((p, dataclasses.replace(m, program=label)))
    return out
