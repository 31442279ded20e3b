"""The terminal side of the commands: the progress line on stderr, Ctrl-C that stops a solve early, and
checks of an output path before any work is done.  Shared by the command modules (``poet/cli/``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .units import fmt_energy


class OutputPathError(ValueError):
    """An --out path that cannot be written; raised before any solving."""


# Held while a progress line is drawn.  The guide searches fork worker processes; holding it across
# a fork keeps the ticker from being mid-write to stderr, whose buffer lock a child would inherit held.
_DRAWING = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_DRAWING.acquire, after_in_parent=_DRAWING.release, after_in_child=_DRAWING.release)


# A second SIGINT this soon after the first is the same Ctrl-C: `timeout -s INT` (and some shells) signal
# both the process and its process group, so one request arrives twice.
SAME_CTRL_C_S = 0.5


@contextlib.contextmanager
def ctrl_c_stops_the_solve():
    """While held, the first Ctrl-C asks the solve to stop early and return the best schedule found
    so far (the ``stop`` callable it yields turns true); a second one, ``SAME_CTRL_C_S`` or more
    later, aborts.  Outside the main thread (where no signal handler can be set) it yields a stop
    that never turns true."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return
    first = [0.0]

    def on_sigint(signum, frame):
        if asked.is_set():
            if time.monotonic() - first[0] < SAME_CTRL_C_S:
                return
            raise KeyboardInterrupt
        first[0] = time.monotonic()
        asked.set()
        # this thread may be drawing the progress line, holding _DRAWING: never wait for it here
        held = _DRAWING.acquire(blocking=False)
        try:
            print(
                "\npoet: stopping early: the best schedule found so far comes next (Ctrl-C again to abort)",
                file=sys.stderr,
                flush=True,
            )
        finally:
            if held:
                _DRAWING.release()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


class Progress:
    """One status line on stderr, refreshed while a solve runs.

    The solver reports when it can; HiGHS can go minutes without a callback (at the root of
    a large MILP), so the line is also redrawn every second with the clock moving, which
    tells a slow step from a hung one.  When stderr is not a terminal (a log file, CI), a
    redrawn line would pile up as one long line of carriage returns: there it is written as
    whole lines instead, one when the step changes and otherwise one every ``LOG_EVERY_S``.
    """

    TICK_S = 1.0
    LOG_EVERY_S = 30.0
    HINT_AFTER_S = 10.0  # a terminal's line then also says how to stop early

    def __init__(self, enabled: bool, tty: bool | None = None):
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self.shown = False
        self.width = 0
        self.last: dict | None = None
        self.logged: tuple[str | None, float] | None = None  # (step, when) of the last logged line
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None

    def __call__(self, d: dict):
        if not self.enabled:
            return
        with _DRAWING:
            self.last = d
            self._draw(d)
        if self.ticker is None:
            self.ticker = threading.Thread(target=self._tick, name="poet-progress", daemon=True)
            self.ticker.start()

    def _tick(self):
        while not self.stop.wait(self.TICK_S):
            with _DRAWING:
                if self.last is not None and not self.stop.is_set():
                    self._draw(self.last)

    def _draw(self, d: dict):
        phase = f" ({d['phase']})" if d.get("phase") else ""
        parts = [f"solving{phase}... {time.perf_counter() - self.t0:5.0f} s"]
        unit = d.get("energy_unit_j")
        if d.get("objective") is not None:
            obj = d["objective"] * unit if unit else d["objective"]
            parts.append(f"best {fmt_energy(obj) if unit else f'{obj:.6g}'}")
        if d.get("bound") is not None and d["bound"] == d["bound"]:
            bnd = d["bound"] * unit if unit else d["bound"]
            parts.append(f"bound {fmt_energy(bnd) if unit else f'{bnd:.6g}'}")
        if d.get("gap") is not None and d["gap"] != float("inf"):
            parts.append(f"gap {d['gap']:.2%}")
        if self.tty and time.perf_counter() - self.t0 >= self.HINT_AFTER_S:
            parts.append("Ctrl-C stops with the best so far")
        line = ", ".join(parts)
        if not self.tty:
            now = time.perf_counter()
            if self.logged is None or self.logged[0] != d.get("phase") or now - self.logged[1] >= self.LOG_EVERY_S:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
                self.logged = (d.get("phase"), now)
            return
        sys.stderr.write("\r" + line.ljust(self.width))  # blanks what a longer line left behind
        sys.stderr.flush()
        self.width = max(self.width, len(line))
        self.shown = True

    def done(self):
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def warn_uncached(s) -> None:
    """Say on stderr why a solve's answer could not be kept in the cache, if it could not."""
    if s.report.cache_note:
        print(f"note: {s.report.cache_note}", file=sys.stderr)
    if s.report.cache_error:
        print(f"note: the answer was not cached: {s.report.cache_error}", file=sys.stderr)


def check_out_path(path: str | None, force: bool):
    if not path:
        return
    if Path(path).exists() and not Path(path).is_file():
        raise OutputPathError(
            f"cannot write {path}: it exists and is not a regular file (a directory, device or "
            f"pipe); choose another --out"
        )
    if Path(path).exists() and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it, or choose another --out")
    parent = Path(os.path.realpath(path)).parent
    if not parent.is_dir():
        raise OutputPathError(f"cannot write {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputPathError(f"cannot write {path}: the directory {parent} is not writable")
