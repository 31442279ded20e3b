"""Device profiles: data files (TOML), one per device, loaded by name or path."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..fileio import read_text
from ..units import byte_count, finite_number
from .instructions import InstructionTable, parse_instructions

DEVICE_DIR = Path(__file__).parent / "devices"


class DeviceError(ValueError):
    """An unknown device name or a malformed profile file."""


@dataclass(frozen=True)
class OpFamily:
    """Measured cost of one operator family: time = latency_s + FLOPs / flops_per_s."""

    name: str
    latency_s: float
    flops_per_s: float


@dataclass(frozen=True)
class Device:
    """Rates and powers of one device; every number in SI units (s, B, W, FLOP)."""

    name: str
    part: str
    ram_bytes: int
    flops_per_s: float  # compute speed used for time
    energy_flops_per_s: float  # compute speed at which `compute_power_w` is drawn
    compute_power_w: float
    read_latency_s: float
    read_bytes_per_s: float
    write_latency_s: float
    write_bytes_per_s: float
    storage_power_w: float
    path: str = ""
    # Filled only by a measured profile (`poet profile`, docs/devices.md "Profiling this machine"):
    families: tuple[OpFamily, ...] = ()  # per-operator-family time model; empty: FLOPs / flops_per_s
    free_overhead_s: float = 0.0  # executor cost of one `free`, folded into compute and page-in
    threads: int = 0  # torch threads the profile was measured with (0: not measured)
    paging_sync: bool = False  # pages fsync'd and dropped from the page cache, as measured
    # executing one page-in / page-out beyond the storage fit (the executor's work, cold caches after I/O)
    page_in_overhead_s: float = 0.0
    page_out_overhead_s: float = 0.0
    # Filled only by an instruction profile (`poet profile --target qemu-m4`, docs/mcu.md): per-node
    # instructions of the profiled programs, priced with the declared clock and energies
    instructions: InstructionTable | None = None

    @property
    def joules_per_flop(self) -> float:
        return self.compute_power_w / self.energy_flops_per_s


_REQUIRED = {
    "compute": ("flops_per_s", "energy_flops_per_s", "power_w"),
    "storage": ("read_latency_s", "read_bytes_per_s", "write_latency_s", "write_bytes_per_s", "power_w"),
}


def list_devices() -> list[str]:
    return sorted(p.stem for p in DEVICE_DIR.glob("*.toml"))


def _parse(d: dict, path: Path) -> Device:
    vals: dict[str, dict[str, float]] = {}
    for section, keys in _REQUIRED.items():
        sec = d.get(section)
        if not isinstance(sec, dict):
            raise DeviceError(f"{path}: missing [{section}] table (needs {', '.join(keys)})")
        vals[section] = {}
        for k in keys:
            if k not in sec:
                raise DeviceError(f"{path}: [{section}] lacks {k} (a number; see docs/devices.md)")
            # speeds divide: they must be above 0; latencies and powers may be 0
            vals[section][k] = finite_number(
                sec[k], f"{path}: [{section}] {k}", error=DeviceError, positive=k.endswith("per_s")
            )
    for key in ("name", "part"):
        if key in d and not isinstance(d[key], str):
            raise DeviceError(f"{path}: {key} must be a string, got {d[key]!r}"[:300])
    ram = byte_count(d.get("ram_bytes", 0), f"{path}: ram_bytes", error=DeviceError)
    c, s = vals["compute"], vals["storage"]
    return Device(
        name=str(d.get("name", path.stem)),
        part=str(d.get("part", "")),
        ram_bytes=ram,
        flops_per_s=c["flops_per_s"],
        energy_flops_per_s=c["energy_flops_per_s"],
        compute_power_w=c["power_w"],
        read_latency_s=s["read_latency_s"],
        read_bytes_per_s=s["read_bytes_per_s"],
        write_latency_s=s["write_latency_s"],
        write_bytes_per_s=s["write_bytes_per_s"],
        storage_power_w=s["power_w"],
        path=str(path),
        instructions=parse_instructions(d, path, DeviceError),
        **_measured(d, path),
    )


def _measured(d: dict, path: Path) -> dict:
    """The fields of a measured profile; a file with a [profile] table must have all of them."""
    c, s = d["compute"], d["storage"]
    fams = c.get("families", {})
    if not isinstance(fams, dict):
        raise DeviceError(f"{path}: [compute.families] must be a table of tables")
    families = []
    for name, f in fams.items():
        if not isinstance(f, dict):
            raise DeviceError(f"{path}: [compute.families.{name}] must be a table with latency_s and flops_per_s")
        for k in ("latency_s", "flops_per_s"):
            v = f.get(k)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or v < 0
                or (k == "flops_per_s" and v <= 0)
            ):
                raise DeviceError(
                    f"{path}: [compute.families.{name}] {k} must be a finite "
                    f"{'positive' if k == 'flops_per_s' else 'non-negative'} number, got {v!r}"
                )
        families.append(OpFamily(str(name), float(f["latency_s"]), float(f["flops_per_s"])))
    prof = d.get("profile")
    if prof is None:
        return {"families": tuple(families)}
    if not isinstance(prof, dict):
        raise DeviceError(f"{path}: [profile] must be a table")
    missing = [f"[compute] {k}" for k in ("free_overhead_s", "threads") if k not in c]
    missing += ["[storage] sync"] if "sync" not in s else []
    missing += ["[compute.families] (at least one family)"] if not families else []
    if missing:
        raise DeviceError(
            f"{path}: a measured profile ([profile] table) lacks {', '.join(missing)}; "
            f"it is partial or damaged: measure again with `poet profile --out {path.name}`"
        )
    free = c["free_overhead_s"]
    if isinstance(free, bool) or not isinstance(free, (int, float)) or not math.isfinite(free) or free < 0:
        raise DeviceError(f"{path}: [compute] free_overhead_s must be a finite non-negative number, got {free!r}")
    threads = c["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise DeviceError(f"{path}: [compute] threads must be a positive integer, got {threads!r}")
    if not isinstance(s["sync"], bool):
        raise DeviceError(f"{path}: [storage] sync must be true or false, got {s['sync']!r}")
    over = {}
    # page_overhead_s: one figure for both, as profiles before the split wrote it
    for key in ("page_overhead_s", "page_in_overhead_s", "page_out_overhead_s"):
        v = s.get(key, over.get("page_overhead_s", 0.0))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise DeviceError(f"{path}: [storage] {key} must be a finite non-negative number (seconds), got {v!r}")
        over[key] = float(v)
    return {
        "families": tuple(families),
        "free_overhead_s": float(free),
        "threads": threads,
        "paging_sync": s["sync"],
        "page_in_overhead_s": over["page_in_overhead_s"],
        "page_out_overhead_s": over["page_out_overhead_s"],
    }


def load_device(name_or_path: str | Path | Device) -> Device:
    """A built-in profile by name (``poet devices`` lists them) or a TOML file by path."""
    if isinstance(name_or_path, Device):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith(".toml") or path.exists()):
        path = DEVICE_DIR / f"{text}.toml"
        if not path.exists():
            raise DeviceError(
                f"unknown device {text!r}; built-in devices: {', '.join(list_devices())} "
                f"(or give the path of a .toml profile, see docs/devices.md)"
            )
    try:
        d = tomllib.loads(read_text(path, "device profile", DeviceError))
    except tomllib.TOMLDecodeError as e:
        raise DeviceError(f"{path} is not valid TOML: {e}") from None
    return _parse(d, path)
