"""How long the ``poet`` command takes from the shell: ``--help``, ``devices``, ``validate`` and a small solve.

    python bench/cli_startup.py               # median of 7 runs each
    python bench/cli_startup.py --runs 15

Each command runs as ``python -m poet ...`` in a fresh process (this checkout first on the path,
the cache off), so the times include the interpreter's start and every import.  The target of
issue 27 is at most 0.4 s for ``--help`` on an idle 2-core machine; a loaded machine
(``uptime``) inflates every number.  It also prints the CPU time (user + system) of the median
run, which load inflates less than wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: str, env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run of ``python -m poet argv``."""
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "poet", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    if out.returncode not in (0, 2):
        raise SystemExit(f"poet {' '.join(argv)} failed ({out.returncode}):\n{out.stderr}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "POET_CACHE_DIR": str(Path(tmp) / "cache")}
        solve = [
            "solve",
            "--model",
            "linear",
            "--device",
            "m4",
            "--memory",
            "80%",
            "--runtime",
            "1.2x",
            "--quiet",
            "--no-cache",
            "--out",
            "s.json",
            "--force",
        ]
        subprocess.run([sys.executable, "-m", "poet", *solve], cwd=tmp, env=env, capture_output=True, check=True)
        commands = {
            "poet --help": ["--help"],
            "poet devices": ["devices"],
            "poet validate s.json": ["validate", "s.json"],
            "poet solve (linear/m4, 20 nodes)": solve,
        }
        print(f"median of {a.runs} runs, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
        print("| command | wall s (median) | wall s (min) | CPU s (median) |")
        print("|---|---|---|---|")
        for name, args in commands.items():
            runs = [timed(args, tmp, env) for _ in range(a.runs)]
            walls = [w for w, _ in runs]
            cpus = [c for _, c in runs]
            print(
                f"| `{name}` | {statistics.median(walls):.3f} | {min(walls):.3f} | {statistics.median(cpus):.3f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
