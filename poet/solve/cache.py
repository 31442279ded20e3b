"""Solved problems kept on disk, so asking the same question twice costs one validation, not a solve.

An entry is keyed by everything the answer depends on: the costed graph (every node's bytes and
costs, every edge), the budget, the strategy, the method, the backend, the gap, whether the
smallest feasible budgets are wanted, and a fingerprint of POET's own source (any change to the
code starts afresh).  Threads and progress do not enter the key.

What is reused, and when:

* an ``optimal`` or ``infeasible`` answer is proven, so it is reused whatever the time limit;
* any other answer (``feasible``, ``no_solution``) is only as good as the search that found it,
  so it is reused only for a time limit no longer than the one it was found with (no limit
  counts as the longest).

A cached schedule is never trusted: its steps are replayed by the validator against the graph
and budget being asked about, and an entry that does not replay (or does not parse) is ignored
and replaced by a fresh solve.  A verbose solve (asked for the solver's log) always runs, and
its answer replaces the entry.  The cache lives in ``$POET_CACHE_DIR``, else
``$XDG_CACHE_HOME/poet/schedules``, else ``~/.cache/poet/schedules``; deleting it is always safe.
Its entries take at most ``$POET_CACHE_MAX_MB`` megabytes (256 by default): past that, the least
recently used go first.  Only files named like an entry are ever removed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from ..graph.io import graph_to_dict
from ..schedule.core import INFEASIBLE, OPTIMAL, STATUSES, Budget, Schedule, Step
from ..schedule.io import steps_to_dicts
from ..schedule.validate import ScheduleError, validate

CACHE_FORMAT = "poet-cache/1"
CACHE_ENV = "POET_CACHE_DIR"
MAX_MB_ENV = "POET_CACHE_MAX_MB"
MAX_MB_DEFAULT = 256.0
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.json")
PROVEN = (OPTIMAL, INFEASIBLE)


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "poet" / "schedules"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def problem_key(g, budget: Budget, strategy: str, opts) -> str:
    spec = {
        "format": CACHE_FORMAT, "code": code_fingerprint(), "graph": graph_to_dict(g),
        "budget": [budget.ram_bytes, budget.runtime_s, budget.paging_time],
        "strategy": strategy, "method": opts.method, "backend": opts.backend, "gap": opts.gap,
        "find_min_budgets": opts.find_min_budgets,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _limit(x) -> float:
    return math.inf if x is None else float(x)


def entry_path(g, budget: Budget, strategy: str, opts) -> Path:
    """Where this solve's answer is kept (the key serializes the whole graph: compute it once)."""
    return cache_dir() / f"{problem_key(g, budget, strategy, opts)}.json"


def lookup(path: Path, g, budget: Budget, strategy: str, opts) -> Schedule | None:
    """The answer kept at ``path`` (see `entry_path`), replayed by the validator, or None."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    try:
        status = d["status"]
        if d.get("format") != CACHE_FORMAT or status not in STATUSES:
            return None
        if status not in PROVEN and _limit(opts.time_limit_s) > _limit(d.get("time_limit_s")):
            return None     # the caller allows a longer search than the one cached
        steps = tuple(Step(s["op"], s["node"], s.get("stage")) for s in d["steps"])
        totals = validate(g, steps, budget) if steps else None     # checks ops and node ids too
        solver = dict(d["solver"])
    except (KeyError, TypeError, ValueError, ScheduleError):
        return None      # damaged, or not a valid schedule of this problem: solve afresh
    try:
        os.utime(path)   # recently used: pruned last
    except OSError:
        pass
    solver["cache"] = {"file": str(path), "solved_at": d.get("solved_at"),
                       "solve_seconds": solver.get("solve_seconds"), "time_limit_s": d.get("time_limit_s")}
    return Schedule(graph=g, budget=budget, steps=steps, status=status, strategy=strategy, totals=totals,
                    solver=solver)


def store(path: Path, s: Schedule, opts) -> str | None:
    """Write ``s`` at ``path`` (see `entry_path`); returns why it could not be written, or None."""
    directory = path.parent
    entry = {
        "format": CACHE_FORMAT, "status": s.status, "strategy": s.strategy, "time_limit_s": opts.time_limit_s,
        "solved_at": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": steps_to_dicts(s.steps), "solver": s.solver,
    }
    try:
        text = json.dumps(entry)
    except (TypeError, ValueError) as e:
        return f"the solver's facts are not JSON ({e})"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    except OSError as e:
        return f"cannot write the cache in {directory}: {e.strerror or e}"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        return f"cannot write the cache in {directory}: {e.strerror or e}"
    return prune(directory, keep=path)


def max_bytes() -> float:
    try:
        mb = float(os.environ.get(MAX_MB_ENV) or MAX_MB_DEFAULT)
    except ValueError:
        mb = MAX_MB_DEFAULT
    return max(mb, 0.0) * 1e6


def prune(directory: Path, keep: Path | None = None) -> str | None:
    """Remove the least recently used entries until the rest fit `max_bytes` (``keep`` stays);
    returns why it could not, or None."""
    try:
        entries = []
        for f in directory.iterdir():
            if _ENTRY_NAME.fullmatch(f.name) and f != keep:
                st = f.stat()
                entries.append((st.st_mtime, st.st_size, f))
        total = sum(size for _, size, _ in entries) + (keep.stat().st_size if keep is not None else 0)
    except OSError as e:
        return f"cannot prune the cache in {directory}: {e.strerror or e}"
    cap = max_bytes()
    for _, size, f in sorted(entries):
        if total <= cap:
            break
        try:
            f.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            return f"cannot prune the cache in {directory}: {e.strerror or e}"
        total -= size
    return None
