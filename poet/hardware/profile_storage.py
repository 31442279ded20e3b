"""Storage profiling: write and read real files, fit ``time = latency + bytes / bandwidth``.

Each sample does what the executor's paging store does with a page (``poet.execute.store``): a
write opens a new file, writes the bytes with their CRC-32, ``fsync``s and asks the OS to drop the
file from its page cache (``posix_fadvise(DONTNEED)``); a read opens it, reads it into a fresh
buffer and checks the CRC-32.  Every size is written ``repeats`` times (distinct files) before any
is read back.  So a read costs a storage read, not a copy from the page cache, where
the OS honours the advice (Linux does for local file systems; tmpfs keeps everything in RAM).

Times are busy seconds (:mod:`poet.hardware.profile_clock`): the wall clock less the time spent
waiting for a CPU after the storage answered, as the executor measures its page-ins and page-outs.

The fit minimises the *relative* error over a size sweep (1 KiB .. 64 MiB by default), so that small
pages, whose time is mostly latency, weigh as much as large ones.
"""

from __future__ import annotations

import glob
import os
import statistics
import zlib
from dataclasses import dataclass

import numpy as np

from .profile_clock import BusyTimer, RunQueueClock

KiB = 1024
FULL_SIZES = tuple(KiB * 4**i for i in range(9))  # 1 KiB .. 64 MiB
QUICK_SIZES = tuple(KiB * 4**i for i in range(4))  # 1 KiB .. 64 KiB


@dataclass(frozen=True)
class LinearFit:
    """``time = latency_s + bytes / bytes_per_s`` with its relative error over the samples it was fitted to."""

    latency_s: float
    bytes_per_s: float
    median_rel_error: float
    max_rel_error: float

    def predict(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


def fit_latency_bandwidth(sizes, seconds) -> LinearFit:
    """Least-squares fit of ``t = L + b / B`` minimising relative residuals; ``L >= 0``, ``B > 0``."""
    b = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if b.shape != t.shape or b.size < 2:
        raise ValueError("the storage fit needs at least two (bytes, seconds) samples")
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(b >= 0)):
        raise ValueError("storage samples need positive finite times and non-negative sizes")
    w = 1.0 / t
    a = np.stack([w, b * w], axis=1)  # rows: (1/t, b/t) . (L, 1/B) ~ 1
    (lat, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if lat < 0:  # no latency: fit the slope alone
        lat = 0.0
        inv_bw = float(np.dot(b * w, np.ones_like(t)) / max(np.dot(b * w, b * w), 1e-300))
    if inv_bw <= 0:  # no bandwidth term: fit the latency alone
        inv_bw = 1e-15
        lat = float(np.dot(w, np.ones_like(t)) / np.dot(w, w))
    pred = lat + b * inv_bw
    rel = np.abs(pred - t) / t
    return LinearFit(float(lat), float(1.0 / inv_bw), float(np.median(rel)), float(np.max(rel)))


@dataclass(frozen=True)
class StorageProfile:
    directory: str
    sizes: tuple[int, ...]
    write_s: tuple[float, ...]  # median per size
    read_s: tuple[float, ...]
    write: LinearFit
    read: LinearFit
    cache_dropped: bool  # posix_fadvise(DONTNEED) was available and used


def _write(path: str, data: bytes, drop: bool, clock: RunQueueClock | None = None) -> float:
    with BusyTimer(clock) as t:
        _write_file(path, data, drop)
    return t.seconds


def _read(path: str, nbytes: int, clock: RunQueueClock | None = None) -> float:
    with BusyTimer(clock) as t:
        _read_file(path, nbytes)
    return t.seconds


def _write_file(path: str, data: bytes, drop: bool) -> None:
    zlib.crc32(data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        n = 0
        while n < len(view):
            n += os.write(fd, view[n:])
        os.fsync(fd)
        if drop:
            os.posix_fadvise(fd, 0, len(data), os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read_file(path: str, nbytes: int) -> None:
    buf = bytearray(nbytes)
    with open(path, "rb", buffering=0) as f:
        os.fstat(f.fileno())
        mv = memoryview(buf)
        n = 0
        while n < nbytes:
            k = f.readinto(mv[n:])
            if not k:
                raise OSError(f"{path}: short read ({n} of {nbytes} B)")
            n += k
    zlib.crc32(buf)


def profile_storage(directory: str, sizes=FULL_SIZES, repeats: int = 3, progress=None, between=None) -> StorageProfile:
    """Measure fsync'd writes and cache-dropped reads of real files in ``directory`` and fit both.

    ``between()``, if given, is called after each size (``poet profile`` measures compute there)."""
    if not os.path.isdir(directory):
        raise OSError(f"--dir {directory}: no such directory")
    drop = hasattr(os, "posix_fadvise")
    rng = np.random.default_rng(0)
    path = os.path.join(directory, f".poet-profile-{os.getpid()}.bin")
    w_med, r_med = [], []
    clock = RunQueueClock()
    try:
        for i, size in enumerate(sizes):
            data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            reps = repeats if size <= 4 * 1024 * KiB else max(2, repeats - 1)
            # all writes first, then the reads: a page is read back after other pages were written, as
            # in a paging schedule; a read right after its own write is faster on virtual disks
            # (measured here: 0.4-1.4 ms instead of 2 ms for 64 KiB)
            paths = [f"{path}.{k}" for k in range(reps)]
            ws = [_write(p, data, drop, clock) for p in paths]
            rs = [_read(p, size, clock) for p in paths]
            for p in paths:
                os.remove(p)
            w_med.append(statistics.median(ws))
            r_med.append(statistics.median(rs))
            if progress:
                progress(
                    f"storage {i + 1}/{len(sizes)}: {size} B write {w_med[-1] * 1e3:.3f} ms, "
                    f"read {r_med[-1] * 1e3:.3f} ms"
                )
            if between is not None:
                between()
    finally:
        clock.close()
        for p in glob.glob(glob.escape(path) + ".*"):
            os.remove(p)
    return StorageProfile(
        directory=os.path.abspath(directory),
        sizes=tuple(sizes),
        write_s=tuple(w_med),
        read_s=tuple(r_med),
        write=fit_latency_bandwidth(sizes, w_med),
        read=fit_latency_bandwidth(sizes, r_med),
        cache_dropped=drop,
    )


__all__ = ["FULL_SIZES", "QUICK_SIZES", "LinearFit", "StorageProfile", "fit_latency_bandwidth", "profile_storage"]
