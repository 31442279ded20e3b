"""Parsing of human budgets (``3MB``, ``256KiB``, ``3000000``, ``40%``, ``7.6x``, ``2.5s``, ``500ms``),
and the one check of every number POET reads from a user (finite, in range, whole where it counts
bytes), used by every loader: graph files, schedule files, device profiles, options."""

from __future__ import annotations

import math
import numbers
import re

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0}


class BudgetError(ValueError):
    """A budget string or number that cannot be understood."""


# Byte counts above 2**53 (9 PB) lose their last bits in a float, and the solvers and the validator
# compare bytes through floats in places: no real device comes near, so larger counts are refused.
MAX_BYTES = 2**53
_NUMBER = r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)"


def finite_number(
    value,
    what: str,
    *,
    error: type[Exception] = BudgetError,
    minimum: float | None = 0.0,
    positive: bool = False,
    maximum: float | None = None,
) -> float:
    """``value`` as a finite float, or ``error`` naming ``what``.

    Booleans, strings, lists and objects are refused (``true`` is not 1), so are NaN, infinities and
    integers too large for a float; ``minimum`` (inclusive), ``positive`` (> 0) and ``maximum`` bound it.
    """
    kind = type(value)  # plain floats and ints first: the checks of millions of tiled nodes' costs
    if kind is not float and kind is not int and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise error(f"{what} must be a number, got {value!r}"[:300])
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise error(f"{what} must be a finite number, got {_short(value)}")
    if positive and not x > 0:
        raise error(f"{what} must be a number above 0, got {_short(value)}")
    if minimum is not None and x < minimum:
        raise error(f"{what} must be a number >= {minimum:g}, got {_short(value)}")
    if maximum is not None and x > maximum:
        raise error(f"{what} must be at most {maximum:g}, got {_short(value)}")
    return x


def byte_count(value, what: str, *, error: type[Exception] = BudgetError, positive: bool = False) -> int:
    """``value`` as a whole number of bytes in 0..MAX_BYTES (1.. with ``positive``), or ``error``
    naming ``what``.  A float is accepted only when it is whole (``1024.0``)."""
    x = finite_number(value, what, error=error, minimum=0.0, positive=positive)
    if type(value) is not int and not isinstance(value, numbers.Integral) and not x.is_integer():
        raise error(f"{what} must be a whole number of bytes, got {_short(value)}")
    if x > MAX_BYTES:
        raise error(f"{what} must be at most {MAX_BYTES} B (2^53, 9 PB), got {_short(value)}")
    return int(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def parse_bytes(value, what: str = "memory budget", *, allow_zero: bool = False) -> int:
    """Bytes from an int or a string with an SI (kB = 1000) or binary (KiB = 1024) unit.

    A number of plain bytes must be whole (``0.5`` is refused, not rounded to 0); a size with a
    unit is rounded down to whole bytes (``1.1KiB`` = 1126 B).  Zero is refused unless
    ``allow_zero``; NaN, infinities and sizes above 2^53 B always are.
    """
    hint = "write bytes like 3000000, 3MB, 256KB or 1.5GiB"
    if isinstance(value, bool):
        raise BudgetError(f"{what} {value!r} is not a size; {hint}")
    if isinstance(value, (int, float)):
        num, unit = value, ""
    else:
        m = re.fullmatch(r"\s*" + _NUMBER + r"\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _BYTE_UNITS:
            raise BudgetError(f"cannot read {what} {_short(value)}; {hint}")
        num, unit = float(m.group(1)), m.group(2).lower()
    if isinstance(num, int):
        b = num * _BYTE_UNITS[unit] if abs(num) <= MAX_BYTES else float(MAX_BYTES) * 2  # exact at 2^53
    else:
        b = float(num) * _BYTE_UNITS[unit]
    if not math.isfinite(b) or b < 0:
        raise BudgetError(f"{what} {_short(value)} is not a finite size; {hint}")
    if unit in ("", "b") and not float(num).is_integer():
        raise BudgetError(f"{what} {_short(value)} is not a whole number of bytes; {hint}")
    if b == 0 and not allow_zero or b > 0 and int(b) == 0:
        raise BudgetError(f"{what} must be at least 1 byte, got {_short(value)}; {hint}")
    if b > MAX_BYTES:
        raise BudgetError(f"{what} {_short(value)} is above 2^53 B (9 PB), more than any device holds; {hint}")
    return int(b)


def parse_percent(text: str, what: str = "memory budget") -> float:
    """The fraction in ``"40%"`` (0.4); ``BudgetError`` naming ``what`` for anything else."""
    m = re.fullmatch(r"\s*" + _NUMBER + r"\s*%\s*", str(text))
    hint = "write a percentage like 40% (of the way from fixed RAM to the keep-everything peak), or bytes like 3MB"
    if not m:
        raise BudgetError(f"cannot read {what} {_short(text)}; {hint}")
    frac = float(m.group(1)) / 100.0
    if not math.isfinite(frac) or not frac > 0:
        raise BudgetError(f"{what} {_short(text)} must be a positive, finite percentage; {hint}")
    return frac


def parse_runtime(value, plain_runtime_s: float) -> float | None:
    """Seconds from ``7.6x`` (multiple of one plain forward+backward), ``2.5s``, ``500ms``.

    ``None``, ``"none"``, ``"inf"`` and ``"unlimited"`` mean no deadline; an empty string is refused
    (it is more likely a script's unset variable than a wish for no deadline).
    """
    hint = "write a multiple of one plain training step like 1.2x, seconds like 2.5s or 800ms, or none for no deadline"
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        s = value
        unit = "s"
    else:
        text = str(value).strip().lower()
        if text in ("none", "inf", "unlimited"):
            return None
        if not text:
            raise BudgetError(f"runtime budget is empty; {hint}")
        m = re.fullmatch(_NUMBER + r"\s*(x|s|ms|us|min|h)?", text)
        if not m:
            raise BudgetError(f"cannot read runtime budget {_short(value)}; {hint}")
        num, unit = float(m.group(1)), m.group(2) or "s"
        s = num * plain_runtime_s if unit == "x" else num * _TIME_UNITS[unit]
        if unit == "x" and num < 1.0:
            raise BudgetError(
                f"runtime budget {value} is below one plain forward+backward pass (1.0x), "
                f"which every schedule must at least compute"
            )
    try:
        s = float(s)
    except OverflowError:
        s = math.inf
    if not math.isfinite(s):
        raise BudgetError(f"runtime budget {_short(value)} is not a finite time; {hint}")
    if not s > 0:
        raise BudgetError(f"runtime budget must be positive, got {_short(value)}; {hint}")
    return s


# -- command-line options: the same checks, as argparse types -------------------------------------


def number_option(
    kind: str,
    what: str,
    example: str,
    *,
    minimum: float | None = None,
    below: float | None = None,
    above: float | None = None,
):
    """An argparse ``type=`` for a finite number option (``kind`` ``int`` or ``float``) with
    ``minimum`` inclusive, ``above``/``below`` exclusive bounds.  argparse names the option in
    its error; the message says what was wrong and what would work."""
    import argparse

    def parse(text: str):
        try:
            x = int(text) if kind == "int" else float(text)
        except ValueError:
            x = None
        if (
            x is None
            or not math.isfinite(x)
            or (minimum is not None and x < minimum)
            or (below is not None and not x < below)
            or (above is not None and not x > above)
        ):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; give e.g. {example}")
        return x

    parse.__name__ = kind
    return parse


SECONDS = number_option("float", "a positive number of seconds", "60", above=0.0)
GAP = number_option("float", "a relative gap in [0, 1)", "0.01 for 1%", minimum=0.0, below=1.0)
THREADS = number_option(
    "int", "a whole number of threads, 1 or more", "2 (or leave it out to use every core)", minimum=1
)
BATCH = number_option("int", "a whole number of samples, 1 or more", "8", minimum=1)


def fmt_bytes(b: float) -> str:
    """``b`` bytes for a person to read (3 significant digits); any int or float, however large."""
    if isinstance(b, int) and abs(b) >= 10**18:  # past PB, perhaps past what a float holds: digits, no division
        digits = str(abs(b))
        return f"{'-' if b < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1} B"
    if not math.isfinite(b):
        return f"{b} B"
    if abs(b) >= 1e18:
        return f"{b:.2e} B"
    for unit, k in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
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
