"""Hygiene that CI enforces: ruff's lint and format check pass, and every third-party import is declared."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff() -> list[str] | None:
    exe = shutil.which("ruff", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if exe:
        return [exe]
    try:
        import ruff as _ruff  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ruff"]


def test_ruff_check_passes():
    cmd = ruff()
    if cmd is None:
        pytest.skip("ruff is not installed (it is in the `test` extra: pip install -e '.[test]')")
    out = subprocess.run(
        [*cmd, "check", "poet", "tests", "bench", "examples"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_check_passes():
    cmd = ruff()
    if cmd is None:
        pytest.skip("ruff is not installed (it is in the `test` extra: pip install -e '.[test]')")
    out = subprocess.run(
        [*cmd, "format", "--check", "poet", "tests", "bench", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, "run `ruff format poet tests bench examples`:\n" + out.stdout + out.stderr


def test_every_third_party_import_is_declared():
    # the shared checker lives beside the repository (../shared/tools); POET_CHECK_DEPS names it elsewhere
    where = os.environ.get("POET_CHECK_DEPS") or str(ROOT.parent / "shared" / "tools" / "check_deps.py")
    if not Path(where).is_file():
        pytest.skip(f"no dependency checker at {where} (set POET_CHECK_DEPS to its path to run it)")
    out = subprocess.run([sys.executable, where, "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
