"""A MILP's proven dual bound from HiGHS in a child process, for the large bound ILPs.

HiGHS checks neither its time limit nor a request to stop during presolve or a long LP solve: on the
residency ILP of vgg16_cifar at 32 KiB on the ``m4`` (4.2M nonzeros) presolve alone takes 53 s, and under
load a 271-s limit ran 429 s.  A dual bound is valid whenever it is read, so the solve runs in a child
process that prints every bound HiGHS reports; at the deadline (plus ``grace``) or once ``stop`` turns
true the child is ended and the last bound printed is the answer.  The child is ``python -m`` this module
in a session of its own: nothing of the caller's script is imported again (a spawned multiprocessing
child re-runs an unguarded script), and a Ctrl-C in the terminal reaches the solving process only, which
ends the child.  A child left without its parent ends at its own time limit, or at its next print.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .problem import MilpProblem

FIELDS = ("c", "col_lo", "col_hi", "integer", "starts", "index", "value", "row_lo", "row_hi")


@dataclass(frozen=True)
class BoundRun:
    """The last proven dual bound (None: none reported), whether the MILP is infeasible, the wall
    seconds, and how the run ended: ``solved`` (HiGHS returned), ``time limit`` or ``stopped`` (the
    child was ended), or ``failed: ...``."""

    bound: float | None
    infeasible: bool
    seconds: float
    ended: str


def dual_bound(
    p: MilpProblem,
    *,
    time_limit: float,
    stop=None,
    grace: float = 1.0,
    lp_first: bool = False,
    options: dict | None = None,
) -> BoundRun:
    """HiGHS's dual bound of ``p`` (minimised), read within ``time_limit`` + ``grace`` seconds.  With
    ``lp_first`` the child solves the LP relaxation first (its optimum is a bound within a few seconds
    where branch-and-bound has not finished its root node) and gives the MILP the time left; the larger
    bound is the answer.  ``options``: HiGHS options for the MILP (numbers, strings, booleans)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="poet-bound-") as tmp:
        path = Path(tmp) / "milp.npz"
        np.savez(path, **{f: getattr(p, f) for f in FIELDS})
        root = str(Path(__file__).resolve().parents[3])  # the directory holding the poet package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "poet.solve.lp.bound_process",
                str(path),
                repr(float(time_limit)),
                str(lp_first),
                json.dumps(options or {}),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
        reader.start()
        ended = "solved"
        while child.poll() is None:
            if stop is not None and stop():
                ended = "stopped"
            elif time.monotonic() - t0 > time_limit + grace:
                ended = "time limit"
            if ended != "solved":
                child.kill()
                break
            time.sleep(0.05)
        child.wait()
        reader.join(timeout=5)
    bound, infeasible, status = None, False, None
    for line in list(lines):
        word, _, value = line.strip().partition(" ")
        if word == "bound" and value != "None":
            b = float(value)
            bound = b if bound is None else max(bound, b)
        elif word == "status":
            status = value
    if status == "infeasible":
        infeasible = True
    if ended == "solved" and status is None:
        ended = f"failed: the child exited with {child.returncode} before reporting"
    return BoundRun(bound if bound is None or math.isfinite(bound) else None, infeasible, time.monotonic() - t0, ended)


def _child(path: str, time_limit: float, lp_first: bool = False, options: dict | None = None) -> None:
    from dataclasses import replace

    from .highs import solve_highs

    t0 = time.monotonic()
    with np.load(path) as z:
        p = MilpProblem(**{f: z[f] for f in FIELDS})

    def report(d: dict) -> None:
        print(f"bound {d['bound']}", flush=True)

    if lp_first:
        lp = solve_highs(replace(p, integer=np.zeros(p.num_cols, bool)), time_limit=time_limit, gap=1e-9)
        if lp.detail == "Optimal" and lp.objective is not None:  # the simplex's optimum, to its tolerances
            print(f"bound {lp.objective - 1e-7 * (1.0 + abs(lp.objective))}", flush=True)
        elif lp.status == "infeasible":
            print("status infeasible", flush=True)
            return
        time_limit -= time.monotonic() - t0
        if time_limit < 0.5:
            print(f"status {lp.status}", flush=True)
            return
    r = solve_highs(p, time_limit=time_limit, gap=1e-6, progress=report, options=options)
    print(f"bound {r.bound}", flush=True)
    print(f"status {r.status}", flush=True)


if __name__ == "__main__":
    _child(
        sys.argv[1],
        float(sys.argv[2]),
        len(sys.argv) > 3 and sys.argv[3] == "True",
        json.loads(sys.argv[4]) if len(sys.argv) > 4 else None,
    )
