"""Guide searches on several cores at once.

A guide search is pure Python, so threads would take turns on one core.  Each
search runs instead in a worker process forked from the solve, and comes back
(its state pickled, without the graph) to be resumed in a later round.  Only on
Linux, where ``fork`` is safe: a forked worker re-imports nothing, so a user's
script without a ``__main__`` guard is safe, and the graph is shared, not copied
through a pipe.  Elsewhere, on one core, or with ``threads=1``, the searches
run in turn in the solving process.  The workers run the greedy and the
validator only, never HiGHS: a forked child inherits HiGHS's thread pool
half-dead, and a solve there would hang.

The results are those of the same searches run one after another for the same
moves: a search is seeded and only its time share decides how far it gets.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ...graph.core import CostedGraph
from .guides import GuideSearch

_graph: CostedGraph | None = None  # the workers' graph, inherited through fork
_reached = None  # set once a search reaches its target: the others stop
_cap: int | None = None  # at most this many workers (see limit_workers)


def limit_workers(n: int | None) -> None:
    """At most ``n`` search workers per solve in this process (a sweep running several solves at
    once gives each its share of the cores); None: no limit."""
    global _cap
    _cap = n


def worker_count(threads: int | None) -> int:
    """Processes for the guide searches: the cores this process may use, at most ``threads``."""
    if not sys.platform.startswith("linux"):
        return 1  # macOS lists fork, but its system libraries are not safe in a forked child
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, threads or cores, _cap or cores))


def _init(g: CostedGraph, reached) -> None:
    global _graph, _reached
    _graph, _reached = g, reached
    # Ctrl-C reaches every process of the terminal's group: the solving process decides (it stops
    # the searches through `reached`), so a worker neither dies nor runs its copy of a handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_search(search: GuideSearch, time_limit: float, patience: int | None) -> GuideSearch:
    """A worker's job: resume ``search`` for ``time_limit`` seconds (or ``patience`` moves without gain)."""
    search.g = _graph
    search.run(time_limit, patience, stop=_reached.is_set)
    if search.reached:
        _reached.set()
    return search


class SearchPool:
    """Runs batches of guide searches side by side; with one worker, in this process."""

    def __init__(self, g: CostedGraph, workers: int, job=run_search):
        self.g = g
        self.job = job  # what a worker runs (a test passes one that dies)
        self.pool = None
        if workers > 1:
            # the solve's objects out of the collector's sight while the workers run: a worker's full
            # collections would otherwise walk (and copy, page by page) the whole inherited heap (two order
            # searches beside 5 million live objects: 301 moves in 20 s without, 562 with; docs/tiling.md)
            gc.freeze()
            ctx = mp.get_context("fork")
            self.reached = ctx.Event()
            self.pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(g, self.reached))
        self.workers = workers

    def run(self, jobs: list[tuple[GuideSearch, float, int | None]], stop=None) -> list[GuideSearch]:
        """Run each (search, seconds, patience) job; the searches, advanced, in the same order.
        ``stop``: polled ten times a second; once true, every search ends at its next move."""
        if self.pool is not None and len(jobs) > 1:
            try:
                futures = [self.pool.submit(self.job, s, t, p) for s, t, p in jobs]
                if stop is not None:
                    while wait(futures, timeout=0.1).not_done:
                        if stop():
                            self.reached.set()  # shared with the workers: each ends at its next move
                            break
                done = [f.result() for f in futures]
            except BrokenProcessPool:
                # a worker died (killed, out of memory): carry on in this process
                self.close()
                self.workers = 1
            else:
                for s in done:
                    s.g = self.g
                return done
        for s, t, p in jobs:  # in turn: jobs meant to run side by side share their time
            s.run(t / len(jobs), p, stop=stop)
        return [s for s, _, _ in jobs]

    def close(self) -> None:
        if self.pool is not None:
            self.reached.set()  # searches still running (the solve was interrupted) stop at their next move
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
            gc.unfreeze()

    def __enter__(self) -> SearchPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
