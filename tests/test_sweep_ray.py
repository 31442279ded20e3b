"""The Ray backend on a real local Ray (127.0.0.1, 2 CPUs, started once for this file).

Checks: a study solved on Ray writes the same rows as the local process pool; a point whose worker
dies is run again; resuming skips finished points; Ctrl-C cancels the tasks in flight and keeps the
finished points.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import time

import pytest

from poet.sweep import SweepSpec, load_sweep, run_study, run_sweep, study_from_lists
from poet.sweep.local import LocalBackend
from poet.sweep.ray_backend import RayBackend, import_ray

# before ray is first imported: a Ray started here then listens on 127.0.0.1 only (see poet.sweep.ray_backend)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
pytest.importorskip("ray", reason="the Ray backend needs the optional 'cluster' extra: pip install -e '.[cluster]'")

GRID = {
    "memory": "40%,100%",
    "runtime": "1.5x",
    "strategies": "poet,remat,paging,keep-all,capuchin",
    "time_limit": 30,
    "gap": 1e-6,
    "tile": "off",  # 40% is below linear's and vgg16_cifar's untiled minimum: auto would tile it (test_sweep_tile.py)
}


# A sweep on a Ray it starts, in a process of its own: the chen and capuchin points sleep 60 s
# (marking when they start and finish), keep-all solves at once.
CTRL_C_DRIVER = """
import os, signal, sys

# as a shell starts a command: SIGINT unblocked and at Python's default, whatever the test process
# (threads of Ray, CP-SAT, torch) hands down
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
from poet.sweep import SweepSpec, run_sweep
from poet.sweep.ray_backend import RayBackend, import_ray

marks, out = sys.argv[1], sys.argv[2]


def task(spec_d, strategy, memory, runtime, graph):
    import time

    from poet.sweep.points import solve_point

    if strategy != "keep-all":
        open(os.path.join(marks, "started-" + strategy), "w").close()
        time.sleep(60)
        open(os.path.join(marks, "finished-" + strategy), "w").close()
    return solve_point(spec_d, strategy, memory, runtime, graph)


ray = import_ray(local=True)
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
         object_store_memory=100 * 2**20)
spec = SweepSpec(model="linear", device="a72", memories=["100%"], runtimes=["1.5x"],
                 strategies=["keep-all", "chen", "capuchin"])
backend = RayBackend(jobs=2, task=task)
try:
    run_sweep(spec, out, backend=backend, stream=sys.stdout)
except KeyboardInterrupt:
    print("in flight after the Ctrl-C:", backend.in_flight(), flush=True)
    ray.shutdown()
    sys.exit(130)
ray.shutdown()
print("the sweep ended without a Ctrl-C")
"""


def test_ctrl_c_cancels_the_tasks_in_flight_and_keeps_finished_points(tmp_path):
    # first in this file, before its tests start their own Ray: the Ctrl-C goes to a process of its
    # own, as a user's does, never to the test process
    import subprocess
    import sys

    marks, out = tmp_path / "marks", tmp_path / "s"
    marks.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(CTRL_C_DRIVER)
    p = subprocess.Popen(
        [sys.executable, str(driver), str(marks), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(marks.glob("started-*")) and p.poll() is None:
            time.sleep(0.2)
        assert list(marks.glob("started-*")), "no slow point started within 120 s"
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        text, _ = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, text
    assert time.monotonic() - t0 < 45, text
    assert "interrupted:" in text and "run the same command again to resume" in text, text
    assert "in flight after the Ctrl-C: 0" in text, text
    saved = {r["key"] for r in load_sweep(out)["points"]}
    assert "keep-all|100%|1.5x" in saved and "chen|100%|1.5x" not in saved
    time.sleep(2)
    assert not list(marks.glob("finished-*"))  # the cancelled tasks did not run on
    assert not (out / ".sweep.lock").exists()


@pytest.fixture(scope="module")
def ray_local():
    """One Ray for the whole file (starting it takes seconds), on 127.0.0.1 only."""
    ray = import_ray(local=True)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        object_store_memory=100 * 2**20,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def _rows(path):
    with open(path) as f:
        return {r["key"]: r for r in csv.DictReader(f)}


def test_ray_listens_on_loopback_only(ray_local):
    nodes = [n for n in ray_local.nodes() if n["Alive"]]
    assert len(nodes) == 1 and nodes[0]["NodeManagerAddress"] == "127.0.0.1"
    assert ray_local.cluster_resources()["CPU"] == 2


def test_a_study_on_ray_writes_the_rows_of_the_local_pool(ray_local, tmp_path):
    sweeps = study_from_lists(["linear", "vgg16_cifar"], ["m4", "a72"], GRID)
    run_study(sweeps, tmp_path / "local", LocalBackend(jobs=2), progress=False)
    log = io.StringIO()
    run_study(sweeps, tmp_path / "ray", RayBackend(jobs=2), stream=log)
    assert "in flight" in log.getvalue() and "[40/40]" in log.getvalue()
    proven = 0
    for s in sweeps:
        a, b = _rows(tmp_path / "local" / s.name / "sweep.csv"), _rows(tmp_path / "ray" / s.name / "sweep.csv")
        assert a.keys() == b.keys() and len(a) == 2 * 5
        for k, r in a.items():
            assert b[k]["status"] == r["status"], (s.name, k)
            if r["status"] in ("optimal", "infeasible"):
                proven += 1
                assert (b[k]["energy_j"] == "") == (r["energy_j"] == "")
                if r["energy_j"]:
                    assert float(b[k]["energy_j"]) == pytest.approx(float(r["energy_j"]), rel=1e-5), (s.name, k)
            if b[k]["schedule_file"]:
                assert (tmp_path / "ray" / s.name / b[k]["schedule_file"]).is_file()
    assert proven >= 30


def _dies_once(marks):
    """A point task whose worker process dies on its first attempt (noted in a file per point)."""

    def task(spec_d, strategy, memory, runtime, graph):
        from poet.sweep.points import solve_point

        mark = os.path.join(marks, f"{strategy}-{memory}-{runtime}".replace("%", "pc"))
        first = not os.path.exists(mark)
        with open(mark, "a") as f:
            f.write("attempt\n")
        if first:
            os._exit(1)  # as if killed: no exception, the worker is simply gone
        return solve_point(spec_d, strategy, memory, runtime, graph)

    return task


def test_a_point_whose_worker_dies_is_run_again(ray_local, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = SweepSpec(
        model="linear", device="a72", memories=["100%", "40%"], runtimes=["1.5x"], strategies=["capuchin"], gap=1e-6
    )
    doc = run_sweep(spec, tmp_path / "s", backend=RayBackend(jobs=2, task=_dies_once(str(marks))), progress=False)
    rows = {r["key"]: r for r in doc["points"]}
    solved = [k for k, r in rows.items() if not r["reused_from"]]
    assert len(solved) == 2
    for k in solved:  # each solved point's worker died once, then the point was solved
        mark = marks / k.replace("|", "-").replace("%", "pc")
        assert mark.read_text().count("attempt") == 2, k
        assert rows[k]["status"] in ("optimal", "heuristic", "infeasible"), rows[k]
    ref = run_sweep(spec, tmp_path / "local", jobs=1, progress=False)
    assert {r["key"]: (r["status"], r["energy_j"]) for r in ref["points"]} == {
        k: (r["status"], r["energy_j"]) for k, r in rows.items()
    }


def test_resume_on_ray_skips_finished_points(ray_local, tmp_path):
    spec = SweepSpec(
        model="vgg16_cifar",
        device="m4",
        memories=["80%", "100%"],  # both proven optimal in about a second: the re-solved energies are exact
        runtimes=["1.5x"],
        strategies=["poet", "paging", "keep-all", "capuchin"],
        gap=1e-6,
    )
    out = tmp_path / "s"
    first = run_sweep(spec, out, backend=RayBackend(jobs=2), progress=False)
    d = load_sweep(out)
    keep = [r for r in d["points"] if r["strategy"] != "poet"]
    for r in keep:
        r["solve_seconds"] = 12345.0  # marks the points that must not be solved again
    d["points"] = keep
    (out / "sweep.json").write_text(json.dumps(d))
    log = io.StringIO()
    doc = run_sweep(spec, out, backend=RayBackend(jobs=2), stream=log)
    assert "resuming: 6 of 8" in log.getvalue()
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("[")]
    assert len(lines) == 2 and all(" poet " in ln for ln in lines)
    rows = {r["key"]: r for r in doc["points"]}
    assert all(rows[r["key"]]["solve_seconds"] == 12345.0 for r in keep)
    assert {r["key"]: r["energy_j"] for r in first["points"]} == {k: r["energy_j"] for k, r in rows.items()}
