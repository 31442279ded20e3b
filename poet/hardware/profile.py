"""A measured device profile: operator-family fits, the storage fit, power; written as device TOML.

``poet profile`` (``poet.cli.profile``) measures; this module turns measurements into
the profile every command accepts with ``--device host.toml``: it fits each operator family's
``latency + FLOPs / rate`` to per-op times, reads RAPL energy counters, and writes the file.
No torch here.
"""

from __future__ import annotations

import glob
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from .device import Device, OpFamily
from .profile_model import op_family
from .profile_storage import LinearFit, StorageProfile

PROFILE_FORMAT = "poet-profile/1"


@dataclass(frozen=True)
class OpSample:
    """One measured op: its aten name, FLOPs and seconds (median of repeats) and the spread of those."""

    op: str
    flops: float
    seconds: float
    spread: float = 0.0


@dataclass(frozen=True)
class FamilyFit:
    name: str
    fit: LinearFit
    ops: int  # samples the fit used
    spread: float  # median (p75 - p25) / median over its samples


NO_RATE = 1e15  # FLOP/s of a latency-only fit: FLOPs did not explain the times


def fit_sum_preserving(flops, seconds) -> LinearFit:
    """``t = L + F / R`` by ordinary least squares, ``L >= 0``, ``R > 0``, keeping sum(predicted) = sum(measured).

    What a profile predicts is a sum over many ops, so the fit must not be biased on the total:
    least squares with an intercept has residuals summing to zero; when a bound binds, the fallback
    (latency only: the mean; rate only: total FLOPs / total seconds) keeps that property.
    """
    import numpy as np

    f = np.asarray(flops, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if f.size == 0:
        raise ValueError("no samples to fit")
    lat, inv = float(t.mean()), 1.0 / NO_RATE
    if f.size >= 2 and np.ptp(f) > 0:
        slope, icept = np.polyfit(f, t, 1)
        if slope > 0 and icept >= 0:
            lat, inv = float(icept), float(slope)
        elif slope > 0:
            lat, inv = 0.0, float(t.sum() / f.sum())
    pred = lat + f * inv
    rel = np.abs(pred - t) / np.maximum(t, 1e-12)
    return LinearFit(lat, 1.0 / max(inv, 1.0 / NO_RATE), float(np.median(rel)), float(np.max(rel)))


def fit_families(samples: list[OpSample]) -> tuple[list[FamilyFit], float]:
    """Per-family ``latency + FLOPs / rate`` fits (:func:`fit_sum_preserving`) and the overall FLOP rate
    (total FLOPs / total seconds).

    A family whose samples all do the same FLOPs cannot separate latency from rate: it gets the
    overall rate and the mean remaining time as latency.  The ``other`` family (ops of families
    not measured) is the fit over every sample.
    """
    good = [s for s in samples if s.seconds > 0 and math.isfinite(s.seconds)]
    if not good:
        raise ValueError("no op timings to fit")
    total_f = sum(s.flops for s in good)
    total_t = sum(s.seconds for s in good)
    rate = total_f / total_t if total_f > 0 else 1e9
    by: dict[str, list[OpSample]] = {}
    for s in good:
        by.setdefault(op_family(s.op), []).append(s)
    by["other"] = good
    fits = []
    for name, ss in by.items():
        flops = [s.flops for s in ss]
        secs = [s.seconds for s in ss]
        if len(set(flops)) >= 2:
            fit = fit_sum_preserving(flops, secs)
        else:
            lat = max(0.0, statistics.fmean(t - f / rate for f, t in zip(flops, secs)))
            pred = [lat + f / rate for f in flops]
            rel = [abs(p - t) / t for p, t in zip(pred, secs)]
            fit = LinearFit(lat, rate, statistics.median(rel), max(rel))
        fits.append(FamilyFit(name, fit, len(ss), statistics.median(s.spread for s in ss)))
    return fits, rate


# ---------------------------------------------------------------- paging overhead
@dataclass(frozen=True)
class PagingSample:
    """One executed paging schedule next to a keep-everything run of the same program (busy seconds).

    ``page_in_excess_s`` / ``page_out_excess_s``: summed over the run's page-ins / page-outs, what each
    took beyond the storage fit for its bytes.  ``other_excess_s``: what the run's computes and frees
    took beyond the same nodes' computes and frees in the keep-everything run beside it (the caches a
    storage wait left cold; negative when the smaller footprint made them faster).
    """

    page_in_excess_s: float
    page_out_excess_s: float
    other_excess_s: float
    page_ins: int
    page_outs: int


@dataclass(frozen=True)
class PagingOverheadFit:
    page_in_s: float  # added to every page-in (>= 0)
    page_out_s: float  # added to every page-out (>= 0)
    page_in_direct_s: float  # median per page-in, measured on the instruction itself
    page_out_direct_s: float
    other_per_page_s: float  # median compute/free excess per page-in or page-out
    runs: int


def fit_paging_overhead(samples: list[PagingSample]) -> PagingOverheadFit:
    """Per page-in and per page-out overhead from calibration runs: each kind's own excess over the
    storage fit (median over runs), plus an equal share per paging instruction of the computes' excess
    (a plan prices a node's compute once, whatever ran before it, so the slowdown of computes after a
    storage wait can only be charged to the storage instructions).  Each result is kept >= 0."""
    good = [s for s in samples if s.page_ins > 0 and s.page_outs > 0]
    if not good:
        raise ValueError("no calibration run with both page-ins and page-outs")
    for s in good:
        vals = (s.page_in_excess_s, s.page_out_excess_s, s.other_excess_s)
        if not all(math.isfinite(x) for x in vals):
            raise ValueError(f"non-finite paging sample {s}")
    d_in = statistics.median(s.page_in_excess_s / s.page_ins for s in good)
    d_out = statistics.median(s.page_out_excess_s / s.page_outs for s in good)
    other = statistics.median(s.other_excess_s / (s.page_ins + s.page_outs) for s in good)
    return PagingOverheadFit(max(0.0, d_in + other), max(0.0, d_out + other), d_in, d_out, other, len(good))


# ------------------------------------------------------------------------- power
def rapl_energy_j() -> float | None:
    """Sum of the package energy counters (joules) under /sys/class/powercap, or None if unreadable."""
    total, found = 0.0, False
    for path in glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj"):
        if path.count(":") != 1:  # packages only, not their sub-zones
            continue
        try:
            total += int(Path(path).read_text().strip()) / 1e6
            found = True
        except (OSError, ValueError):
            return None
    return total if found else None


@dataclass(frozen=True)
class PowerReading:
    compute_w: float
    storage_w: float
    source: str  # "rapl", "user" or "none"
    note: str


def choose_power(rapl_w: float | None, user_w: float | None, user_storage_w: float | None) -> PowerReading:
    """RAPL's package power when it was read, else what the user gave, else a 1 W placeholder (said so)."""
    if user_w is not None:
        if not (math.isfinite(user_w) and user_w > 0):
            raise ValueError(f"--power-w must be a positive number of watts, got {user_w}")
        src, w, note = "user", user_w, f"given with --power-w {user_w}"
    elif rapl_w is not None:
        src, w, note = "rapl", rapl_w, "Linux powercap/RAPL package energy over the compute measurement"
    else:
        src, w, note = (
            "none",
            1.0,
            (
                "no RAPL counters readable and no --power-w: 1 W placeholder, so energies "
                "are seconds x 1 W; pass --power-w for real joules"
            ),
        )
    sw = user_storage_w if user_storage_w is not None else w
    return PowerReading(w, sw, src, note)


# ------------------------------------------------------------------------ the profile
@dataclass
class HostProfile:
    name: str
    threads: int
    families: list[FamilyFit]
    flops_per_s: float
    free_overhead_s: float
    power: PowerReading
    storage: StorageProfile
    models: list[str] = field(default_factory=list)
    command: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    load_average: tuple[float, ...] = field(
        default_factory=lambda: tuple(os.getloadavg()) if hasattr(os, "getloadavg") else ()
    )
    seconds: float = 0.0
    page_in_overhead_s: float = 0.0  # per page-in beyond the storage fit (fit_paging_overhead)
    page_out_overhead_s: float = 0.0  # per page-out beyond the storage fit
    page_overhead_note: str = ""


def profile_device(p: HostProfile) -> Device:
    """The :class:`Device` the profile's file describes, without writing it (benchmarks, tests)."""
    st = p.storage
    return Device(
        name=p.name,
        part=f"{cpu_name()}, {p.threads} torch thread(s)",
        ram_bytes=ram_bytes(),
        flops_per_s=p.flops_per_s,
        energy_flops_per_s=p.flops_per_s,
        compute_power_w=p.power.compute_w,
        read_latency_s=st.read.latency_s,
        read_bytes_per_s=st.read.bytes_per_s,
        write_latency_s=st.write.latency_s,
        write_bytes_per_s=st.write.bytes_per_s,
        storage_power_w=p.power.storage_w,
        families=tuple(OpFamily(f.name, f.fit.latency_s, f.fit.bytes_per_s) for f in p.families),
        free_overhead_s=p.free_overhead_s,
        threads=p.threads,
        paging_sync=True,
        page_in_overhead_s=p.page_in_overhead_s,
        page_out_overhead_s=p.page_out_overhead_s,
    )


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{s}"'


def family_table(f: FamilyFit, *, spread: bool = True) -> list[str]:
    """The ``[compute.families.NAME]`` table of one fitted family (``spread``: write its measured spread,
    which imported rows do not have)."""
    values = {
        "latency_s": f.fit.latency_s,
        "flops_per_s": f.fit.bytes_per_s,
        "ops": f.ops,
        "fit_median_rel_error": round(f.fit.median_rel_error, 4),
        "fit_max_rel_error": round(f.fit.max_rel_error, 4),
    }
    if spread:
        values["spread"] = round(f.spread, 4)
    return toml_table(f"compute.families.{f.name}", values)


def toml_table(name: str, items: dict) -> list[str]:
    return [f"\n[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in items.items()]


def profile_toml(p: HostProfile) -> str:
    """The profile as device TOML (docs/devices.md): every command reads it with ``--device``."""
    st = p.storage
    lines = [
        f"# Measured by `poet profile` on {p.created}; load average {', '.join(f'{x:.2f}' for x in p.load_average)}",
        f"name = {toml_value(p.name)}",
        f"part = {toml_value(f'{cpu_name()}, {p.threads} torch thread(s)')}",
        f"ram_bytes = {ram_bytes()}",
    ]
    lines += toml_table(
        "profile",
        {
            "format": PROFILE_FORMAT,
            "created": p.created,
            "command": p.command,
            "models": p.models,
            "load_average": list(p.load_average),
            "seconds": round(p.seconds, 1),
            "timing": "busy seconds (wall minus run-queue waits) of each op run by the executor, mean over runs",
        },
    )
    lines += toml_table(
        "compute",
        {
            "flops_per_s": p.flops_per_s,
            "energy_flops_per_s": p.flops_per_s,
            "power_w": p.power.compute_w,
            "power_source": p.power.source,
            "free_overhead_s": p.free_overhead_s,
            "threads": p.threads,
            "source": f"poet profile: {len(p.families)} operator families fitted to ops of {', '.join(p.models)}; "
            f"power: {p.power.note}",
        },
    )
    for f in p.families:
        lines += family_table(f)
    lines += toml_table(
        "storage",
        {
            "read_latency_s": st.read.latency_s,
            "read_bytes_per_s": st.read.bytes_per_s,
            "write_latency_s": st.write.latency_s,
            "write_bytes_per_s": st.write.bytes_per_s,
            "power_w": p.power.storage_w,
            "power_source": p.power.source,
            "sync": True,
            "page_in_overhead_s": p.page_in_overhead_s,
            "page_out_overhead_s": p.page_out_overhead_s,
            "page_overhead_source": p.page_overhead_note,
            "medium": f"files in {st.directory}: fsync'd writes, reads "
            + ("after posix_fadvise(DONTNEED)" if st.cache_dropped else "(page cache not dropped)"),
            "read_fit_median_rel_error": round(st.read.median_rel_error, 4),
            "read_fit_max_rel_error": round(st.read.max_rel_error, 4),
            "write_fit_median_rel_error": round(st.write.median_rel_error, 4),
            "write_fit_max_rel_error": round(st.write.max_rel_error, 4),
            "source": "poet profile: latency + bytes / bandwidth fitted to the size sweep below",
        },
    )
    lines += toml_table(
        "storage.sweep", {"bytes": list(st.sizes), "write_s": list(st.write_s), "read_s": list(st.read_s)}
    )
    return "\n".join(lines) + "\n"


__all__ = [
    "PROFILE_FORMAT",
    "FamilyFit",
    "family_table",
    "HostProfile",
    "OpSample",
    "PagingOverheadFit",
    "PagingSample",
    "PowerReading",
    "choose_power",
    "fit_families",
    "fit_paging_overhead",
    "fit_sum_preserving",
    "profile_device",
    "profile_toml",
    "rapl_energy_j",
    "toml_table",
    "toml_value",
]
