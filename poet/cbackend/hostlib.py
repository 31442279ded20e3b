"""The C kernels as a host shared library, callable on torch tensors (kernel tests, host profiling).

``call("relu", [x], [y])`` builds ``runtime/kernels_*.c`` once with the host's ``cc`` (C11,
``-ffp-contract=off``, the flags of every target build) into a library cached by the sources' hash,
then calls ``pk_relu`` with each tensor passed as a strided view of its own storage, exactly as the
compiled step passes arena buffers.  No copy is made: a kernel writes into the output tensors given.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

RUNTIME = Path(__file__).parent / "runtime"
# -fno-ipa-modref: GCC 12.2 (Debian's gcc and gcc-arm-none-eabi alike) miscompiles a loop that reads a
# struct's array field after calling a non-inlined function that updates that array in a loop with a
# variable bound (the read is hoisted out of the loop); tests/test_cbackend_cflags.py holds the case.
CFLAGS = ("-std=c11", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fno-ipa-modref", "-Wall", "-Wextra", "-Werror")
MAXDIM = 8
DTYPES = {"none": 0, "float32": 1, "float64": 2, "int64": 3, "int32": 4, "bool": 5, "uint8": 6}
STATUS = {0: "ok", 1: "bad arguments", 2: "bad dtype", 3: "unsupported", 4: "i/o error", 5: "checksum mismatch"}


class KernelError(RuntimeError):
    """A kernel returned an error code, or the library could not be built."""


class PkTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("size", ctypes.c_int32 * MAXDIM),
        ("stride", ctypes.c_int32 * MAXDIM),
    ]


class PkScalar(ctypes.Union):
    _fields_ = [("f", ctypes.c_double), ("i", ctypes.c_int64)]


def kernel_sources() -> list[Path]:
    """The C files every target compiles: the kernels and what they share (not the runtime's main)."""
    return sorted(RUNTIME.glob("kernels_*.c")) + sorted(RUNTIME.glob("pk_math*.c"))


def cache_dir() -> Path:
    """Where built libraries are kept (``$POET_CACHE_DIR/cbackend``, else ``~/.cache/poet/cbackend``)."""
    base = os.environ.get("POET_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "poet")
    return Path(base) / "cbackend"


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise KernelError("no C compiler found (install one, e.g. `apt-get install gcc`, or set CC)")
    return cc


_LIB: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """The kernel library, built on first use (and again whenever a source changed)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    out = shared_library("libpk", kernel_sources(), sorted(RUNTIME.glob("*.h")), CFLAGS, "the kernel library")
    _LIB = ctypes.CDLL(str(out))
    _LIB.pk_rng_set_seed.argtypes = [ctypes.c_uint64]
    return _LIB


def set_rng_seed(seed: int) -> None:
    """The step seed dropout draws with (``pk_rng.h``).  It is the library's one piece of state, and it
    lives as long as the process: set it before a dropout call whose mask must be reproduced elsewhere
    (a probe firmware starts from 0)."""
    library().pk_rng_set_seed(ctypes.c_uint64(seed & 0xFFFFFFFFFFFFFFFF))


def content_hash(files, flags) -> str:
    """A short hash of the files' names and contents and of the flags: the key of a cached build."""
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + p.read_bytes())
    h.update(" ".join(flags).encode())
    return h.hexdigest()[:16]


def shared_library(stem: str, sources: list[Path], headers: list[Path], flags, what: str) -> Path:
    """``sources`` built with the host's ``cc`` into a shared library, once per content hash (of the
    sources, the headers and the flags) and kept in :func:`cache_dir`; :class:`KernelError` naming
    ``what`` if the build fails."""
    out = cache_dir() / f"{stem}-{content_hash(list(sources) + list(headers), flags)}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            tmp_out = Path(tmp) / out.name
            cmd = [compiler(), *flags, "-fPIC", "-shared", "-I", str(RUNTIME), *map(str, sources), "-o", str(tmp_out)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise KernelError(f"building {what} failed:\n" + r.stderr[-4000:])
            os.replace(tmp_out, out)  # atomic: a concurrent build of the same sources writes the same file
    return out


def pk_tensor(t) -> PkTensor:
    """A torch tensor (any strides, storage offset included) or None as a ``pk_tensor``."""
    pt = PkTensor()
    if t is None:
        pt.data, pt.dtype, pt.ndim = None, 0, 0
        return pt
    if t.dim() > MAXDIM:
        raise KernelError(f"tensor of {t.dim()} dimensions; kernels take at most {MAXDIM}")
    name = str(t.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise KernelError(f"dtype {t.dtype} has no C kernel type (supported: {', '.join(DTYPES)})")
    pt.data = t.data_ptr() if t.numel() else None
    pt.dtype = DTYPES[name]
    pt.ndim = t.dim()
    for d in range(t.dim()):
        pt.size[d] = t.shape[d]
        pt.stride[d] = t.stride(d)
    return pt


def call(kernel: str, inputs, outputs, scalars=()) -> None:
    """Run ``pk_<kernel>`` on torch tensors: ``outputs`` are written in place."""
    lib = library()
    fn = getattr(lib, f"pk_{kernel}", None)
    if fn is None:
        raise KernelError(f"no kernel pk_{kernel} in the library")
    ts = list(inputs) + list(outputs)
    arr = (PkTensor * max(1, len(ts)))(*[pk_tensor(t) for t in ts])
    sc = (PkScalar * max(1, len(scalars)))()
    for i, v in enumerate(scalars):
        if isinstance(v, float):
            sc[i].f = v
        else:
            sc[i].i = int(v)
    fn.restype = ctypes.c_int
    rc = fn(arr, len(ts), sc, len(scalars))
    if rc != 0:
        raise KernelError(f"pk_{kernel} returned {rc} ({STATUS.get(rc, 'unknown')})")
