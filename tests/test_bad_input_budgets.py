"""Bad budgets and options (issue 23): refused with a message that names the option and says what would
work, never a traceback, never acted on."""

import json

import pytest
from conftest import training_chain

from poet.cli import main
from poet.graph.io import save_graph
from poet.solve.api import make_budget
from poet.units import MAX_BYTES, BudgetError, parse_bytes, parse_percent, parse_runtime


@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.json"
    save_graph(training_chain(4, seed=2), p)
    return p


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("memory", ["50%%", "%", "x%", "1KiB%", "inf%", "1e400%", "nan%", "-5%", "0%", " %"])
def test_a_bad_percentage_is_refused_naming_the_memory_budget(memory):
    g = training_chain(4, seed=2)
    with pytest.raises(BudgetError, match="memory budget") as e:
        make_budget(g, memory)
    assert "40%" in str(e.value)  # what would work


@pytest.mark.parametrize("memory", ["50%%", "1e400%", "0.5", "inf", "nan", "", "-1", "1e400"])
def test_the_cli_refuses_a_bad_memory_budget_before_solving(capsys, graph_file, memory):
    rc, out, err = run(capsys, "solve", "--graph", graph_file, "--memory", memory, "--quiet", "--no-cache")
    assert rc == 2 and out == "" and err.startswith("poet: error: ") and "memory budget" in err
    assert "Traceback" not in err and "3MB" in err


def test_fractional_bytes_are_refused_not_rounded_to_zero():
    with pytest.raises(BudgetError, match="not a whole number of bytes"):
        parse_bytes("0.5")
    with pytest.raises(BudgetError, match="not a whole number of bytes"):
        parse_bytes(2.5)
    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("1.1KiB") == 1126  # with a unit: whole bytes
    with pytest.raises(BudgetError, match="at least 1 byte"):
        parse_bytes("1e-9KB")


def test_sizes_beyond_two_to_the_53_are_refused():
    assert parse_bytes(MAX_BYTES) == MAX_BYTES
    with pytest.raises(BudgetError, match="2\\^53"):
        parse_bytes(MAX_BYTES + 1)
    with pytest.raises(BudgetError, match="fixed RAM"):
        parse_bytes("1e30", "fixed RAM")


def test_percent_parsing_names_what_would_work():
    assert parse_percent(" 40 % ") == pytest.approx(0.4)
    with pytest.raises(BudgetError, match="percentage like 40%"):
        parse_percent("40")


@pytest.mark.parametrize("runtime", ["", "  "])
def test_an_empty_runtime_is_refused_not_taken_as_no_deadline(runtime):
    with pytest.raises(BudgetError, match="runtime budget is empty.*none for no deadline"):
        parse_runtime(runtime, 1.0)
    assert parse_runtime("none", 1.0) is None and parse_runtime("inf", 1.0) is None


@pytest.mark.parametrize("runtime", ["1e400s", "1e400x", "1e400", float("inf"), float("nan"), "-1s", 0])
def test_a_non_finite_or_non_positive_runtime_is_refused(runtime):
    with pytest.raises(BudgetError, match="runtime budget"):
        parse_runtime(runtime, 1.0)


def test_runtime_1e400s_writes_no_infinity_anywhere(capsys, graph_file, tmp_path):
    out = tmp_path / "s.json"
    rc, text, err = run(
        capsys,
        "solve",
        "--graph",
        graph_file,
        "--memory",
        "90%",
        "--runtime",
        "1e400s",
        "--json",
        "--out",
        out,
        "--quiet",
        "--no-cache",
    )
    assert rc == 2 and "runtime budget" in err and "not a finite time" in err
    assert "Infinity" not in text and not out.exists()


@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--time-limit", "nan", "is not a positive number of seconds"),
        ("--time-limit", "inf", "is not a positive number of seconds"),
        ("--gap", "nan", "is not a relative gap in [0, 1)"),
        ("--threads", "-1", "is not a whole number of threads"),
        ("--batch-size", "0", "is not a whole number of samples, 1 or more"),
        ("--fixed-ram", "0.5", "--fixed-ram '0.5' is not a whole number of bytes"),
        ("--fixed-ram", "nan", "cannot read --fixed-ram"),
    ],
)
def test_solver_options_are_checked_and_named(capsys, graph_file, flag, value, says):
    argv = (
        ["solve", "--model", "linear", "--device", "m4"] if flag == "--batch-size" else ["solve", "--graph", graph_file]
    )
    rc, out, err = run(capsys, *argv, "--memory", "90%", "--quiet", "--no-cache", flag, value)
    assert rc == 2 and out == "" and says in err and "Traceback" not in err
    assert flag in err or flag == "--fixed-ram"


def test_a_device_with_a_graph_file_is_refused_not_ignored(capsys, graph_file):
    rc, out, err = run(capsys, "solve", "--graph", graph_file, "--device", "a72", "--memory", "90%", "--quiet")
    assert rc == 2 and "--device a72 cannot apply to --graph" in err and "drop --device" in err


def test_fixed_ram_of_ten_to_the_thirty_is_refused_clearly(capsys, graph_file):
    for strategy in ("poet", "remat"):
        rc, out, err = run(
            capsys,
            "solve",
            "--graph",
            graph_file,
            "--memory",
            "90%",
            "--fixed-ram",
            "1" + "0" * 30,
            "--strategy",
            strategy,
            "--quiet",
            "--no-cache",
        )
        assert rc == 2 and "--fixed-ram" in err and "2^53" in err and "inf s" not in out + err


def test_chen_hints_a_ram_budget_only_where_it_meets_the_deadline(capsys, tmp_path):
    """The smallest feasible RAM chen reports is one at which chen meets the deadline too; below plain
    time no plan does, and the hint says so instead of naming a RAM budget that is just as infeasible."""
    g = tmp_path / "lin.json"
    assert main(["export-graph", "--model", "linear", "--device", "m4", "--out", str(g)]) == 0
    capsys.readouterr()
    for runtime in ("1x", "1.05x", "2x"):
        rc, out, _ = run(
            capsys,
            "solve",
            "--graph",
            g,
            "--memory",
            "80%",
            "--runtime",
            runtime,
            "--strategy",
            "chen",
            "--quiet",
            "--no-cache",
            "--json",
        )
        d = json.loads(out)
        assert rc == 2 and d["status"] == "infeasible" and "min_ram_bytes" in d["solver"]
        rc, out, _ = run(
            capsys,
            "solve",
            "--graph",
            g,
            "--memory",
            d["solver"]["min_ram_bytes"],
            "--runtime",
            runtime,
            "--strategy",
            "chen",
            "--quiet",
            "--no-cache",
        )
        assert rc == 0, out
    rc, out, _ = run(
        capsys,
        "solve",
        "--graph",
        g,
        "--memory",
        "80%",
        "--runtime",
        "50ms",
        "--strategy",
        "chen",
        "--quiet",
        "--no-cache",
    )
    assert rc == 2 and "Smallest feasible RAM" not in out
    assert "no RAM budget helps: none of chen's" in out and "--runtime" in out
