"""The validator refuses bad schedules at the exact step; files round-trip and are re-checked."""

import json

import pytest
from conftest import training_chain

from poet import solve
from poet.graph import GraphError, graph_to_dict, load_graph, save_graph
from poet.schedule import Budget, ScheduleError, Step, load_schedule, save_schedule, validate
from poet.solve.baselines import keep_all_peak, keep_all_steps

G = training_chain(3, 5)  # f0 f1 f2 | b2 b1 b0 ; b(j) reads b(j-1) and its forward node
BIG = Budget(ram_bytes=10**9)


def steps(*pairs):
    return [Step(op, v) for op, v in pairs]


def test_keep_all_is_valid_and_peak_matches_a_hand_count():
    t = validate(G, keep_all_steps(G), BIG)
    assert t.recomputes == 0 and t.page_ins == 0
    assert t.peak_ram_bytes == keep_all_peak(G)
    assert t.energy_j == pytest.approx(G.plain_energy_j)


def test_missing_input_is_refused_at_its_step():
    bad = keep_all_steps(G)
    i = next(k for k, s in enumerate(bad) if s == Step("compute", 1, 1))
    bad.insert(i, Step("free", 0, 1))  # drop f0 right before f1 reads it
    with pytest.raises(
        ScheduleError, match=rf"step {i + 1} \(compute node 1 \(f1\)\): input node 0 \(f0\) not in RAM"
    ) as e:
        validate(G, bad, BIG)
    assert e.value.step_index == i + 1


def test_over_budget_is_refused_with_bytes():
    peak = keep_all_peak(G)
    with pytest.raises(ScheduleError, match=rf"exceeds the budget {peak - 1} B"):
        validate(G, keep_all_steps(G), Budget(ram_bytes=peak - 1))


def test_page_in_of_never_paged_tensor_is_refused():
    with pytest.raises(ScheduleError, match="never paged out"):
        validate(G, steps(("compute", 0), ("free", 0), ("page_in", 0)), BIG)


def test_other_invalid_instructions():
    with pytest.raises(ScheduleError, match="already in RAM"):
        validate(G, steps(("compute", 0), ("compute", 0)), BIG)
    with pytest.raises(ScheduleError, match="nothing to free"):
        validate(
            G,
            steps(
                ("free", 0),
            ),
            BIG,
        )
    with pytest.raises(ScheduleError, match="nothing to page out"):
        validate(
            G,
            steps(
                ("page_out", 2),
            ),
            BIG,
        )
    with pytest.raises(ScheduleError, match="unknown op"):
        validate(G, [Step("swap", 0)], BIG)
    with pytest.raises(ScheduleError, match="never computed"):
        validate(
            G,
            steps(
                ("compute", 0),
            ),
            BIG,
        )
    with pytest.raises(ScheduleError, match="runtime .* exceeds"):
        validate(G, keep_all_steps(G), Budget(10**9, runtime_s=G.plain_runtime_s * 0.5))


def test_paging_roundtrip_counts_energy_and_time():
    s = steps(("compute", 0), ("page_out", 0), ("free", 0), ("page_in", 0))
    t = validate(G, s + [x for x in keep_all_steps(G) if x.node != 0 or x.op == "free"], BIG)
    n0 = G.nodes[0]
    assert t.paging_energy_j == pytest.approx(n0.pageout_energy_j + n0.pagein_energy_j)
    assert t.bytes_paged_in == t.bytes_paged_out == n0.ram_bytes


def test_schedule_file_roundtrip_and_totals_are_recomputed(tmp_path):
    s = solve(G, memory=G.min_ram_bytes(), strategy="poet")
    assert s.feasible
    p = tmp_path / "s.json"
    save_schedule(s, p)
    back = load_schedule(p)
    assert back.steps == s.steps and back.totals == s.totals and back.budget == s.budget
    # a tampered file: totals are not trusted, and an invalid step is reported
    d = json.loads(p.read_text())
    d["totals"]["energy_j"] = 0.0
    d["steps"].insert(0, {"op": "page_in", "node": 3})
    p.write_text(json.dumps(d))
    with pytest.raises(ScheduleError, match="step 0"):
        load_schedule(p)


def test_graph_file_roundtrip_and_bad_files(tmp_path):
    p = tmp_path / "g.json"
    save_graph(G, p)
    assert load_graph(p) == G
    d = graph_to_dict(G)
    for mutate, msg in [
        (lambda d: d.update(format="other/1"), "format"),
        (lambda d: d["edges"].append([4, 1]), "goes backwards"),
        (lambda d: d["edges"].append([0, 99]), "outside"),
        (lambda d: d["nodes"][0].pop("ram_bytes"), "lacks ram_bytes"),
        (lambda d: d["nodes"][1].update(kind="sideways"), "kind"),
        (lambda d: d["nodes"][1].update(compute_energy_j=-1), "compute_energy_j"),
    ]:
        dd = json.loads(json.dumps(d))
        mutate(dd)
        p.write_text(json.dumps(dd))
        with pytest.raises(GraphError, match=msg):
            load_graph(p)
    p.write_text("{not json")
    with pytest.raises(GraphError, match="not valid JSON"):
        load_graph(p)
