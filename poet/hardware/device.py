"""Device profiles: data files (TOML), one per device, loaded by name or path."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

DEVICE_DIR = Path(__file__).parent / "devices"


class DeviceError(ValueError):
    """An unknown device name or a malformed profile file."""


@dataclass(frozen=True)
class Device:
    """Rates and powers of one device; every number in SI units (s, B, W, FLOP)."""

    name: str
    part: str
    ram_bytes: int
    flops_per_s: float            # compute speed used for time
    energy_flops_per_s: float     # compute speed at which `compute_power_w` is drawn
    compute_power_w: float
    read_latency_s: float
    read_bytes_per_s: float
    write_latency_s: float
    write_bytes_per_s: float
    storage_power_w: float
    path: str = ""

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
    for section, keys in _REQUIRED.items():
        sec = d.get(section)
        if not isinstance(sec, dict):
            raise DeviceError(f"{path}: missing [{section}] table (needs {', '.join(keys)})")
        for k in keys:
            v = sec.get(k)
            if not isinstance(v, (int, float)) or v < 0 or (k.endswith("per_s") and v <= 0):
                raise DeviceError(f"{path}: [{section}] {k} must be a positive number, got {v!r}")
    c, s = d["compute"], d["storage"]
    return Device(
        name=str(d.get("name", path.stem)), part=str(d.get("part", "")),
        ram_bytes=int(d.get("ram_bytes", 0)),
        flops_per_s=float(c["flops_per_s"]), energy_flops_per_s=float(c["energy_flops_per_s"]),
        compute_power_w=float(c["power_w"]),
        read_latency_s=float(s["read_latency_s"]), read_bytes_per_s=float(s["read_bytes_per_s"]),
        write_latency_s=float(s["write_latency_s"]), write_bytes_per_s=float(s["write_bytes_per_s"]),
        storage_power_w=float(s["power_w"]), path=str(path),
    )


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
                f"(or give the path of a .toml profile, see docs/devices.md)")
    try:
        d = tomllib.loads(path.read_text())
    except OSError as e:
        raise DeviceError(f"cannot read device file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise DeviceError(f"{path} is not valid TOML: {e}") from None
    return _parse(d, path)
