"""Paging store: tensors written to real files on storage and read back verified.

Two layouts:

* ``directory`` (default): one file per paged-out node version in a directory
  (a fresh temporary directory, removed afterwards, unless you name one);
* ``swap_file``: one swap file; pages are appended (or rewritten in place when
  the same node is paged out again with the same size).

Every page records its size and a CRC-32 of its bytes; ``read`` checks both
and raises :class:`PagingError` on a short or corrupt page.  Every write error
(missing or unwritable directory, disk full, ...) is raised as
:class:`PagingError` naming the file and the OS reason.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass

import torch


class PagingError(RuntimeError):
    """A page could not be written or read back intact."""


@dataclass
class _Chunk:
    offset: int  # byte offset in the file
    nbytes: int
    crc: int


@dataclass
class _Page:
    path: str
    chunks: list  # one per unique storage
    tensors: list  # (chunk index, dtype, storage_offset, size, stride) per tensor
    structure: object  # how to rebuild the value (see _flatten)


def _u8_view(storage) -> torch.Tensor:
    n = storage.nbytes()
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (n,), (1,))


def _flatten(value, tensors: list):
    """Replace tensors in a (nested) tuple/list by their position in ``tensors``."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ("t", len(tensors) - 1)
    if isinstance(value, (tuple, list)):
        return ("tuple" if isinstance(value, tuple) else "list", [_flatten(x, tensors) for x in value])
    return ("const", value)


def _unflatten(struct, tensors: list):
    tag, x = struct
    if tag == "t":
        return tensors[x]
    if tag in ("tuple", "list"):
        items = [_unflatten(s, tensors) for s in x]
        return tuple(items) if tag == "tuple" else items
    return x


class PagingStore:
    """Writes node values to storage and reads them back (``write``/``read``/``close``)."""

    def __init__(self, directory=None, *, swap_file=None, fsync: bool = False, drop_cache: bool = False):
        self.fsync = fsync
        # after an fsync'd write, ask the OS to drop the page from its cache, so that reading it back
        # costs a storage read as `poet profile` measured it (posix_fadvise DONTNEED, where available)
        self.drop_cache = drop_cache and fsync and hasattr(os, "posix_fadvise")
        self.bytes_written = 0
        self.bytes_read = 0
        self._pages: dict = {}
        self._own_dir = False
        self._swap = None
        self._swap_end = 0
        self._created_files: list[str] = []
        self._counter = 0
        if swap_file is not None:
            path = os.fspath(swap_file)
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise PagingError(f"cannot create swap file {path}: directory {parent} does not exist")
            existed = os.path.exists(path)
            try:
                self._swap = open(path, "r+b" if existed else "w+b", buffering=0)
            except OSError as e:
                raise PagingError(f"cannot open swap file {path}: {e.strerror or e}") from e
            self._swap_path = path
            self._swap_created = not existed
            self.directory = parent
            self.location = path
        else:
            if directory is None:
                self.directory = tempfile.mkdtemp(prefix="poet-pages-")
                self._own_dir = True
            else:
                self.directory = os.fspath(directory)
                if not os.path.exists(self.directory):
                    raise PagingError(f"paging directory {self.directory} does not exist")
                if not os.path.isdir(self.directory):
                    raise PagingError(f"paging directory {self.directory} is not a directory")
            self.location = self.directory
            self._probe()

    # ------------------------------------------------------------------ files
    def _probe(self) -> None:
        """Fail before any compute if the directory does not take a file."""
        path = os.path.join(self.directory, f".poet-probe-{os.getpid()}-{id(self)}")
        try:
            with open(path, "wb") as f:
                f.write(b"\0")
        except OSError as e:
            raise PagingError(f"cannot write to paging directory {self.directory}: {e.strerror or e}") from e
        finally:
            try:
                os.remove(path)
            except OSError:
                pass

    def write(self, key, value) -> int:
        """Page ``value`` (a tensor or tuple of tensors) out under ``key``; return bytes written."""
        tensors: list = []
        struct = _flatten(value, tensors)
        storages: list = []
        index: dict = {}
        meta = []
        for t in tensors:
            st = t.untyped_storage()
            k = st._cdata
            if k not in index:
                index[k] = len(storages)
                storages.append(st)
            meta.append((index[k], t.dtype, t.storage_offset(), tuple(t.size()), tuple(t.stride())))
        old = self._pages.get(key)
        sizes = [st.nbytes() for st in storages]
        if self._swap is not None:
            if old is not None and [c.nbytes for c in old.chunks] == sizes:
                start = old.chunks[0].offset if old.chunks else self._swap_end
            else:
                start = self._swap_end
            path = self._swap_path
        else:
            self._counter += 1
            path = os.path.join(self.directory, f"poet-page-{key}-{self._counter}.bin")
            start = 0
        chunks = []
        written = 0
        try:
            if self._swap is not None:
                f = self._swap
                f.seek(start)
            else:
                f = open(path, "wb", buffering=0)
                self._created_files.append(path)
            try:
                off = start
                for st in storages:
                    buf = memoryview(_u8_view(st).numpy())
                    crc = zlib.crc32(buf)
                    n = 0
                    while n < len(buf):
                        k = f.write(buf[n:])
                        if not k:
                            raise OSError(errno.ENOSPC, "short write (storage full?)")
                        n += k
                    chunks.append(_Chunk(off, len(buf), crc))
                    off += len(buf)
                    written += len(buf)
                if self.fsync:
                    os.fsync(f.fileno())
                if self.drop_cache:
                    os.posix_fadvise(f.fileno(), start, written, os.POSIX_FADV_DONTNEED)
            finally:
                if self._swap is None:
                    f.close()
        except OSError as e:
            reason = e.strerror or str(e)
            if self._swap is None:
                self._remove(path)
            raise PagingError(
                f"cannot write page of {key} ({sum(sizes)} B) to {path}: {reason}"
                + (f" [errno {errno.errorcode.get(e.errno, e.errno)}]" if e.errno else "")
            ) from e
        if self._swap is not None:
            self._swap_end = max(self._swap_end, start + written)
        elif old is not None:
            self._remove(old.path)
        self._pages[key] = _Page(path, chunks, meta, struct)
        self.bytes_written += written
        return written

    def read(self, key):
        """The value paged out under ``key``, verified (size and CRC-32) against what was written."""
        page = self._pages.get(key)
        if page is None:
            raise PagingError(f"nothing was paged out under {key}")
        storages = []
        try:
            f = self._swap if self._swap is not None else open(page.path, "rb", buffering=0)
            try:
                if self._swap is None:
                    size = os.fstat(f.fileno()).st_size
                    need = sum(c.nbytes for c in page.chunks)
                    if size != need:
                        raise PagingError(f"page of {key} in {page.path} has {size} B, expected {need} B")
                for c in page.chunks:
                    buf = torch.empty(c.nbytes, dtype=torch.uint8)
                    mv = memoryview(buf.numpy())
                    f.seek(c.offset)
                    n = 0
                    while n < c.nbytes:
                        k = f.readinto(mv[n:])
                        if not k:
                            break
                        n += k
                    if n != c.nbytes:
                        raise PagingError(f"page of {key} in {page.path}: read {n} B, expected {c.nbytes} B")
                    crc = zlib.crc32(mv)
                    if crc != c.crc:
                        raise PagingError(
                            f"page of {key} in {page.path} is corrupt: CRC-32 {crc:08x}, expected {c.crc:08x}"
                        )
                    storages.append(buf.untyped_storage())
                    self.bytes_read += c.nbytes
            finally:
                if self._swap is None:
                    f.close()
        except OSError as e:
            raise PagingError(f"cannot read page of {key} from {page.path}: {e.strerror or e}") from e
        tensors = [
            torch.empty(0, dtype=dt).set_(storages[ci], off, size, stride) for ci, dt, off, size, stride in page.tensors
        ]
        return _unflatten(page.structure, tensors)

    def page_bytes(self, key) -> int:
        page = self._pages.get(key)
        return sum(c.nbytes for c in page.chunks) if page else 0

    # --------------------------------------------------------------- cleanup
    @staticmethod
    def _remove(path) -> None:
        try:
            os.remove(path)
        except OSError:
            pass

    def close(self) -> None:
        """Delete every page (and the temporary directory / swap file this store created)."""
        if self._swap is not None:
            try:
                self._swap.close()
            except OSError:
                pass
            if self._swap_created and os.path.isfile(self._swap_path):
                self._remove(self._swap_path)
            self._swap = None
        for p in self._created_files:
            self._remove(p)
        self._created_files.clear()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
            self._own_dir = False
        self._pages.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
