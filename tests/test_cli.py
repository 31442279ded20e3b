"""The command line as a user meets it: results, files, and clear errors."""

import json

import pytest

from poet.cli import main
from poet.graph.zoo import build_model
from poet.hardware import load_device
from poet.hardware.cost import linear_cost_model
from poet.schedule import load_schedule
from poet.units import BudgetError, parse_bytes, parse_runtime


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_solve_writes_a_valid_schedule_and_reports_it(capsys, tmp_path):
    out = tmp_path / "s.json"
    rc, text, _ = run(
        capsys,
        "solve",
        "--model",
        "linear",
        "--device",
        "m4",
        "--memory",
        "1600",
        "--runtime",
        "1.5x",
        "--out",
        str(out),
        "--quiet",
    )
    assert rc == 0
    assert "optimal" in text and "peak RAM" in text and "Validated" in text
    s = load_schedule(out)
    assert s.totals.peak_ram_bytes <= 1600 and s.status == "optimal"


def test_existing_output_is_not_overwritten_without_force(capsys, tmp_path):
    out = tmp_path / "mine.json"
    out.write_text("precious")
    rc, _, err = run(capsys, "solve", "--model", "linear", "--device", "m4", "--memory", "4kB", "--out", str(out))
    assert rc == 2 and "--force" in err and out.read_text() == "precious"


def test_infeasible_reports_smallest_budget(capsys):
    # untiled (--tile off): below the largest node's working set nothing fits (auto tiling would split it)
    rc, text, _ = run(
        capsys, "solve", "--model", "linear", "--device", "m4", "--memory", "1000", "--json", "--tile", "off"
    )
    assert rc == 2
    d = json.loads(text)
    assert d["status"] == "infeasible"
    g = linear_cost_model(build_model("linear"), "m4")
    assert d["solver"]["min_ram_bytes_lower_bound"] == g.min_ram_bytes()


def test_infeasible_deadline_reports_computed_minimum_ram(capsys):
    # remat-only at the paging bound: RAM too small for any remat schedule at this deadline
    g = linear_cost_model(build_model("linear"), "m4")
    rc, text, _ = run(
        capsys,
        "solve",
        "--model",
        "linear",
        "--device",
        "m4",
        "--memory",
        str(g.min_ram_bytes()),
        "--runtime",
        "1.0x",
        "--strategy",
        "remat",
        "--json",
        "--time-limit",
        "60",
    )
    d = json.loads(text)
    if rc == 0:
        pytest.skip("remat fits at the bound for this graph")
    assert d["status"] == "infeasible"
    assert d["solver"]["min_ram_bytes"] > g.min_ram_bytes()
    # the reported minimum really is feasible
    rc2, text2, _ = run(
        capsys,
        "solve",
        "--model",
        "linear",
        "--device",
        "m4",
        "--memory",
        str(d["solver"]["min_ram_bytes"]),
        "--runtime",
        "1.0x",
        "--strategy",
        "remat",
        "--json",
    )
    assert rc2 == 0 and json.loads(text2)["status"] in ("optimal", "feasible")


@pytest.mark.parametrize(
    "argv, msg",
    [
        (
            ["solve", "--model", "resnet99", "--device", "a72", "--memory", "1MB"],
            "unknown model 'resnet99'; known models",
        ),
        (
            ["solve", "--model", "linear", "--device", "z80", "--memory", "1MB"],
            "unknown device 'z80'; built-in devices",
        ),
        (["solve", "--model", "linear", "--device", "m4", "--memory", "0"], "must be at least 1 byte"),
        (["solve", "--model", "linear", "--device", "m4", "--memory", "lots"], "cannot read memory budget"),
        (["solve", "--model", "linear", "--device", "m4", "--memory", "1MB", "--runtime", "0.5x"], "below one plain"),
        (["solve", "--model", "linear", "--memory", "1MB"], "needs --device"),
        (["solve", "--memory", "1MB"], "either --model"),
        (
            ["solve", "--model", "linear", "--device", "m4", "--memory", "1MB", "--strategy", "magic"],
            "unknown strategy",
        ),
        (["solve", "--graph", "/nonexistent/g.json", "--memory", "1MB"], "cannot read graph file"),
    ],
)
def test_bad_input_gives_a_clear_message(capsys, argv, msg):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert msg in err and "Traceback" not in err


def test_malformed_graph_json(capsys, tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"format": "poet-graph/1", "nodes": [}')
    rc, _, err = run(capsys, "solve", "--graph", str(p), "--memory", "1MB")
    assert rc == 2 and "not valid JSON" in err


def test_export_graph_then_solve_from_file(capsys, tmp_path):
    p = tmp_path / "g.json"
    assert run(capsys, "export-graph", "--model", "linear", "--device", "m0", "--out", str(p))[0] == 0
    rc, text, _ = run(capsys, "solve", "--graph", str(p), "--memory", "2kB", "--quiet")
    assert rc == 0 and "optimal" in text


def test_fixed_ram_counts_against_the_budget(capsys):
    g = build_model("linear")  # 510,632 B of float32 parameters; Adam holds 4x that
    rc, text, _ = run(
        capsys, "solve", "--model", "linear", "--device", "m4", "--memory", "600kB", "--fixed-ram", "adam", "--json"
    )
    assert rc == 2 and json.loads(text)["solver"]["min_ram_bytes_lower_bound"] > 4 * g.param_bytes
    rc, text, _ = run(
        capsys, "solve", "--model", "linear", "--device", "m4", "--memory", "2.1MB", "--fixed-ram", "adam", "--json"
    )
    d = json.loads(text)
    assert rc == 0 and d["totals"]["peak_ram_bytes"] >= 4 * g.param_bytes


def test_units():
    assert parse_bytes("3MB") == 3_000_000 and parse_bytes("256KiB") == 262_144 and parse_bytes(3000000) == 3_000_000
    assert parse_runtime("7.6x", 2.0) == pytest.approx(15.2)
    assert parse_runtime("800ms", 2.0) == pytest.approx(0.8)
    assert parse_runtime(None, 2.0) is None
    with pytest.raises(BudgetError):
        parse_runtime("fast", 1.0)


def test_device_profiles_match_the_paper_constants():
    m4, a72 = load_device("m4"), load_device("a72")
    assert m4.flops_per_s == pytest.approx(16283 * 100 * 1000 / 255.6237, rel=1e-6)
    assert m4.compute_power_w == pytest.approx(3.328e-3 * 3.3)
    assert a72.joules_per_flop == pytest.approx(13.53 * 0.6 * 5 / (16283 * 100 * 1000), rel=1e-6)
    assert a72.write_latency_s == pytest.approx(0.0185314e-3)
    assert load_device("a72nocache").write_bytes_per_s == pytest.approx(17.1e6)


def test_unreachable_deadline_is_proven_infeasible_with_a_runtime_bound(capsys):
    # resnet50 has more nodes than the MILP default takes: the eviction cover proves it at once
    rc, text, _ = run(
        capsys, "solve", "--model", "resnet50", "--device", "m4", "--memory", "40MB", "--runtime", "1.0005x", "--json"
    )
    d = json.loads(text)
    assert rc == 2 and d["status"] == "infeasible"
    t_min = d["solver"]["min_runtime_s_lower_bound"]
    g = linear_cost_model(build_model("resnet50"), "m4")
    assert t_min > 1.0005 * g.plain_runtime_s
    assert "too short" in d["solver"]["message"]
    # a deadline above the bound is not refused on those grounds
    rc2, text2, _ = run(
        capsys,
        "solve",
        "--model",
        "resnet50",
        "--device",
        "m4",
        "--memory",
        "40MB",
        "--runtime",
        f"{1.2 * t_min}",
        "--json",
        "--time-limit",
        "6",  # the first rule (capuchin) meets this deadline in half a second; the rest only improves on it
    )
    assert rc2 == 0 and json.loads(text2)["status"] in ("optimal", "feasible")


def test_a_long_solve_shows_which_step_it_is_in_and_the_best_energy_and_bound_so_far(capsys):
    # resnet18_cifar on m4 at 1.8 MB: a bound, the rules, a guide search (and the MILP), each named on
    # the progress line (stderr), with the bound in joules as the eviction cover gives it
    from poet.solve.api import costed_graph, make_budget
    from poet.solve.bounds import eviction_cover

    argv = [
        "solve",
        "--model",
        "resnet18_cifar",
        "--device",
        "m4",
        "--memory",
        "1.8MB",
        "--runtime",
        "1.2x",
        "--time-limit",
        "3",
    ]
    rc, text, err = run(capsys, *argv)
    assert rc == 0 and "Status:" in text and "; )" not in text
    lines = err.splitlines()  # stderr is not a terminal here: whole lines, one per step at least
    assert "\r" not in err and all(ln.startswith("solving (") for ln in lines)
    phases = [ln.split(")...")[0].removeprefix("solving (") for ln in lines]
    assert (
        phases.index("Capuchin-style schedule")
        < phases.index("lower bound")
        < phases.index("greedy rules")
        < phases.index("guide search")
    )
    g = costed_graph("resnet18_cifar", "m4")
    lb = eviction_cover(g, make_budget(g, "1.8MB", "1.2x", "serial")).bound
    assert all(f"bound {lb:.4g} J" in ln for ln in lines if ln.startswith(("solving (greedy", "solving (guide")))
    assert any("best" in ln and "gap" in ln for ln in lines if ln.startswith("solving (guide"))
    rc, text, err = run(capsys, *argv, "--time-limit", "1", "--json")
    assert rc == 0 and err == ""  # --json: no progress line


def test_the_progress_line_is_redrawn_between_reports_and_stops_when_done(capsys, monkeypatch):
    # HiGHS can go minutes without a callback: the line must keep its clock moving meanwhile
    import time

    from poet.cli import Progress

    monkeypatch.setattr(Progress, "TICK_S", 0.01)
    p = Progress(enabled=True, tty=True)
    p({"phase": "MILP", "objective": 1.5, "bound": 1.0, "gap": 1 / 3})
    seen, deadline = "", time.monotonic() + 30
    while seen.count("solving (MILP)") < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
        seen += capsys.readouterr().err
    p.done()
    seen += capsys.readouterr().err
    assert seen.count("solving (MILP)") >= 4 and seen.endswith("\n")
    assert all("gap 33.33%" in part for part in seen.split("\r") if part.strip())
    time.sleep(0.05)
    assert capsys.readouterr().err == ""  # nothing drawn after done()


def test_a_long_solve_s_terminal_line_says_how_to_stop_early_and_a_log_does_not(capsys, monkeypatch):
    from poet.cli import Progress

    monkeypatch.setattr(Progress, "HINT_AFTER_S", 0.0)
    for tty in (True, False):
        p = Progress(enabled=True, tty=tty)
        p({"phase": "guide search", "objective": 1.2, "bound": 1.0, "gap": 1 / 6})
        p.done()
        err = capsys.readouterr().err
        assert ("gap 16.67%, Ctrl-C stops with the best so far" in err) == tty


def test_the_progress_goes_to_a_log_as_whole_lines(capsys, monkeypatch):
    # not a terminal: no carriage returns; a line when the step changes, else one per LOG_EVERY_S
    import time

    from poet.cli import Progress

    monkeypatch.setattr(Progress, "TICK_S", 0.01)
    monkeypatch.setattr(Progress, "LOG_EVERY_S", 0.2)
    p = Progress(enabled=True, tty=False)
    p({"phase": "lower bound"})
    p({"phase": "greedy rules", "bound": 1.0})
    p({"phase": "greedy rules", "bound": 1.0, "objective": 1.2, "gap": 1 / 6})  # same step, too soon
    assert capsys.readouterr().err.splitlines() == [
        "solving (lower bound)...     0 s",
        "solving (greedy rules)...     0 s, bound 1",
    ]
    time.sleep(0.5)  # the ticker logs the step again
    p.done()
    again = capsys.readouterr().err
    assert "\r" not in again and again.endswith("\n")
    assert 1 <= again.count("solving (greedy rules)") <= 3 and "best 1.2, bound 1, gap 16.67%" in again
    time.sleep(0.05)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--time-limit", "-3", "not a positive number of seconds"),
        ("--time-limit", "0", "not a positive number of seconds"),
        ("--threads", "0", "is not a whole number of threads, 1 or more"),
        ("--gap", "2", "is not a relative gap in [0, 1)"),
        ("--method", "nosuch", "unknown method 'nosuch'; choose one of"),
    ],
)
def test_solver_options_out_of_range_are_refused_with_what_would_work(capsys, flag, value, says):
    rc, text, err = run(capsys, "solve", "--model", "linear", "--device", "m4", "--memory", "1MB", flag, value)
    assert rc == 2 and text == "" and says in err and "Traceback" not in err


def test_an_out_path_in_a_missing_directory_is_refused_before_solving(capsys, tmp_path):
    out = tmp_path / "no" / "such" / "s.json"
    rc, text, err = run(
        capsys, "solve", "--model", "resnet18_cifar", "--device", "m4", "--memory", "1.8MB", "--out", str(out)
    )
    assert rc == 2 and text == "" and "solving" not in err  # nothing was solved
    assert f"the directory {out.parent} does not exist" in err and not out.exists()
