"""Issue 25's check, repeated: ``poet profile --model cnn`` then ``poet train ... --device host.toml``.

Each pair runs the two commands as a user would, in fresh processes one after the other, and
reports the iteration's predicted seconds, measured busy and wall seconds and their ratios, the
per-kind busy ratios, and the load average (``/proc/loadavg``) before the profile and before the
training.  Every pair is reported, not the best one.

    python bench/fidelity_pair.py                  # 3 pairs
    python bench/fidelity_pair.py --pairs 5 --json pairs.jsonl

Unlike ``bench/fidelity.py``, which alternates profiling runs with the runs it predicts, here the
profile and the training are a minute apart: on a shared machine the prediction then also carries
the drift of the machine's speed between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ["--model", "cnn", "--memory", "60%", "--strategy", "paging", "--steps", "5", "--check", "--json"]


def poet(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "poet", *args], capture_output=True, text=True, env=env, check=False)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def one_pair(workdir: str, i: int) -> dict:
    prof = os.path.join(workdir, f"host{i}.toml")
    load_profile, t0 = load(), time.strftime("%H:%M:%S", time.gmtime())
    p = poet(["profile", "--model", "cnn", "--out", prof, "--force", "--quiet"])
    if p.returncode:
        raise SystemExit(f"poet profile failed: {p.stderr.strip()}")
    load_train = load()
    t = poet(["train", *TRAIN, "--device", prof])
    if t.returncode:
        raise SystemExit(f"poet train failed: {t.stderr.strip()}")
    rep = json.loads(t.stdout)
    it = rep["per_iteration"]
    return {
        "pair": i,
        "start_utc": t0,
        "load_profile": load_profile,
        "load_train": load_train,
        "predicted_s": it["predicted_s"],
        "busy_s": it["busy_s"],
        "wall_s": it["measured_s"],
        "busy_ratio": it["busy_ratio"],
        "wall_ratio": it["ratio"],
        "kinds": {k["kind"]: k["busy_ratio"] for k in rep["per_kind"] if k["busy_ratio"] is not None},
        "step_busy_s": rep.get("step_busy_seconds", []),
        "check": rep.get("check"),
        "peak_exact": rep["measured_peak_bytes"] == rep["predicted_peak_bytes"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--json", default=None, help="append one JSON line per pair here")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(1, a.pairs + 1):
            r = one_pair(d, i)
            rows.append(r)
            print(
                f"pair {i} {r['start_utc']} UTC, load {r['load_profile']} / {r['load_train']}: predicted "
                f"{r['predicted_s'] * 1e3:.2f} ms, busy {r['busy_s'] * 1e3:.2f} ms (x{r['busy_ratio']:.3f}), wall "
                f"{r['wall_s'] * 1e3:.2f} ms (x{r['wall_ratio']:.3f}); busy/pred per kind "
                + ", ".join(f"{k} {v:.2f}" for k, v in r["kinds"].items())
                + f"; steps busy ms {[round(x * 1e3, 1) for x in r['step_busy_s']]}"
                + f"; peak exact {r['peak_exact']}; check {r['check']}",
                flush=True,
            )
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    within = sum(abs(r["busy_ratio"] - 1) <= 0.15 for r in rows)
    print(f"busy time within 15% of the prediction: {within}/{len(rows)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
