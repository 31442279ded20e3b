"""The default backend: points solved side by side in a pool of local worker processes.

Workers are started with ``spawn``, not ``fork``: a parent that already ran HiGHS holds a thread
pool that a forked child would inherit half-dead (its solves then hang); fresh interpreters cost
about a second each and are always safe.  A worker that dies (killed, out of memory) breaks the
pool; its points are sent again, once, to a fresh pool.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .points import solve_point

RESENDS = 1  # a point whose worker died is sent again this many times, then recorded as an error


def worker_init(cores: int = 1):
    import signal

    from ..solve.search.pool import limit_workers

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    limit_workers(cores)  # the sweep's points run side by side: each solve gets its share of the cores


class LocalBackend:
    """``jobs`` worker processes on this machine; each solve gets ``threads`` cores (default:
    the machine's cores shared out between the jobs).  ``task``: what a worker runs for a point
    (default :func:`solve_point`; it must be importable by name, as workers are fresh interpreters)."""

    def __init__(self, jobs: int | None = None, threads: int | None = None, task=None):
        cpus = os.cpu_count() or 1
        self.jobs = max(1, jobs or cpus)
        self.cores = threads or max(1, cpus // self.jobs)
        self.task = task or solve_point
        self.pool = None
        self.futures: dict = {}  # future -> (tag, args, sends, pool)

    def describe(self) -> str:
        return f"a local pool of {self.jobs} process{'es' if self.jobs > 1 else ''}"

    def check(self) -> None:
        pass

    def start(self) -> str | None:
        return None

    def slots(self) -> int:
        return self.jobs

    def in_flight(self) -> int:
        return len(self.futures)

    def graph_arg(self, g):
        return None  # workers build the graph from the model name (and keep it)

    def _pool(self):
        if self.pool is None:
            import multiprocessing

            self.pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                initializer=worker_init,
                initargs=(self.cores,),
                mp_context=multiprocessing.get_context("spawn"),
            )
        return self.pool

    def submit(self, tag, spec_d: dict, point, graph=None, sends: int = 0) -> None:
        args = (spec_d, *point)
        pool = self._pool()
        self.futures[pool.submit(self.task, *args)] = (tag, args, sends, pool)

    def wait(self, timeout: float | None = None) -> list:
        """Finished points as ``(tag, row, schedule, error)``; empty if none finished in ``timeout``."""
        finished, _ = wait(list(self.futures), timeout=timeout, return_when=FIRST_COMPLETED)
        out = []
        broken = []
        for f in finished:
            tag, args, sends, pool = self.futures.pop(f)
            try:
                row, sched = f.result()
            except BrokenProcessPool:
                broken.append((tag, args, sends))
                if pool is self.pool:  # its other points fail too, and are sent again as they do
                    self.pool.shutdown(wait=False, cancel_futures=True)
                    self.pool = None
                continue
            out.append((tag, row, sched, None))
        if broken:
            for tag, args, sends in broken:
                if sends < RESENDS:
                    self.submit(tag, args[0], args[1:], sends=sends + 1)
                else:
                    why = (
                        f"its worker process died {sends + 1} times (killed, or out of memory?); run again "
                        f"with --retry to solve it again"
                    )
                    out.append((tag, None, None, why))
        return out

    def cancel(self) -> None:
        if self.pool is not None:
            for proc in list(getattr(self.pool, "_processes", {}).values()):
                proc.terminate()  # our own workers: stop their solves now
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        self.futures.clear()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
