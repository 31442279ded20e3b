"""Tests that need a system toolchain: skipped, with the reason, on a machine without it; failed in
CI (``CI=true``), where ``.ci/run`` installs it, so a broken installation is never a silent skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def require(missing: str | None) -> None:
    """Skip (or, in CI, fail) the calling test when ``missing`` (a target's ``missing()``) says so."""
    if missing is None:
        return
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"CI must provide the toolchain (see .ci/run): {missing}")
    pytest.skip(missing)


def require_cc() -> None:
    """The host's C compiler (the host target and the kernel library)."""
    from poet.cbackend import hostlib

    try:
        hostlib.compiler()
    except hostlib.KernelError as e:
        require(str(e))


def require_qemu_m4() -> None:
    """The qemu-m4 target's toolchain (arm-none-eabi-gcc, newlib, qemu-system-arm) and the host's cc."""
    from poet.cbackend import hostlib, qemu_m4

    require(qemu_m4.missing())
    try:
        hostlib.compiler()
    except hostlib.KernelError as e:
        require(str(e))


@pytest.fixture(scope="session")
def build_cache_dir(tmp_path_factory):
    """One cache of built kernel libraries and plugins for the whole test session, shared by the
    xdist workers (each test otherwise gets an empty POET_CACHE_DIR from conftest, and would compile
    every kernel again).  Builds land in it atomically under content-hashed names, so workers that
    build the same library at once only duplicate work; the user's own cache is never touched."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    path = base / "cbackend-build-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def qemu_m4_ready(build_cache_dir, monkeypatch):
    """The qemu-m4 toolchain is there (else skip, or fail in CI), and builds share the session's cache."""
    require_qemu_m4()
    monkeypatch.setenv("POET_CACHE_DIR", str(build_cache_dir))


def _link_kernel_libraries(shared: Path, m4: bool) -> None:
    """Build (once for the session, in ``shared``) the kernel libraries a compile links, and link them
    into this test's own cache: its solves and instruction measurements stay private."""
    from poet.cbackend import hostlib, icount, qemu_m4, targets

    own = hostlib.cache_dir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POET_CACHE_DIR", str(shared))
        try:
            hostlib.compiler()
            libs = [targets.host_kernel_library()]
        except hostlib.KernelError:
            libs = []  # no cc: the test skips (or fails in CI) on its own
        if m4 and qemu_m4.missing() is None:
            libs += [qemu_m4.kernel_library(), icount.plugin()]
    own.mkdir(parents=True, exist_ok=True)
    for lib in filter(None, libs):
        if not (own / lib.name).exists():
            (own / lib.name).symlink_to(lib)


@pytest.fixture
def shared_host_kernels(build_cache_dir):
    """The host's kernel library built once for the session, not once per compiling test (every kernel,
    about half a minute on a loaded core); the build itself is still run, by the first test."""
    _link_kernel_libraries(build_cache_dir, m4=False)


@pytest.fixture
def shared_kernels(build_cache_dir):
    """:func:`shared_host_kernels`, the Cortex-M4 kernel library and the instruction-count plugin (when
    the qemu-m4 toolchain is there)."""
    _link_kernel_libraries(build_cache_dir, m4=True)
