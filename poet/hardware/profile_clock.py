"""Busy time: wall-clock seconds minus the time the thread waited for a CPU behind other processes.

On a shared machine a process that sleeps (on storage, say) queues behind the others for a CPU when
it wakes; the wall clock counts that wait, which says more about the other processes than about
this machine.  Linux reports each thread's run-queue wait in ``/proc/thread-self/schedstat`` (second
field, nanoseconds); elsewhere the wait reads as 0, so busy time equals wall time.  Profiles
(``poet profile``) and the executor both measure busy time, so their figures compare.
"""

from __future__ import annotations

import os
import time


class RunQueueClock:
    """Seconds the calling thread has waited in the run queue for a CPU (Linux schedstat), else 0.

    Open it in the thread whose waits it should count: ``/proc/thread-self`` names the opener.
    """

    def __init__(self):
        self.fd = None
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            self.waited()
        except (OSError, ValueError, IndexError):
            self.close()

    @property
    def available(self) -> bool:
        return self.fd is not None

    def waited(self) -> float:
        if self.fd is None:
            return 0.0
        return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class BusyTimer:
    """``with BusyTimer() as t: ...`` then ``t.seconds`` (busy) and ``t.wall``."""

    def __init__(self, clock: RunQueueClock | None = None):
        self.clock = clock
        self.seconds = self.wall = 0.0

    def __enter__(self):
        self._own = self.clock is None
        if self._own:
            self.clock = RunQueueClock()
        self._q0 = self.clock.waited()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._t0
        self.seconds = max(0.0, self.wall - (self.clock.waited() - self._q0))
        if self._own:
            self.clock.close()
            self.clock = None


__all__ = ["BusyTimer", "RunQueueClock"]
