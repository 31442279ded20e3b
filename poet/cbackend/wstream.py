"""Host bindings of the weight-streaming linear kernels (``runtime/pk_wstream.c``), on torch tensors.

The kernels read and write a layer's parameter block (``W`` then ``b``, float32) in the weight and
gradient files through ``pk_platform.h`` (stdio files in the working folder on the host; semihosting on
``qemu-m4``), one transfer per staging-buffer chunk, and count what they move.  Built with the host's
``cc`` as a library of its own (the kernels and the host platform), cached like the kernel library.
"""

from __future__ import annotations

import ctypes

from .hostlib import CFLAGS, RUNTIME, KernelError, shared_library

_LIB: ctypes.CDLL | None = None
_F = ctypes.c_void_p


def library() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        sources = [RUNTIME / "pk_wstream.c", RUNTIME / "pk_platform_host.c"]
        headers = [RUNTIME / "pk_wstream.h", RUNTIME / "pk_platform.h"]
        _LIB = ctypes.CDLL(str(shared_library("libpkws", sources, headers, CFLAGS, "the weight-streaming kernels")))
        _LIB.pk_file_open.restype = ctypes.c_int
    return _LIB


def _ptr(t) -> int:
    if t.dtype.is_floating_point and str(t.dtype) != "torch.float32" or not t.is_contiguous():
        raise KernelError("the weight-streaming kernels take contiguous float32 tensors")
    return t.data_ptr()


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise KernelError(f"{what} returned {rc} ({'i/o error' if rc == 4 else 'bad arguments'})")


def open_file(name: str, mode: int = 2) -> int:
    """A platform file handle (mode 0 read, 1 write, 2 read-write: created if absent)."""
    f = library().pk_file_open(name.encode(), mode)
    if f < 0:
        raise KernelError(f"cannot open {name}")
    return f


def close_file(f: int) -> None:
    library().pk_file_close(f)


def linear_forward(wfile: int, offset: int, x, y, staging) -> None:
    n, i = x.shape
    o = y.shape[1]
    rc = library().pk_ws_linear_forward(
        wfile, ctypes.c_uint32(offset), n, i, o, _F(_ptr(x)), _F(_ptr(y)), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_linear_forward")


def linear_input_grad(wfile: int, offset: int, dy, dx, staging) -> None:
    n, o = dy.shape
    i = dx.shape[1]
    rc = library().pk_ws_linear_input_grad(
        wfile, ctypes.c_uint32(offset), n, i, o, _F(_ptr(dy)), _F(_ptr(dx)), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_linear_input_grad")


def linear_weight_grad(gfile: int, offset: int, x, dy, first: bool, staging) -> None:
    n, i = x.shape
    o = dy.shape[1]
    rc = library().pk_ws_linear_weight_grad(
        gfile, ctypes.c_uint32(offset), n, i, o, _F(_ptr(x)), _F(_ptr(dy)), int(first), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_linear_weight_grad")


def sgd(wfile: int, gfile: int, offset: int, nbytes: int, lr: float, staging) -> None:
    rc = library().pk_ws_sgd(
        wfile, gfile, ctypes.c_uint32(offset), ctypes.c_uint32(nbytes), ctypes.c_float(lr), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_sgd")


def _geometry(x_shape, y_shape, k: int, stride: int, pad: int, bias: bool):
    n, cin, h, w = x_shape
    _, cout, hout, wout = y_shape
    return (ctypes.c_int32 * 11)(n, cin, h, w, cout, hout, wout, k, stride, pad, int(bias))


def conv2d_forward(wfile: int, offset: int, x, y, conv: tuple, rows: tuple[int, int], staging) -> None:
    """Output rows ``rows`` of a ``conv = (cout, hout, wout, k, stride, pad, bias)`` convolution of ``x``."""
    cout, hout, wout, k, stride, pad, bias = conv
    geo = _geometry(x.shape, (x.shape[0], cout, hout, wout), k, stride, pad, bias)
    rc = library().pk_ws_conv2d_forward(
        wfile, ctypes.c_uint32(offset), geo, rows[0], rows[1], _F(_ptr(x)), _F(_ptr(y)), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_conv2d_forward")


def conv2d_input_grad(wfile: int, offset: int, dy, dx, in_shape, conv: tuple, rows, staging) -> None:
    """Input rows ``rows`` (into ``dx``) of the gradient of a convolution of an ``in_shape`` input."""
    cout, hout, wout, k, stride, pad, bias = conv
    geo = _geometry(in_shape, (in_shape[0], cout, hout, wout), k, stride, pad, bias)
    rc = library().pk_ws_conv2d_input_grad(
        wfile, ctypes.c_uint32(offset), geo, rows[0], rows[1], _F(_ptr(dy)), _F(_ptr(dx)), _F(_ptr(staging)),
        ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_conv2d_input_grad")


def conv2d_weight_grad(gfile: int, offset: int, x, dy_rows, conv: tuple, rows, first: bool, staging) -> None:
    """Add what output rows ``rows`` (``dy_rows``: those rows of the output gradient) give the weight gradient."""
    cout, hout, wout, k, stride, pad, bias = conv
    geo = _geometry(x.shape, (x.shape[0], cout, hout, wout), k, stride, pad, bias)
    rc = library().pk_ws_conv2d_weight_grad(
        gfile, ctypes.c_uint32(offset), geo, rows[0], rows[1], _F(_ptr(x)), _F(_ptr(dy_rows)), int(first),
        _F(_ptr(staging)), ctypes.c_uint32(4 * staging.numel()),
    )  # fmt: skip
    _ok(rc, "pk_ws_conv2d_weight_grad")


def counters() -> tuple[int, int, int, int]:
    """(bytes read, bytes written, reads, writes) since :func:`reset`."""
    out = (ctypes.c_uint64 * 4)()
    library().pk_ws_counters(out)
    return tuple(int(v) for v in out)


def reset() -> None:
    library().pk_ws_reset()
