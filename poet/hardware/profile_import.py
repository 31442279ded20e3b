"""Measurements from a board we cannot run on (a CSV) -> a device profile or a costed graph.

One CSV, one row per measurement (docs/devices.md, "Bring your own measurements"):

    name,kind,op,flops,bytes,time_s,energy_j,inputs

* ``kind`` ``forward`` / ``backward``: one op or layer of the training step, in execution order.
  ``bytes`` is its output's size, ``time_s`` its compute time, ``inputs`` the ``;``-separated
  names of earlier rows it reads (for the costed graph), ``op`` and ``flops`` what it computes
  (for the profile's operator families).
* ``kind`` ``read`` / ``write``: one storage transfer of ``bytes`` taking ``time_s``.

Required columns: name, kind, bytes, time_s; op, flops, energy_j and inputs may be left out or
empty.  Numbers must be finite and not negative; every error names the row (file line) and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from ..graph.core import BACKWARD, FORWARD, CostedGraph, CostedNode
from .device import DeviceError, load_device
from .profile import PROFILE_FORMAT, OpSample, choose_power, family_table, fit_families, toml_table, toml_value
from .profile_storage import LinearFit, fit_latency_bandwidth

REQUIRED = ("name", "kind", "bytes", "time_s")
OPTIONAL = ("op", "flops", "energy_j", "inputs")
OP_KINDS = (FORWARD, BACKWARD)
STORAGE_KINDS = ("read", "write")


class MeasurementError(ValueError):
    """A measurements CSV that cannot be used; the message names the row and column."""


@dataclass(frozen=True)
class Row:
    line: int
    name: str
    kind: str
    op: str
    flops: float
    bytes: int
    time_s: float
    energy_j: float | None
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Measurements:
    source: str
    ops: tuple[Row, ...]
    storage: tuple[Row, ...]


def _number(path, line: int, col: str, text: str, *, integer: bool = False, positive: bool = False) -> float:
    where = f"{path}: row {line}, column {col!r}"
    try:
        v = float(text)
    except ValueError:
        raise MeasurementError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(v):
        raise MeasurementError(f"{where}: {text!r} is not a finite number")
    if v < 0:
        raise MeasurementError(f"{where}: {text!r} is negative; measurements are >= 0")
    if positive and v == 0:
        raise MeasurementError(f"{where}: must be greater than 0")
    if integer and v != int(v):
        raise MeasurementError(f"{where}: {text!r} must be a whole number of bytes")
    return v


def read_measurements(path: str | Path) -> Measurements:
    """Parse and check the CSV; raise :class:`MeasurementError` naming the row and column at fault."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise MeasurementError(f"cannot read {path}: {e.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise MeasurementError(
            f"{path}: missing column(s) {', '.join(missing)}; the header needs "
            f"{', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)}); see docs/devices.md"
        )
    ops, storage, names = [], [], set()
    for i, raw in enumerate(reader):
        line = i + 2  # the header is line 1
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if None in raw:
            raise MeasurementError(f"{path}: row {line} has more fields than the header")
        for c in REQUIRED:
            if not row.get(c):
                raise MeasurementError(f"{path}: row {line}, column {c!r} is empty")
        kind = row["kind"].lower()
        if kind not in OP_KINDS + STORAGE_KINDS:
            raise MeasurementError(
                f"{path}: row {line}, column 'kind': {row['kind']!r}; expected one of "
                f"{', '.join(OP_KINDS + STORAGE_KINDS)}"
            )
        nbytes = int(_number(path, line, "bytes", row["bytes"], integer=True))
        t = _number(path, line, "time_s", row["time_s"], positive=kind in STORAGE_KINDS)
        flops = _number(path, line, "flops", row["flops"]) if row.get("flops") else 0.0
        energy = _number(path, line, "energy_j", row["energy_j"]) if row.get("energy_j") else None
        inputs = tuple(x.strip() for x in row.get("inputs", "").split(";") if x.strip())
        r = Row(line, row["name"], kind, row.get("op", ""), flops, nbytes, t, energy, inputs)
        if kind in OP_KINDS:
            if r.name in names:
                raise MeasurementError(f"{path}: row {line}, column 'name': {r.name!r} is used by an earlier row")
            for x in inputs:
                if x not in names:
                    raise MeasurementError(
                        f"{path}: row {line}, column 'inputs': {x!r} is not the name of an "
                        f"earlier forward/backward row (rows are in execution order)"
                    )
            names.add(r.name)
            ops.append(r)
        else:
            storage.append(r)
    if not ops and not storage:
        raise MeasurementError(f"{path}: no measurement rows")
    return Measurements(str(path), tuple(ops), tuple(storage))


def storage_fits(m: Measurements) -> tuple[LinearFit, LinearFit] | None:
    """(read, write) fits of the storage rows, or None when there are none."""
    if not m.storage:
        return None
    fits = []
    for kind in STORAGE_KINDS:
        rows = [r for r in m.storage if r.kind == kind]
        if len({r.bytes for r in rows}) < 2:
            raise MeasurementError(
                f"{m.source}: the storage fit needs {kind} rows of at least two different sizes "
                f"(found {len(rows)} {kind} row(s)); measure e.g. 1 KiB, 64 KiB and 1 MiB"
            )
        fits.append(fit_latency_bandwidth([r.bytes for r in rows], [r.time_s for r in rows]))
    return fits[0], fits[1]


def _power(rows, user_w: float | None) -> tuple[float | None, str]:
    with_e = [r for r in rows if r.energy_j is not None and r.time_s > 0]
    if user_w is None and with_e:
        return sum(r.energy_j for r in with_e) / sum(r.time_s for r in with_e), "measured"
    return user_w, "user" if user_w is not None else "none"


def imported_profile_toml(
    m: Measurements, *, name: str = "board", power_w: float | None = None, storage_power_w: float | None = None
) -> str:
    """A device profile (TOML) from the op rows (operator families) and storage rows (the storage fit)."""
    if not m.ops:
        raise MeasurementError(f"{m.source}: a profile needs forward/backward op rows (with op and flops)")
    fits = storage_fits(m)
    if fits is None:
        raise MeasurementError(f"{m.source}: a profile needs read and write rows (storage measurements)")
    fams, rate = fit_families([OpSample(r.op, r.flops, r.time_s) for r in m.ops if r.time_s > 0])
    cw, csrc = _power(m.ops, power_w)
    sw, ssrc = _power(m.storage, storage_power_w)
    power = choose_power(None, cw, sw)
    read, write = fits
    lines = [
        f"# Imported by `poet profile --import {m.source}`",
        f"name = {toml_value(name)}",
        f"part = {toml_value(f'measurements from {m.source}')}",
        "ram_bytes = 0",
    ]
    lines += toml_table(
        "profile",
        {"format": PROFILE_FORMAT, "imported_from": m.source, "timing": "as measured on the board (CSV rows)"},
    )
    lines += toml_table(
        "compute",
        {
            "flops_per_s": rate,
            "energy_flops_per_s": rate,
            "power_w": power.compute_w,
            "power_source": csrc if cw is not None else power.source,
            "free_overhead_s": 0.0,
            "threads": 1,
            "source": f"{len(m.ops)} op rows of {m.source}",
        },
    )
    for f in fams:
        lines += family_table(f, spread=False)
    lines += toml_table(
        "storage",
        {
            "read_latency_s": read.latency_s,
            "read_bytes_per_s": read.bytes_per_s,
            "write_latency_s": write.latency_s,
            "write_bytes_per_s": write.bytes_per_s,
            "power_w": power.storage_w,
            "power_source": ssrc if sw is not None else power.source,
            "sync": True,
            "read_fit_median_rel_error": round(read.median_rel_error, 4),
            "write_fit_median_rel_error": round(write.median_rel_error, 4),
            "source": f"{len(m.storage)} storage rows of {m.source}",
        },
    )
    return "\n".join(lines) + "\n"


def imported_graph(
    m: Measurements,
    *,
    device=None,
    power_w: float | None = None,
    storage_power_w: float | None = None,
    name: str | None = None,
) -> CostedGraph:
    """The costed graph of the op rows: compute as measured, paging from the storage rows' fit
    (or ``device``'s storage), energy as measured or time x power."""
    if not m.ops:
        raise MeasurementError(f"{m.source}: a costed graph needs forward/backward op rows")
    fits = storage_fits(m)
    dev = None
    if device is not None:
        try:
            dev = load_device(device)
        except DeviceError as e:
            raise MeasurementError(str(e)) from None
    if fits is None and dev is None:
        raise MeasurementError(f"{m.source}: no read/write rows to price paging; add storage rows or pass --device")
    cw, _ = _power(m.ops, power_w)
    sw, _ = _power(m.storage, storage_power_w)
    if cw is None:
        cw = dev.compute_power_w if dev is not None else None
    if sw is None:
        sw = dev.storage_power_w if dev is not None else cw
    if cw is None and any(r.energy_j is None for r in m.ops):
        raise MeasurementError(f"{m.source}: op rows without energy_j need a power: pass --power-w (watts) or --device")
    if fits is not None:
        read, write = fits
        t_read = read.predict
        t_write = write.predict
    else:

        def t_read(b):
            return dev.read_latency_s + b / dev.read_bytes_per_s

        def t_write(b):
            return dev.write_latency_s + b / dev.write_bytes_per_s

    index = {r.name: i for i, r in enumerate(m.ops)}
    nodes, edges = [], []
    for i, r in enumerate(m.ops):
        t_in, t_out = t_read(r.bytes), t_write(r.bytes)
        energy = r.energy_j if r.energy_j is not None else r.time_s * cw
        nodes.append(
            CostedNode(
                name=r.name,
                kind=r.kind,
                ram_bytes=r.bytes,
                compute_time_s=r.time_s,
                compute_energy_j=energy,
                pagein_time_s=t_in,
                pagein_energy_j=t_in * (sw or 0.0),
                pageout_time_s=t_out,
                pageout_energy_j=t_out * (sw or 0.0),
            )
        )
        edges.extend((index[x], i) for x in r.inputs)
    return CostedGraph(
        name=name or Path(m.source).stem,
        nodes=tuple(nodes),
        edges=tuple(edges),
        meta={"source": f"measurements {m.source}", "costs": "imported"},
    )


__all__ = [
    "MeasurementError",
    "Measurements",
    "Row",
    "imported_graph",
    "imported_profile_toml",
    "read_measurements",
    "storage_fits",
]
