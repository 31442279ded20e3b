"""Bad graph and schedule files (issue 23): every loader answers with GraphError/ScheduleError naming the
file and the field, never a TypeError, RecursionError, OverflowError or UnicodeDecodeError."""

import copy
import json

import pytest

from poet.cli import main
from poet.graph.core import GraphError
from poet.graph.io import load_graph
from poet.schedule.io import load_schedule
from poet.schedule.validate import ScheduleError

DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


def with_value(obj, path, raw: str) -> str:
    """``obj`` as JSON with the value at ``path`` replaced by the JSON text ``raw``."""
    o = copy.deepcopy(obj)
    cur = o
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = "__MARK__"
    return json.dumps(o).replace('"__MARK__"', raw)


@pytest.mark.parametrize("field", ["ram_bytes", "compute_time_s"])
@pytest.mark.parametrize("raw", ["NaN", "Infinity", "null", '"12"', "true", "[1]", "-1", HUGE, "1e400"])
def test_a_bad_node_number_names_the_node_and_field(tmp_path, graph_dict, field, raw):
    p = tmp_path / "g.json"
    p.write_text(with_value(graph_dict, ["nodes", 1, field], raw))
    with pytest.raises(GraphError) as e:
        load_graph(p)
    assert str(p) in str(e.value)
    assert field in str(e.value) or "number POET cannot read" in str(e.value)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "null", '"12"', "true", "1.5", "1" + "0" * 30, HUGE])
def test_a_bad_fixed_ram_names_fixed_ram_bytes(tmp_path, graph_dict, raw):
    p = tmp_path / "g.json"
    p.write_text(with_value(graph_dict, ["fixed_ram_bytes"], raw))
    with pytest.raises(GraphError, match="fixed_ram_bytes|number POET cannot read"):
        load_graph(p)


def test_fractional_and_huge_byte_counts_are_refused_with_the_limit(tmp_path, graph_dict):
    p = tmp_path / "g.json"
    p.write_text(with_value(graph_dict, ["nodes", 0, "ram_bytes"], "1.5"))
    with pytest.raises(GraphError, match="ram_bytes must be a whole number of bytes"):
        load_graph(p)
    p.write_text(with_value(graph_dict, ["fixed_ram_bytes"], str(10**30)))
    with pytest.raises(GraphError, match="at most 9007199254740992"):
        load_graph(p)


@pytest.mark.parametrize("raw", ['"x"', "[1]", "3", "true"])
def test_meta_must_be_an_object(tmp_path, graph_dict, raw):
    p = tmp_path / "g.json"
    p.write_text(with_value(graph_dict, ["meta"], raw))
    with pytest.raises(GraphError, match='"meta" must be an object'):
        load_graph(p)


@pytest.mark.parametrize("raw", ["[[0]]", '[["a", "b"]]', "[[true, 1]]", "[3]"])
def test_a_bad_edge_names_its_position(tmp_path, graph_dict, raw):
    p = tmp_path / "g.json"
    p.write_text(with_value(graph_dict, ["edges"], raw))
    with pytest.raises(GraphError, match=r"edges\[0\].*pair of integer node ids"):
        load_graph(p)


@pytest.mark.parametrize(
    "content,says",
    [
        (DEEP.encode(), "nested too deeply"),
        (HUGE.encode(), "number POET cannot read"),
        ('{"format": "poet-graph/1", "name": "caf\u00e9"}'.encode("latin-1"), "not UTF-8 text (byte 0xe9"),
        (json.dumps({"format": "poet-graph/1"}).encode("utf-16"), "is UTF-16 text; POET reads UTF-8"),
        (bytes(range(256)), "not UTF-8"),
        (b"", "not valid JSON"),
    ],
)
def test_unreadable_files_name_the_file_and_the_fix(tmp_path, content, says):
    p = tmp_path / "g.json"
    p.write_bytes(content)
    with pytest.raises(GraphError) as e:
        load_graph(p)
    assert says in str(e.value) and str(p) in str(e.value)
    with pytest.raises(ScheduleError) as e:
        load_schedule(p)
    assert says in str(e.value) and str(p) in str(e.value)


def test_a_byte_order_mark_is_fine(tmp_path, graph_dict):
    p = tmp_path / "g.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(graph_dict).encode())
    assert len(load_graph(p)) == len(graph_dict["nodes"])


def test_a_directory_is_not_a_graph(tmp_path):
    with pytest.raises(GraphError, match="it is a directory"):
        load_graph(tmp_path)


@pytest.mark.parametrize(
    "path,raw,says",
    [
        (["budget", "runtime_s"], '"abc"', "budget runtime_s must be a finite number"),
        (["budget", "runtime_s"], "[1]", "budget runtime_s must be a finite number"),
        (["budget", "runtime_s"], "NaN", "budget runtime_s must be a finite number"),
        (["budget", "runtime_s"], "-1", "budget runtime_s must be a finite number"),
        (["budget"], "[1, 2]", '"budget" must be an object'),
        (["budget", "ram_bytes"], "1e400", "budget.ram_bytes must be an integer"),
        (["budget", "ram_bytes"], "true", "budget.ram_bytes must be an integer"),
        (["budget", "paging_time"], "[]", "unknown paging_time"),
        (["steps"], "{}", '"steps" must be a list'),
        (["graph", "nodes", 0, "ram_bytes"], "null", "ram_bytes must be a number"),
        (["status"], "[]", "unknown status"),
    ],
)
def test_bad_schedule_fields_are_named_by_validate_and_report(capsys, tmp_path, schedule_dict, path, raw, says):
    p = tmp_path / "s.json"
    p.write_text(with_value(schedule_dict, path, raw))
    with pytest.raises(ScheduleError) if path[0] != "graph" else pytest.raises(GraphError) as e:
        load_schedule(p)
    assert says in str(e.value)
    for argv in (["validate", str(p)], ["report", str(p), "--out", str(tmp_path / "rep")]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert says in err and "Traceback" not in err and not (tmp_path / "rep" / "report.md").exists()


@pytest.mark.parametrize("raw", ["[1]", "{}", '"x"', "-1", "1.5", "true"])
def test_a_bad_stage_is_refused(tmp_path, schedule_dict, raw):
    p = tmp_path / "s.json"
    p.write_text(with_value(schedule_dict, ["steps", 1, "stage"], raw))
    with pytest.raises(ScheduleError, match=r"step 1: stage .* is not a stage 0\.\.\d+ \(an integer\)"):
        load_schedule(p)


def test_solver_facts_that_are_not_numbers_are_dropped_not_formatted(capsys, tmp_path, schedule_dict):
    p = tmp_path / "s.json"
    p.write_text(with_value(schedule_dict, ["solver", "solve_seconds"], '"slow"'))
    s = load_schedule(p)
    assert s.report.solve_seconds == 0.0 and s.report.dropped_facts == ("solve_seconds",)
    assert main(["report", str(p), "--out", str(tmp_path / "rep")]) == 0
