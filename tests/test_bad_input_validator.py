"""Wrong answers the validator and the report must not give (issue 23): a NaN deadline passes anything,
overlap stages rearranged to hide paging, and a file's claimed status, gap and bound repeated unchecked."""

import copy
import json
import math

import pytest

from poet.cli import main
from poet.schedule.core import FEASIBLE, OPTIMAL, Budget, Step
from poet.schedule.io import load_schedule, schedule_from_dict, schedule_to_dict
from poet.schedule.validate import ScheduleError, validate
from poet.solve.api import costed_graph, solve


@pytest.fixture(scope="module")
def overlap():
    """An overlap schedule that pages on a device whose paging outweighs some stages' compute."""
    s = solve(costed_graph("linear", "a72"), memory="80%", runtime="2x", paging_time="overlap")
    assert s.feasible and any(st.op == "page_in" for st in s.steps)
    return s


@pytest.mark.parametrize("runtime", [math.nan, math.inf, -1.0, 0.0, "2", [1]])
def test_a_budget_deadline_that_is_not_a_finite_positive_time_is_refused(overlap, runtime):
    with pytest.raises(ScheduleError, match="budget runtime_s must be a finite number of seconds above 0"):
        validate(overlap.graph, overlap.steps, Budget(overlap.budget.ram_bytes, runtime, "overlap"))


def test_validate_refuses_a_file_whose_deadline_is_nan(capsys, tmp_path, overlap):
    d = schedule_to_dict(overlap)
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d).replace(f'"runtime_s": {json.dumps(d["budget"]["runtime_s"])}', '"runtime_s": NaN', 1))
    assert main(["validate", str(p)]) == 2
    assert "budget runtime_s must be a finite number" in capsys.readouterr().err


def restaged(s, how: str) -> list[Step]:
    steps = []
    for st in s.steps:
        if how == "pages to stage 0" and st.op in ("page_in", "page_out"):
            steps.append(Step(st.op, st.node, 0))
        elif how == "no stages":
            steps.append(Step(st.op, st.node, None))
        elif how == "one stage":
            steps.append(Step(st.op, st.node, 0))
        else:
            steps.append(st)
    return steps


def overlap_runtime(g, steps) -> float:
    """The overlap model's runtime as the stage labels say: per stage, the larger of compute and paging."""
    compute, paging = {}, {}
    for st in steps:
        nd = g.nodes[st.node]
        if st.op == "compute":
            compute[st.stage] = compute.get(st.stage, 0.0) + nd.compute_time_s
        elif st.op == "page_in":
            paging[st.stage] = paging.get(st.stage, 0.0) + nd.pagein_time_s
        elif st.op == "page_out":
            paging[st.stage] = paging.get(st.stage, 0.0) + nd.pageout_time_s
    return sum(max(compute.get(k, 0.0), paging.get(k, 0.0)) for k in set(compute) | set(paging))


@pytest.mark.parametrize(
    "how,says",
    [
        ("pages to stage 0", "stages must not decrease"),
        ("no stages", 'needs every step to carry its "stage"'),
        ("one stage", "must be in stage"),
    ],
)
def test_overlap_stages_cannot_be_rearranged_to_hide_paging(overlap, how, says):
    honest = overlap.totals.runtime_s
    steps = restaged(overlap, how)
    # without the stage rules each restaging claims less time than the honest one: the cheat is real
    assert overlap_runtime(overlap.graph, steps) < honest * (1 - 1e-6)
    assert overlap_runtime(overlap.graph, overlap.steps) == pytest.approx(honest)
    with pytest.raises(ScheduleError, match=says):
        validate(overlap.graph, steps, Budget(overlap.budget.ram_bytes, honest, "overlap"))


def test_every_strategy_emits_stages_the_overlap_rules_accept():
    from conftest import training_chain

    g = training_chain(6, seed=1)
    for strategy in ("poet", "remat", "paging", "keep-all", "chen", "capuchin"):
        s = solve(g, memory="85%", runtime="3x", strategy=strategy, paging_time="overlap", time_limit=30)
        if s.steps:  # solve() already replayed it in overlap mode; replay again to be explicit
            validate(g, s.steps, s.budget)


def test_validate_cli_names_the_stage_fault(capsys, tmp_path, overlap):
    d = schedule_to_dict(overlap)
    for st in d["steps"]:
        if st["op"] in ("page_in", "page_out"):
            st["stage"] = 0
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "stages must not decrease" in err and str(p) in err


def costlier(s) -> list[Step]:
    """The schedule with a pointless page-out/free/page-in round trip: valid, and dearer."""
    steps = list(s.steps)
    for i, st in enumerate(steps):
        if st.op == "free":
            trial = (
                steps[:i]
                + [
                    Step("page_out", st.node, st.stage),
                    st,
                    Step("page_in", st.node, st.stage),
                    Step("free", st.node, st.stage),
                ]
                + steps[i + 1 :]
            )
            try:
                validate(s.graph, trial, s.budget)
            except ScheduleError:
                continue
            return trial
    raise AssertionError("no round trip fits")


def test_report_rederives_status_and_gap_from_the_replay(capsys, tmp_path, overlap):
    d = schedule_to_dict(overlap)
    d["steps"] = [{"op": st.op, "node": st.node, "stage": st.stage} for st in costlier(overlap)]
    d["status"], d["solver"]["gap"] = "optimal", 1e-6
    d["solver"]["bound_energy_j"] = overlap.totals.energy_j  # the bound of the cheaper schedule
    s = schedule_from_dict(copy.deepcopy(d))
    gap = (s.totals.energy_j - overlap.totals.energy_j) / s.totals.energy_j
    assert s.report.gap == pytest.approx(gap) and s.report.claimed_gap == 1e-6
    assert s.report.bound_checked is False
    if gap > 1e-3:
        assert s.status == FEASIBLE and s.report.claimed_status == OPTIMAL
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    assert main(["report", str(p), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "claimed by the file, not re-checked" in out and "1.00e-06" not in out


def test_a_bound_above_the_replayed_energy_is_dropped_and_said(tmp_path, overlap):
    d = schedule_to_dict(overlap)
    d["solver"]["bound_energy_j"] = overlap.totals.energy_j * 2
    s = schedule_from_dict(d)
    assert s.report.bound_energy_j == pytest.approx(overlap.graph.plain_energy_j) and s.report.bound_checked
    assert s.report.claimed_bound_energy_j == overlap.totals.energy_j * 2


def test_a_no_schedule_status_next_to_steps_that_replay_is_corrected(tmp_path, overlap):
    d = schedule_to_dict(overlap)
    d["status"] = "infeasible"
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    s = load_schedule(p)
    assert s.status == FEASIBLE and s.report.claimed_status == "infeasible"
