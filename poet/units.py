"""Parsing of human budgets: ``3MB``, ``256KiB``, ``3000000``, ``7.6x``, ``2.5s``, ``500ms``."""
from __future__ import annotations

import re

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0}


class BudgetError(ValueError):
    """A budget string or number that cannot be understood."""


def parse_bytes(value) -> int:
    """Bytes from an int or a string with an SI (kB = 1000) or binary (KiB = 1024) unit."""
    if isinstance(value, bool):
        raise BudgetError(f"memory budget {value!r} is not a size")
    if isinstance(value, (int, float)):
        num, unit = float(value), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _BYTE_UNITS:
            raise BudgetError(
                f"cannot read memory budget {value!r}; write bytes like 3000000, 3MB, 256KB or 1.5GiB")
        num, unit = float(m.group(1)), m.group(2).lower()
    b = num * _BYTE_UNITS[unit]
    if not b > 0 or b != b or b == float("inf"):
        raise BudgetError(f"memory budget must be positive, got {value!r}")
    return int(b)


def parse_runtime(value, plain_runtime_s: float) -> float | None:
    """Seconds from ``7.6x`` (multiple of one plain forward+backward), ``2.5s``, ``500ms``.

    ``None``, ``"none"`` and ``"inf"`` mean no deadline.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        s = float(value)
    else:
        text = str(value).strip().lower()
        if text in ("none", "inf", "unlimited", ""):
            return None
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(x|s|ms|us|min|h)?", text)
        if not m:
            raise BudgetError(
                f"cannot read runtime budget {value!r}; write a multiple of one plain training "
                f"step like 1.2x, or seconds like 2.5s or 800ms")
        num, unit = float(m.group(1)), m.group(2) or "s"
        s = num * plain_runtime_s if unit == "x" else num * _TIME_UNITS[unit]
        if unit == "x" and num < 1.0:
            raise BudgetError(
                f"runtime budget {value} is below one plain forward+backward pass (1.0x), "
                f"which every schedule must at least compute")
    if not s > 0:
        raise BudgetError(f"runtime budget must be positive, got {value!r}")
    return s


def fmt_bytes(b: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= k:
            return f"{b / k:.3g} {unit}"
    return f"{int(b)} B"


def fmt_energy(j: float) -> str:
    for unit, k in (("J", 1.0), ("mJ", 1e-3), ("µJ", 1e-6)):
        if abs(j) >= k:
            return f"{j / k:.4g} {unit}"
    return f"{j / 1e-9:.4g} nJ"


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.4g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.4g} ms"
    return f"{s * 1e6:.4g} µs"
