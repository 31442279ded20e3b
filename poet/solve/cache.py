"""Solved problems kept on disk, so asking the same question twice costs one validation, not a solve.

An entry is keyed by everything the answer depends on: the costed graph (every node's bytes and
costs, every edge), the budget, the strategy, the method, the backend, the gap, whether the
smallest feasible budgets are wanted, and a fingerprint of POET's own source (any change to the
code starts afresh).  Threads and progress do not enter the key.

What is reused, and when:

* an ``optimal`` or ``infeasible`` answer is proven, so it is reused whatever the time limit;
* a ``feasible`` answer is only as good as the search that found it, so it is reused only for
  a time limit no longer than the one it was found with (no limit counts as the longest).

Nothing read from an entry is trusted (anyone can edit the files).  Its steps are replayed by the
validator against the graph and budget being asked about, and its status, gap and bound are not
read but re-derived: from the replayed energy, the plain energy (every node is computed once) and,
for the MILP strategies, the eviction cover's bound recomputed on reuse (at most 10 s; on the zoo
it is the bound the solve reported).  An answer is reused as ``optimal`` only when that re-proves
it, as ``infeasible`` only when the cover re-proves that no eviction set fits, as ``feasible``
with the re-derived gap; anything else is a miss, solved again and replaced: a claim that cannot be
re-checked silently, an entry that does not parse, replay or agree with a bound with a note naming it.
Answers without a schedule that nothing could re-check (``no_solution``, a baseline's
``infeasible``) are not stored.  A verbose solve (asked for the solver's log) always runs, and
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
import time
from pathlib import Path

from ..fileio import atomic_write_text, json_text, parse_json, read_text
from ..graph.io import graph_to_dict
from ..schedule.compact import check_compact, decode_steps, encode_steps, is_compact
from ..schedule.core import (
    FEASIBLE,
    HEURISTIC,
    INFEASIBLE,
    NO_SOLUTION,
    OPTIMAL,
    STATUSES,
    Budget,
    Schedule,
    Step,
)
from ..schedule.io import COMPACT_MIN_STEPS, steps_to_dicts
from ..schedule.report import CacheHit, SolveReport
from ..schedule.validate import ScheduleError, validate
from ..units import BudgetError

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
        "format": CACHE_FORMAT,
        "code": code_fingerprint(),
        "graph": graph_to_dict(g),
        "budget": [budget.ram_bytes, budget.runtime_s, budget.paging_time],
        "strategy": strategy,
        "method": opts.method,
        "backend": opts.backend,
        "gap": opts.gap,
        "find_min_budgets": opts.find_min_budgets,
        "tiled": opts.tiled,  # the rules for tiled graphs apply: a graph file of the same nodes is another question
    }
    return json_sha256(spec)


def json_sha256(value, depth: int = 3) -> str:
    """``sha256(json.dumps(value, sort_keys=True))`` in hex, computed without the whole text."""
    h = hashlib.sha256()
    _hash_json(h, value, depth)
    return h.hexdigest()


def _hash_json(h, value, depth: int) -> None:
    """Feed ``h`` the bytes of ``json.dumps(value, sort_keys=True)``, dicts of string keys ``depth`` levels
    down one entry at a time: the same key as hashing the whole text, without the whole text (on the
    1.3-million-node bert at 32 KiB that text took 75 s and 3 GB; one column at a time is tens of MB)."""
    if depth > 0 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        h.update(b"{")
        for i, k in enumerate(sorted(value)):
            h.update((", " if i else "").encode() + json.dumps(k).encode() + b": ")
            _hash_json(h, value[k], depth - 1)
        h.update(b"}")
    else:
        h.update(json.dumps(value, sort_keys=True).encode())


def _limit(x) -> float:
    return math.inf if x is None else float(x)


def entry_path(g, budget: Budget, strategy: str, opts) -> Path:
    """Where this solve's answer is kept (the key serializes the whole graph: compute it once).

    Checks ``$POET_CACHE_MAX_MB`` first, so a bad value is refused before any solving."""
    max_bytes()
    return cache_dir() / f"{problem_key(g, budget, strategy, opts)}.json"


class _Unusable(Exception):
    """An entry that cannot be used: the message says why (it is solved again, with a note)."""


class _Unverifiable(_Unusable):
    """A well-formed entry whose claim cannot be re-checked without solving (an optimum the cover does not
    reach, an infeasibility only the MILP proved): solved again without a note, as that is no damage."""


# strategy -> (remat, paging): the MILP strategies, whose bound the eviction cover re-checks
_COVERED = {"poet": (True, True), "remat": (True, False), "paging": (False, True)}
# the eviction cover's time when an answer is re-checked
RECHECK_SECONDS = 10.0


def _steps(raw) -> tuple[Step, ...]:
    if is_compact(raw):
        try:
            check_compact(raw, "the entry")
        except ScheduleError as e:
            raise _Unusable(str(e)) from None
        return tuple(decode_steps(raw))
    if not isinstance(raw, list):
        raise _Unusable("its steps are not a list")
    steps = []
    for st in raw:
        if not (
            isinstance(st, dict)
            and isinstance(st.get("op"), str)
            and isinstance(st.get("node"), int)
            and not isinstance(st.get("node"), bool)
        ):
            raise _Unusable('a step is not {"op", "node"}')
        steps.append(Step(st["op"], st["node"], st.get("stage")))
    return tuple(steps)


def _recheck(g, budget: Budget, strategy: str, opts, claimed: str, steps, totals) -> tuple[str, dict]:
    """The status and bound facts the cached answer has once re-derived from what can be checked now:
    the replayed steps, the plain energy (every node is computed once), and the eviction cover's
    bound recomputed for the MILP strategies.  Nothing the entry says about bounds or proofs is used."""
    cover = None
    if strategy in _COVERED and claimed in (OPTIMAL, FEASIBLE, INFEASIBLE):
        from .bounds import lower_bound_energy

        remat, paging = _COVERED[strategy]
        # at least a second: a cover cut off before its root LP bounds nothing
        limit = RECHECK_SECONDS if opts.time_limit_s is None else min(RECHECK_SECONDS, max(1.0, opts.time_limit_s))
        cover = lower_bound_energy(g, budget, remat=remat, paging=paging, time_limit=limit)
    if not steps:
        if claimed == INFEASIBLE and cover is not None and cover == math.inf:
            return INFEASIBLE, {
                "recheck": "infeasible: re-proven on reuse (no eviction set meets the budgets); "
                "any smallest feasible budgets are the earlier solve's"
            }
        raise _Unverifiable(f"its answer ({claimed}, no schedule) cannot be re-checked without solving")
    if claimed in (INFEASIBLE, NO_SOLUTION):
        raise _Unusable(f"it says {claimed} next to a schedule that replays")
    if claimed == HEURISTIC:
        return HEURISTIC, {"recheck": "heuristic: the schedule was replayed on reuse (no optimality claim)"}
    energy = totals.energy_j
    bound = g.plain_energy_j
    if cover is not None and math.isfinite(cover):
        bound = max(bound, cover)
    if bound > energy * (1 + 1e-9):
        raise _Unusable("its schedule costs less than a proven lower bound: the entry is not what it seems")
    gap = max(0.0, (energy - bound) / max(energy, 1e-300))
    facts = {"gap": gap, "bound_energy_j": bound, "objective_energy_j": energy}
    if gap <= opts.gap * (1 + 1e-9) + 1e-12:
        return OPTIMAL, {
            **facts,
            "recheck": "optimal: re-proven on reuse against the plain energy and the eviction cover's bound",
        }
    if claimed == OPTIMAL:
        raise _Unverifiable(
            f"its claim of optimality could not be re-checked (the bound re-checked now leaves a gap of {gap:.2%})"
        )
    return FEASIBLE, {
        **facts,
        "recheck": "feasible: gap re-derived on reuse from the plain energy and the eviction cover's bound",
    }


def lookup(path: Path, g, budget: Budget, strategy: str, opts, notes: list | None = None) -> Schedule | None:
    """The answer kept at ``path`` (see `entry_path`), replayed by the validator and re-checked, or None.

    Nothing in the entry is trusted: the steps are replayed against the problem asked, and the status,
    gap and bound are re-derived from the replay and from bounds recomputed now (`_recheck`).  An entry
    that cannot be read, replayed or re-checked is a miss; why goes into ``notes``.
    """
    if not path.is_file():
        return None
    try:
        d = parse_json(read_text(path, "cache entry", _Unusable), str(path), _Unusable)
    except _Unusable as e:  # the message names the file
        if notes is not None:
            notes.append(f"ignored the unreadable cache entry: {e}; solved again")
        return None
    try:
        if not isinstance(d, dict) or d.get("format") != CACHE_FORMAT:
            raise _Unusable(f"it is not a {CACHE_FORMAT} entry")
        claimed = d.get("status")
        if not isinstance(claimed, str) or claimed not in STATUSES:
            raise _Unusable("its status is not one POET writes")
        if claimed not in PROVEN and _limit(opts.time_limit_s) > _limit(_seconds(d.get("time_limit_s"))):
            return None  # the caller allows a longer search than the one cached
        steps = _steps(d.get("steps"))
        try:
            totals = validate(g, steps, budget) if steps else None  # checks ops and node ids too
        except ScheduleError as e:
            raise _Unusable(f"its schedule does not replay ({e})") from None
        status, facts = _recheck(g, budget, strategy, opts, claimed, steps, totals)
        solver = d.get("solver") if isinstance(d.get("solver"), dict) else {}
        json_text(solver, "the cached solver facts", indent=None)  # finite numbers only
    except _Unverifiable:
        return None
    except _Unusable as e:
        if notes is not None:
            notes.append(f"ignored the cache entry {path}: {e}; solved again")
        return None
    except Exception as e:
        if notes is not None:
            notes.append(f"ignored the unreadable cache entry {path} ({type(e).__name__}); solved again")
        return None
    report = SolveReport.from_dict(solver)
    try:
        os.utime(path)  # recently used: pruned last
    except OSError:
        pass
    # the re-derived facts replace the entry's (the cover's bound is not carried over: it was its word)
    report = report.with_(
        gap=facts.get("gap"),
        bound_energy_j=facts.get("bound_energy_j"),
        energy_j=facts.get("objective_energy_j"),
        structural_bound_energy_j=None,
        cache=CacheHit(
            str(path),
            str(d.get("solved_at"))[:40],
            _seconds(report.solve_seconds),
            _seconds(d.get("time_limit_s")),
            facts["recheck"],
        ),
    )
    return Schedule(graph=g, budget=budget, steps=steps, status=status, strategy=strategy, totals=totals, report=report)


def _seconds(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 else None


def store(path: Path, s: Schedule, opts) -> str | None:
    """Write ``s`` at ``path`` (see `entry_path`); returns why it could not be written, or None."""
    directory = path.parent
    if not s.steps and not (s.status == INFEASIBLE and s.strategy in _COVERED):
        return None  # no schedule and nothing a later lookup could re-check: kept nowhere
    entry = {
        "format": CACHE_FORMAT,
        "status": s.status,
        "strategy": s.strategy,
        "time_limit_s": opts.time_limit_s,
        "solved_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "steps": encode_steps(s.steps) if len(s.steps) >= COMPACT_MIN_STEPS else steps_to_dicts(s.steps),
        "solver": s.report.to_dict(),
    }
    try:
        text = json.dumps(entry, allow_nan=False)
    except (TypeError, ValueError) as e:
        return f"the solver's facts are not JSON ({e})"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as e:
        return f"cannot write the cache in {directory}: {e.strerror or e}"
    return prune(directory, keep=path)


def max_bytes() -> float:
    """The entries' size cap in bytes, from ``$POET_CACHE_MAX_MB`` (unset or empty: 256 MB).

    A value that is not a finite number >= 0 is refused (BudgetError naming the variable), never
    acted on: read as 0 it would delete every other entry."""
    text = os.environ.get(MAX_MB_ENV, "").strip()
    if not text:
        return MAX_MB_DEFAULT * 1e6
    try:
        mb = float(text)
    except ValueError:
        mb = math.nan
    if not (math.isfinite(mb) and mb >= 0):
        raise BudgetError(
            f"{MAX_MB_ENV}={text[:40]!r} is not a size in megabytes; set it to a number >= 0 "
            f"like {MAX_MB_DEFAULT:g}, or unset it for the default ({MAX_MB_DEFAULT:g} MB)"
        )
    return mb * 1e6


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
