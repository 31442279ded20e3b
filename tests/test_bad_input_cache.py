"""Cache entries that were damaged or edited, and bad cache settings (issue 23): the cache trusts nothing it
reads, an unreadable entry is a miss (and says so), and a bad POET_CACHE_MAX_MB is refused, not acted on."""

import json

import pytest
from conftest import training_chain

from poet.cli import main
from poet.schedule.core import FEASIBLE, INFEASIBLE, OPTIMAL, Budget, Step
from poet.schedule.validate import ScheduleError, validate
from poet.solve import api, cache
from poet.solve.strategies import STRATEGIES
from poet.units import BudgetError


@pytest.fixture
def counted(monkeypatch):
    real = STRATEGIES["poet"]
    calls = {"n": 0}

    def poet(g, budget, opts):
        calls["n"] += 1
        return real(g, budget, opts)

    monkeypatch.setitem(STRATEGIES, "poet", poet)
    return calls


def _problem():
    g = training_chain(6, seed=3)
    return g, Budget(ram_bytes=max(n.ram_bytes for n in g.nodes) * 4, runtime_s=1.5 * g.plain_runtime_s)


def _solve(g, b, **kw):
    return api.solve_costed(g, b, "poet", api.SolveOptions(cache=True, **kw))


def _entry():
    (entry,) = cache.cache_dir().glob("*.json")
    return entry


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100_000 + "]" * 100_000,
        b"\xff\xfe{}",
        "9" * 5000,
        "[]",
        "",
        '{"format": "poet-cache/1", "status": "optimal", "steps": "x"}',
    ],
)
def test_an_unreadable_entry_is_a_miss_and_says_so(counted, content):
    g, b = _problem()
    first = _solve(g, b)
    entry = _entry()
    entry.write_bytes(content if isinstance(content, bytes) else content.encode())
    again = _solve(g, b)
    assert counted["n"] == 2 and again.status == first.status and again.steps == first.steps
    assert str(entry) in again.report.cache_note and "solved again" in again.report.cache_note
    json.loads(entry.read_text())  # replaced by a good entry
    assert (_solve(g, b).report.cache is not None) and counted["n"] == 2


def test_the_cli_prints_the_note(capsys, tmp_path):
    g = tmp_path / "g.json"
    from poet.graph.io import save_graph

    save_graph(training_chain(6, seed=3), g)
    argv = ["solve", "--graph", str(g), "--memory", "90%", "--runtime", "2x", "--quiet"]
    assert main(argv) == 0
    _entry().write_text("[" * 100_000)
    capsys.readouterr()
    assert main(argv) == 0
    assert "note: ignored the unreadable cache entry" in capsys.readouterr().err


def test_an_entry_edited_to_infeasible_does_not_make_the_problem_infeasible(counted):
    g, b = _problem()
    first = _solve(g, b)
    entry = _entry()
    d = json.loads(entry.read_text())
    entry.write_text(json.dumps({**d, "status": "infeasible", "steps": []}))
    again = _solve(g, b)
    assert again.status == first.status == OPTIMAL and again.steps and counted["n"] == 2
    assert not again.report.cache_note  # a claim that cannot be re-checked is no damage: solved silently


def test_an_infeasible_answer_is_reused_only_when_the_cover_reproves_it(counted):
    g, b = _problem()
    hopeless = Budget(ram_bytes=b.ram_bytes, runtime_s=g.plain_runtime_s * 1.0000001)
    first = _solve(g, hopeless)
    if first.status != INFEASIBLE:
        pytest.skip("this budget is feasible")
    again = _solve(g, hopeless)
    if counted["n"] == 1:  # reused: the eviction cover proved it again
        assert again.status == INFEASIBLE and "re-proven on reuse" in again.report.cache.recheck
    else:
        assert counted["n"] == 2 and again.status == INFEASIBLE and not again.report.cache_note


def _costlier(g, b, steps):
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
                validate(g, trial, b)
            except ScheduleError:
                continue
            return trial
    raise AssertionError("no round trip fits")


def test_costlier_steps_under_an_optimal_claim_are_not_reported_optimal(counted):
    g, b = _problem()
    first = _solve(g, b)
    entry = _entry()
    d = json.loads(entry.read_text())
    steps = _costlier(g, b, [Step(s["op"], s["node"], s.get("stage")) for s in d["steps"]])
    worse = validate(g, steps, b).energy_j
    assert worse > first.totals.energy_j * (1 + 2e-3)
    d["steps"] = [{"op": s.op, "node": s.node, "stage": s.stage} for s in steps]
    d["solver"]["gap"], d["solver"]["bound_energy_j"] = 0.0, worse  # lies that make it look proven
    entry.write_text(json.dumps(d))
    again = _solve(g, b)
    # the optimality claim cannot be re-proven for these steps: solved again, the true optimum returned
    assert (
        counted["n"] == 2 and again.status == OPTIMAL and again.totals.energy_j == pytest.approx(first.totals.energy_j)
    )
    assert not again.report.cache_note


def test_a_reused_answer_carries_the_rederived_gap_and_bound(counted):
    g, b = _problem()
    first = _solve(g, b)
    entry = _entry()
    d = json.loads(entry.read_text())
    d["solver"]["gap"], d["solver"]["bound_energy_j"] = 0.5, 1e-9  # edited, wrong both ways
    entry.write_text(json.dumps(d))
    again = _solve(g, b)
    assert counted["n"] == 1 and again.status == OPTIMAL
    assert again.report.gap <= 1e-3 and again.report.bound_energy_j >= g.plain_energy_j
    assert again.report.bound_energy_j == pytest.approx(first.report.bound_energy_j, rel=1e-6)


def test_a_feasible_claim_is_reused_with_the_gap_rederived(counted):
    g, b = _problem()
    _solve(g, b, time_limit_s=30)
    entry = _entry()
    d = json.loads(entry.read_text())
    steps = _costlier(g, b, [Step(s["op"], s["node"], s.get("stage")) for s in d["steps"]])
    d.update(status="feasible", steps=[{"op": s.op, "node": s.node, "stage": s.stage} for s in steps])
    d["solver"]["gap"] = 0.0
    entry.write_text(json.dumps(d))
    again = _solve(g, b, time_limit_s=30)
    e = validate(g, steps, b).energy_j
    assert counted["n"] == 1 and again.status == FEASIBLE and again.report.gap > 1e-3
    assert again.report.gap == pytest.approx((e - again.report.bound_energy_j) / e)


@pytest.mark.parametrize("value", ["nan", "-1", "abc", "inf", "1e400", "-inf"])
def test_a_bad_cache_size_cap_is_refused_and_deletes_nothing(monkeypatch, capsys, tmp_path, value):
    g, b = _problem()
    _solve(g, b)
    others = [cache.cache_dir() / f"{k:064x}.json" for k in range(3)]
    for o in others:
        o.write_text("{}")
    monkeypatch.setenv("POET_CACHE_MAX_MB", value)
    with pytest.raises(BudgetError, match="POET_CACHE_MAX_MB=.* is not a size in megabytes; set it to a number"):
        _solve(g, Budget(b.ram_bytes + 1, b.runtime_s))
    assert all(o.exists() for o in others)
    gf = tmp_path / "g.json"
    from poet.graph.io import save_graph

    save_graph(g, gf)
    assert main(["solve", "--graph", str(gf), "--memory", "90%", "--quiet"]) == 2
    assert "POET_CACHE_MAX_MB" in capsys.readouterr().err and all(o.exists() for o in others)


def test_an_empty_or_zero_cap_is_understood(monkeypatch):
    monkeypatch.setenv("POET_CACHE_MAX_MB", "")
    assert cache.max_bytes() == cache.MAX_MB_DEFAULT * 1e6
    monkeypatch.setenv("POET_CACHE_MAX_MB", " 0 ")
    assert cache.max_bytes() == 0


def test_answers_without_a_schedule_that_nothing_could_recheck_are_not_kept():
    g, b = _problem()
    api.solve_costed(
        g, Budget(ram_bytes=b.ram_bytes, runtime_s=g.plain_runtime_s * 0.5), "keep-all", api.SolveOptions(cache=True)
    )
    assert not list(cache.cache_dir().glob("*.json"))
