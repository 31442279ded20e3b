"""The solve cache: the same question is answered from disk, re-validated, and only when the
earlier answer is as good as a fresh solve would be."""

import json
from pathlib import Path

import pytest
from conftest import training_chain

from poet.cli import main
from poet.schedule.core import FEASIBLE, OPTIMAL, Budget
from poet.schedule.io import steps_to_dicts
from poet.solve import api, cache
from poet.solve.strategies import STRATEGIES


@pytest.fixture
def counted(monkeypatch):
    """The poet strategy, counting its calls; ``status`` overrides the status it reports."""
    real = STRATEGIES["poet"]
    calls = {"n": 0, "status": None}

    def poet(g, budget, opts):
        calls["n"] += 1
        s = real(g, budget, opts)
        if calls["status"]:
            s = s.with_(status=calls["status"])
        return s

    monkeypatch.setitem(STRATEGIES, "poet", poet)
    return calls


def _problem():
    g = training_chain(6, seed=3)
    peak = max(n.ram_bytes for n in g.nodes) * 4
    return g, Budget(ram_bytes=peak, runtime_s=1.5 * g.plain_runtime_s)


def _solve(g, b, **kw):
    return api.solve_costed(g, b, "poet", api.SolveOptions(cache=True, **kw))


def test_a_repeated_solve_is_answered_from_the_cache_and_replayed(counted):
    g, b = _problem()
    first = _solve(g, b)
    assert first.status == OPTIMAL and first.steps and first.report.cache is None
    second = _solve(g, b, time_limit_s=0.01)
    assert counted["n"] == 1  # not solved again
    assert second.steps == first.steps and second.status == OPTIMAL
    assert second.totals == first.totals  # recomputed by the validator's replay
    assert second.report.cache.solve_seconds == first.report.solve_seconds
    assert Path(second.report.cache.file).is_file()


def test_the_cache_is_off_unless_asked_for(counted):
    g, b = _problem()
    api.solve_costed(g, b, "poet", api.SolveOptions())
    api.solve_costed(g, b, "poet", api.SolveOptions())
    assert counted["n"] == 2 and not list(cache.cache_dir().glob("*.json"))


def test_a_verbose_solve_runs_for_its_log(counted):
    g, b = _problem()
    _solve(g, b)
    assert _solve(g, b, verbose=True).report.cache is None
    assert counted["n"] == 2


def test_another_budget_gap_or_graph_is_another_question(counted):
    g, b = _problem()
    _solve(g, b)
    _solve(g, Budget(ram_bytes=b.ram_bytes + 100, runtime_s=b.runtime_s))
    _solve(g, b, gap=0.05)
    _solve(training_chain(6, seed=4), b)
    assert counted["n"] == 4
    _solve(g, b, gap=0.05)
    assert counted["n"] == 4


def test_an_unproven_answer_is_reused_only_for_no_longer_a_time_limit(counted):
    g, b = _problem()
    counted["status"] = FEASIBLE  # as if the search had stopped at its time limit
    _solve(g, b, time_limit_s=5.0)
    assert _solve(g, b, time_limit_s=2.0).report.cache.time_limit_s == 5.0
    assert counted["n"] == 1
    fresh = _solve(g, b, time_limit_s=10.0)  # a longer search may do better
    assert counted["n"] == 2 and fresh.report.cache is None
    _solve(g, b)  # no limit is the longest of all
    assert counted["n"] == 3
    _solve(g, b, time_limit_s=1e6)
    assert counted["n"] == 3


@pytest.mark.parametrize("damage", ["not json", "drop a step", "node out of range", "other format"])
def test_a_damaged_or_invalid_entry_is_ignored_and_replaced(counted, damage):
    g, b = _problem()
    first = _solve(g, b)
    (path,) = cache.cache_dir().glob("*.json")
    d = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{")
    else:
        if damage == "drop a step":  # without its first compute no later step can run
            d["steps"] = d["steps"][1:]
        elif damage == "node out of range":
            d["steps"][0]["node"] = len(g.nodes) + 5
        else:
            d["format"] = "poet-cache/0"
        path.write_text(json.dumps(d))
    again = _solve(g, b)
    assert counted["n"] == 2 and again.report.cache is None and again.steps == first.steps
    assert json.loads(path.read_text())["steps"] == steps_to_dicts(first.steps)  # replaced by the fresh answer


def test_an_unwritable_cache_is_reported_not_fatal(counted, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("POET_CACHE_DIR", str(blocker / "cache"))  # a directory inside a file
    g, b = _problem()
    s = _solve(g, b)
    assert s.status == OPTIMAL and "cannot write the cache" in s.report.cache_error


def test_past_its_size_cap_the_least_recently_used_entries_go_and_nothing_else(counted, monkeypatch):
    g, b = _problem()
    budgets = [Budget(ram_bytes=b.ram_bytes, runtime_s=m * g.plain_runtime_s) for m in (1.5, 1.6, 1.7)]
    _solve(g, budgets[0])
    _solve(g, budgets[1])
    directory = cache.cache_dir()
    other = directory / "notes.json"
    other.write_text("mine")  # not an entry: never removed
    a, bb = (cache.entry_path(g, x, "poet", api.SolveOptions(cache=True)) for x in budgets[:2])
    sizes = [a.stat().st_size, bb.stat().st_size]
    old = a.stat().st_mtime - 100
    import os

    os.utime(a, (old, old))
    os.utime(bb, (old + 1, old + 1))
    assert _solve(g, budgets[0]).report.cache is not None  # a hit: now the most recently used
    monkeypatch.setenv("POET_CACHE_MAX_MB", str((2 * max(sizes) + min(sizes) // 2) / 1e6))
    _solve(g, budgets[2])  # three entries do not fit the cap, two do
    assert a.is_file() and not bb.is_file() and other.read_text() == "mine"
    assert cache.entry_path(g, budgets[2], "poet", api.SolveOptions(cache=True)).is_file()
    assert counted["n"] == 3
    monkeypatch.setenv("POET_CACHE_MAX_MB", "0")  # no room: only the newest answer stays
    _solve(g, budgets[1])
    assert sorted(f.name for f in directory.iterdir()) == sorted(
        [cache.entry_path(g, budgets[1], "poet", api.SolveOptions(cache=True)).name, "notes.json"]
    )


def test_the_command_line_caches_unless_told_not_to(capsys):
    argv = ["solve", "--model", "linear", "--device", "m4", "--memory", "1600", "--runtime", "1.5x", "--quiet"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "from the cache" not in first and "from the cache (solved in" in second
    assert "--no-cache, or cache=False from Python, solves again" in second
    assert first.splitlines()[3:] == second.splitlines()[3:]  # the same schedule, replayed
    assert main(argv + ["--no-cache"]) == 0
    assert "from the cache" not in capsys.readouterr().out


def test_the_key_is_the_hash_of_the_whole_text_computed_a_piece_at_a_time():
    import hashlib
    import json

    from poet.graph.io import graph_to_dict
    from poet.solve.api import costed_graph
    from poet.solve.cache import json_sha256

    g = graph_to_dict(costed_graph("resnet18_cifar", "m4"))
    for value in (
        {"graph": g, "budget": [1, 2.5, "serial"], "gap": None, "z": {}, "a": {"b": {"c": {"d": [1, {"e": 2}]}}}},
        {"x": {2: "int keys", 1: "sorted as json.dumps does"}},
        [1, 2],
        "text",
        {},
    ):
        want = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
        assert json_sha256(value) == want and json_sha256(value, depth=0) == want
