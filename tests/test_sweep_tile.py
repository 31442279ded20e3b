"""``poet sweep --tile``: auto tiles the points below the untiled minimum, off never, N every point.

A tiny zoo model (``linear``: 20 nodes, untiled minimum 1536 B on m4) and an in-process backend keep
this fast; the driver still re-validates every schedule against the graph of its point (the tiling of
its budget, planned again by the driver).
"""

from __future__ import annotations

import json

import pytest

from poet.report.tables import sweep_markdown
from poet.schedule.io import load_schedule
from poet.solve.api import costed_graph
from poet.solve.tiled import tiled_problem
from poet.sweep import SweepError, SweepSpec, run_sweep
from poet.sweep.points import solve_point

BELOW = "1024"  # bytes: below linear's untiled minimum on m4 (1536 B), above its 2-tile minimum (768 B)


class InProcess:
    """A backend that solves each point at once in this process (the runner's loop is unchanged)."""

    def __init__(self):
        self.done = []

    def describe(self):
        return "this process"

    def check(self):
        pass

    def start(self):
        return None

    def slots(self):
        return 1

    def in_flight(self):
        return len(self.done)

    def graph_arg(self, g):
        return None

    def submit(self, tag, spec_d, point, graph=None):
        row, sched = solve_point(spec_d, *point)
        self.done.append((tag, row, sched, None))

    def wait(self, timeout=None):
        out, self.done = self.done, []
        return out

    def cancel(self):
        self.done = []

    def close(self):
        pass


def _sweep(tmp_path, tile, memories=("100%", BELOW)):
    spec = SweepSpec(
        model="linear",
        device="m4",
        memories=list(memories),
        runtimes=["none"],
        strategies=["poet", "keep-all"],
        time_limit_s=1,  # the tiled graph's MILP does not close its gap fast: feasible is enough here
        tile=tile,
    )
    out = tmp_path / f"tile-{tile}"
    doc = run_sweep(spec, out, backend=InProcess(), progress=False)
    return out, {(r["strategy"], r["memory"]): r for r in doc["points"]}, doc


def test_auto_tiles_only_the_points_below_the_untiled_minimum(tmp_path):
    assert costed_graph("linear", "m4").min_ram_bytes() == 1536 > int(BELOW)
    plan = tiled_problem("linear", "m4", memory=BELOW).plan  # what `poet solve --memory 1024` tiles
    nodes, split = len(plan.graph), len(plan.counts)
    assert plan.tiled and nodes > 20
    out, rows, doc = _sweep(tmp_path, "auto")
    assert doc["identity"]["tile"] == "auto"
    for s in ("poet", "keep-all"):
        assert rows[(s, "100%")]["tiled_nodes"] is None and rows[(s, "100%")]["tiling"] is None
        assert rows[(s, BELOW)]["tiled_nodes"] == nodes
        assert rows[(s, BELOW)]["tiling"].startswith(f"{split} layers split into up to 2 tiles: fc1 x2")
    poet = rows[("poet", BELOW)]
    assert poet["status"] in ("optimal", "feasible") and poet["peak_ram_bytes"] <= int(BELOW)
    sched = load_schedule(out / poet["schedule_file"])  # validated on load, against the tiled graph it carries
    assert len(sched.graph.nodes) == nodes and sched.totals.peak_ram_bytes <= int(BELOW)
    csv_text = (out / "sweep.csv").read_text()
    assert "tiled_nodes" in csv_text.splitlines()[0] and f",{nodes}," in csv_text
    md = sweep_markdown(doc)
    assert f"| {BELOW} (1.02 kB; tiled, {nodes} nodes) |" in md and "--tile auto" in md


def test_off_keeps_the_untiled_answer(tmp_path):
    _, rows, _ = _sweep(tmp_path, "off", memories=(BELOW,))
    r = rows[("poet", BELOW)]
    assert r["status"] == "infeasible" and r["tiled_nodes"] is None
    assert "1536" in r["message"] or "1.54 kB" in r["message"], r["message"]


def test_a_forced_count_tiles_every_point(tmp_path):
    out, rows, _ = _sweep(tmp_path, "2")
    assert all(r["tiled_nodes"] and "up to 2 tiles" in r["tiling"] for r in rows.values()), rows
    assert rows[("poet", "100%")]["status"] in ("optimal", "feasible")


def test_bad_tile_options_and_old_sweeps_are_refused(tmp_path):
    with pytest.raises(SweepError, match="tile count such as 4"):
        _sweep(tmp_path, "many")
    with pytest.raises(SweepError, match="needs a built-in model"):
        run_sweep(
            SweepSpec(model=str(tmp_path / "g.json"), device=None, memories=["50%"], runtimes=["none"], tile="4"),
            tmp_path / "g",
            backend=InProcess(),
            progress=False,
        )
    # a directory of a sweep from before --tile (which never tiled) resumes only with --tile off
    out, _, doc = _sweep(tmp_path, "off", memories=(BELOW,))
    del doc["identity"]["tile"]
    (out / "sweep.json").write_text(json.dumps(doc))
    with pytest.raises(SweepError, match="run with --tile off"):
        run_sweep(
            SweepSpec(model="linear", device="m4", memories=[BELOW], runtimes=["none"], strategies=["poet"]),
            out,
            backend=InProcess(),
            progress=False,
        )


class WrongGraph(InProcess):
    """A worker whose tiled schedule carries another graph than its point's tiling."""

    def submit(self, tag, spec_d, point, graph=None):
        row, sched = solve_point(spec_d, *point)
        if sched is not None:
            sched["graph"]["name"] = "another model"
        self.done.append((tag, row, sched, None))


def test_a_tiled_schedule_on_another_graph_is_refused(tmp_path):
    from poet.sweep.grid import TOTALS_COLUMNS

    spec = SweepSpec(model="linear", device="m4", memories=[BELOW], runtimes=["none"], strategies=["keep-all", "poet"])
    spec.time_limit_s = 1
    doc = run_sweep(spec, tmp_path / "w", backend=WrongGraph(), progress=False)
    r = next(r for r in doc["points"] if r["strategy"] == "poet")
    assert r["status"] == "error" and "not this sweep's tiling for this budget" in r["message"], r
    assert r["schedule_file"] is None
    assert all(r[k] is None for k in TOTALS_COLUMNS)  # nothing of the refused schedule is reported
