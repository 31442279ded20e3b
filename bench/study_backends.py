"""One study on the local process pool and on Ray: wall times (with the machine's load) and the rows.

Runs the same ``poet sweep`` study command once per backend, each into a fresh directory, records
the wall time of the whole command, the solving time from its last progress line and ``uptime``
before and after, then compares the two studies' CSV rows key by key (status and energy).
Usage (from the repository, with ray installed: pip install -e '.[cluster]')::

    python bench/study_backends.py                                  # the issue's study, local then ray
    python bench/study_backends.py --backends local,ray,ray --out /tmp/study-bench
    python bench/study_backends.py --args "--model resnet18,resnet50 --device m4,a72 --memory 25%,50%,75%,100% \
        --runtime 1.2x,2x --time-limit 30 --no-plots"
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

STUDY = "--model linear,vgg16_cifar --device m4,a72 --memory 30%..100% --steps 3 --runtime 1.2x"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def rows(out: Path) -> dict:
    got = {}
    for f in sorted(out.glob("*/sweep.csv")):
        with open(f) as fh:
            for r in csv.DictReader(fh):
                got[(f.parent.name, r["key"])] = (r["status"], r["energy_j"])
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--args", default=STUDY, help=f"the study's poet sweep arguments (default: {STUDY})")
    ap.add_argument("--backends", default="local,ray", help="comma-separated --cluster values, run in turn")
    ap.add_argument("--out", default="study-bench", help="parent directory of the runs (emptied first)")
    a = ap.parse_args()
    base = Path(a.out)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    results = []
    for i, backend in enumerate(a.backends.split(",")):
        out = base / f"{i}-{backend.replace('/', '_').replace(':', '_')}"
        cmd = [sys.executable, "-m", "poet", "sweep", *shlex.split(a.args), "--cluster", backend, "--out", str(out)]
        before = load()
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        wall = time.perf_counter() - t0
        last = [ln for ln in p.stderr.splitlines() if ln.startswith("[")][-1:] or ["(no point)"]
        solving = last[0].rpartition("elapsed ")[2].split(",")[0] if "elapsed" in last[0] else "?"
        results.append((backend, p.returncode, wall, solving, before, load(), out))
        if p.returncode:
            print(p.stderr[-2000:], file=sys.stderr)
    print("| backend | rc | wall (s) | solving | load before -> after |")
    print("|---|---|---|---|---|")
    for backend, rc, wall, solving, before, after, _ in results:
        print(f"| {backend} | {rc} | {wall:.1f} | {solving} | {before} -> {after} |")
    ref = rows(results[0][-1])
    for backend, *_, out in results[1:]:
        other = rows(out)
        diff = [k for k in ref if ref[k] != other.get(k)] + [k for k in other if k not in ref]
        print(f"{backend} vs {results[0][0]}: {len(ref)} rows, {len(diff)} differ" + (f": {diff[:5]}" if diff else ""))
    return 0 if all(r[1] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
