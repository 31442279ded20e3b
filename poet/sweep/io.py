"""A sweep directory on disk: ``sweep.json``/``sweep.csv``, the safety checks, the lock.

Files are written whole or not at all (:func:`poet.fileio.atomic_write_text`), so an interrupted
sweep loses at most the points in flight and never leaves a truncated ``sweep.json``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

from ..fileio import read_json
from .grid import COLUMNS, SWEEP_FORMAT, SweepError, SweepSpec


def load_sweep(path) -> dict:
    """The ``poet-sweep/1`` document of a sweep directory (or of its ``sweep.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "sweep.json"
    d = read_json(p, "sweep file", SweepError)
    if not isinstance(d, dict) or d.get("format") != SWEEP_FORMAT:
        raise SweepError(f"{p} is not a {SWEEP_FORMAT} file")
    return d


def rows_to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS})
    return buf.getvalue()


def schedule_file(key: str) -> Path:
    """Where a point's schedule goes, relative to the sweep directory."""
    return Path("schedules") / (re.sub(r"[^A-Za-z0-9_.-]+", "_", key) + ".json")


def prepare_out_dir(out: Path, spec: SweepSpec, force: bool) -> list[dict]:
    """Check that ``out`` may be written; return the points of a run to resume."""
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out} exists and is not a directory; choose another --out")
    if not out.exists():
        out.mkdir(parents=True)
        return []
    sj = out / "sweep.json"
    if sj.exists():
        try:
            d = load_sweep(sj)
        except SweepError as e:
            if not force:
                raise SweepError(f"{sj} is not a readable sweep file ({e}); pass --force to overwrite it") from e
            return []
        old = d.get("identity")
        if isinstance(old, dict) and "tile" not in old:
            old = {**old, "tile": "off"}  # sweeps from before --tile never tiled
        if old != spec.identity():
            if not force:
                hint = " (it was run with --tile off)" if isinstance(old, dict) and old.get("tile") != spec.tile else ""
                raise SweepError(
                    f"{out} holds a sweep of {old}, not {spec.identity()}{hint}; "
                    f"choose another --out, or pass --force to start it over"
                )
            return []
        points = d.get("points", [])
        return (
            [r for r in points if isinstance(r, dict) and isinstance(r.get("key"), str)]
            if isinstance(points, list)
            else []
        )
    if any(out.iterdir()) and not force:
        raise SweepError(
            f"--out {out} exists, is not empty and holds no sweep.json; refusing to write "
            f"into it (choose another --out, or pass --force)"
        )
    return []


class DirLock:
    """``DIR/.sweep.lock`` with our pid: two sweeps must not write one directory at once."""

    def __init__(self, out: Path):
        self.path = out / ".sweep.lock"
        if self.path.exists():
            try:
                pid = int(self.path.read_text().strip() or 0)
            except ValueError:
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise SweepError(f"another sweep (pid {pid}) is writing into {out}; wait for it or stop it first")
        self.path.write_text(str(os.getpid()))

    def release(self):
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
