"""The compact step encoding of a schedule file (docs/formats.md) and the validator that reads steps once:
round trips, the same replay as the plain file, clear refusals of a broken compact object."""

import dataclasses
import json
import math

import pytest

import poet.schedule.io as sio
from poet.cli import main
from poet.graph.core import GraphError
from poet.graph.io import graph_from_dict, graph_to_dict
from poet.graph.io_columns import EDGES_ENCODING, NODES_ENCODING
from poet.schedule.compact import STEPS_ENCODING, decode_steps, encode_steps
from poet.schedule.core import Step
from poet.schedule.io import load_schedule, save_schedule, schedule_from_dict, schedule_to_dict
from poet.schedule.validate import ScheduleError, simulate, validate
from poet.solve import api, cache
from poet.solve.api import costed_graph, solve
from poet.solve.search.stream import stream_schedule
from tests.conftest import random_dag


@pytest.fixture(scope="module")
def schedules():
    """Schedules that page (with stages: overlap) and the streaming page rule's on a random graph."""
    overlap = solve(costed_graph("linear", "a72"), memory="80%", runtime="2x", paging_time="overlap")
    serial = solve(random_dag(3, 40), memory="70%", runtime="3x", method="heuristic", time_limit=10)
    streamed = stream_schedule(serial.graph, serial.budget)
    assert overlap.feasible and serial.feasible and streamed.found
    assert any(st.op == "page_in" for st in overlap.steps) and any(st.op == "page_in" for st in streamed.steps)
    return {"overlap": overlap, "serial": serial, "streamed": (serial, streamed.steps)}


def _steps(schedules, name):
    s = schedules[name]
    return (s[0], s[1]) if isinstance(s, tuple) else (s, s.steps)


@pytest.mark.parametrize("name", ["overlap", "serial", "streamed"])
def test_compact_steps_round_trip_exactly(schedules, name):
    _, steps = _steps(schedules, name)
    raw = json.loads(json.dumps(encode_steps(steps)))
    assert raw["encoding"] == STEPS_ENCODING and raw["count"] == len(steps)
    assert list(decode_steps(raw)) == list(steps)


def test_mixed_and_missing_stages_round_trip():
    steps = [Step("compute", 0, None), Step("compute", 5, 2), Step("free", 0, 2), Step("page_out", 5), Step("free", 5)]
    assert list(decode_steps(encode_steps(steps))) == steps


@pytest.mark.parametrize("name", ["overlap", "serial"])
def test_a_compact_file_validates_as_the_plain_one(schedules, name, tmp_path):
    s = schedules[name]
    plain, compact = schedule_from_dict(schedule_to_dict(s)), schedule_from_dict(schedule_to_dict(s, compact=True))
    assert compact.steps == plain.steps == s.steps
    assert compact.totals == plain.totals == s.totals
    assert (compact.status, compact.report.gap) == (plain.status, plain.report.gap)
    save_schedule(s, tmp_path / "c.json", compact=True)
    assert isinstance(json.loads((tmp_path / "c.json").read_text())["steps"], dict)
    assert load_schedule(tmp_path / "c.json").totals == s.totals
    assert main(["validate", str(tmp_path / "c.json")]) == 0


def test_long_schedules_are_saved_compact_and_short_ones_plain(schedules, tmp_path, monkeypatch):
    s = schedules["serial"]
    save_schedule(s, tmp_path / "short.json")
    assert isinstance(json.loads((tmp_path / "short.json").read_text())["steps"], list)
    monkeypatch.setattr(sio, "COMPACT_MIN_STEPS", len(s.steps))
    save_schedule(s, tmp_path / "long.json")
    assert json.loads((tmp_path / "long.json").read_text())["steps"]["encoding"] == STEPS_ENCODING
    assert load_schedule(tmp_path / "long.json").totals == s.totals


def test_an_invalid_schedule_fails_at_the_same_step_either_way(schedules):
    s = schedules["serial"]
    i = next(i for i, st in enumerate(s.steps) if st.op == "free")
    v = s.steps[i].node
    # freeing the same node twice: the second free finds nothing in RAM
    s = dataclasses.replace(s, steps=s.steps[: i + 1] + (Step("free", v),) + s.steps[i + 1 :])
    errors = []
    for compact in (False, True):
        with pytest.raises(ScheduleError) as e:
            schedule_from_dict(schedule_to_dict(s, compact=compact))
        errors.append((str(e.value), e.value.step_index))
    assert errors[0] == errors[1] and errors[0][1] == i + 1 and "nothing to free" in errors[0][0]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("encoding", "zip", "unknown encoding 'zip'"),
        ("ops", "x", r"ops\[0\] is 'x'"),
        ("nodes", [], "nodes must be a list of"),
        ("nodes", "bad ints", r"nodes\[0\] must be an integer"),
        ("stages", [0], "flat list of stage, count pairs"),
        ("stages", [0, 0], "a count >= 1"),
        ("stages", [-2, 1], r"an integer >= 0, or -1"),
        ("count", -1, "count must be the number of steps"),
    ],
)
def test_a_broken_compact_object_is_refused_naming_its_field(schedules, field, value, message):
    d = schedule_to_dict(schedules["serial"], compact=True)
    if value == "bad ints":
        value = [1.5] * d["steps"]["count"]
    elif field == "ops" and value == "x":
        value = "x" + d["steps"]["ops"][1:]
    d["steps"][field] = value
    with pytest.raises(ScheduleError, match=message):
        schedule_from_dict(d, source="s.json")


def test_compact_stage_runs_must_cover_every_step(schedules):
    d = schedule_to_dict(schedules["overlap"], compact=True)
    d["steps"]["stages"][-1] += 1
    with pytest.raises(ScheduleError, match="stages count"):
        schedule_from_dict(d)


def test_the_validator_reads_steps_once_and_sums_exactly(schedules):
    """A generator gives the replay a tuple gives; the totals are math.fsum over the steps' own costs."""
    for name in ("overlap", "serial"):
        s = schedules[name]
        g = s.graph
        assert validate(g, iter(s.steps), s.budget) == simulate(g, s.steps, s.budget).totals
        cost = {"compute": "compute_energy_j", "page_in": "pagein_energy_j", "page_out": "pageout_energy_j"}
        energy = math.fsum(getattr(g.nodes[st.node], cost[st.op]) for st in s.steps if st.op in cost)
        assert math.isclose(validate(g, s.steps, s.budget).energy_j, energy, rel_tol=1e-15)
    rep = simulate(schedules["serial"].graph, iter(schedules["serial"].steps), schedules["serial"].budget)
    assert len(rep.ram_after_step) == len(schedules["serial"].steps)
    assert max(rep.ram_after_step) == rep.totals.peak_ram_bytes


def test_the_solve_cache_keeps_long_schedules_compact(schedules, monkeypatch):
    s = schedules["serial"]
    monkeypatch.setattr(cache, "COMPACT_MIN_STEPS", 1)
    opts = api.SolveOptions(cache=True, method="heuristic", time_limit_s=10)
    first = api.solve_costed(s.graph, s.budget, "poet", opts)
    (entry,) = cache.cache_dir().glob("*.json")
    assert json.loads(entry.read_text())["steps"]["encoding"] == STEPS_ENCODING
    second = api.solve_costed(s.graph, s.budget, "poet", opts)
    assert second.report.cache is not None and second.steps == first.steps and second.totals == first.totals
    d = json.loads(entry.read_text())
    d["steps"]["ops"] = "z" * d["steps"]["count"]
    entry.write_text(json.dumps(d))
    third = api.solve_costed(s.graph, s.budget, "poet", opts)  # a broken entry is ignored: solved again
    assert third.report.cache is None and third.totals == first.totals


def test_a_compact_graph_round_trips_and_is_checked_as_a_plain_one(schedules):
    g = schedules["serial"].graph
    d = json.loads(json.dumps(graph_to_dict(g, compact=True)))
    assert d["nodes"]["encoding"] == NODES_ENCODING and d["edges"]["encoding"] == EDGES_ENCODING
    h = graph_from_dict(d)
    assert h.nodes == g.nodes and h.edges == g.edges and h.fixed_ram_bytes == g.fixed_ram_bytes
    for field, value, message in [
        ("ram_bytes", "cut", r'"nodes".ram_bytes must be a list of'),
        ("compute_time_s", "negative", "compute_time_s"),
        ("encoding", "rows", "unknown encoding 'rows'"),
    ]:
        bad = json.loads(json.dumps(d))
        if value == "cut":
            bad["nodes"][field] = bad["nodes"][field][:-1]
        elif value == "negative":
            bad["nodes"][field][3] = -1.0
        else:
            bad["nodes"][field] = value
        with pytest.raises(GraphError, match=message):
            graph_from_dict(bad, source="g.json")
    bad = json.loads(json.dumps(d))
    bad["edges"]["to"][0] = -(10**6)  # an edge to a node that is not there
    with pytest.raises(GraphError, match="g.json"):
        graph_from_dict(bad, source="g.json")


def test_a_tiled_graph_round_trips_compact():
    from poet.graph.tiling_plan import plan_tiling
    from poet.hardware.cost import linear_cost_model

    g = linear_cost_model(plan_tiling("vgg16_cifar", 32768).graph, "m0")
    assert any(nd.tile is not None for nd in g.nodes)
    h = graph_from_dict(json.loads(json.dumps(graph_to_dict(g, compact=True))))
    assert h.nodes == g.nodes and h.edges == g.edges
