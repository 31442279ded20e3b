"""Stopping a solve early (``stop=``, Ctrl-C in the command line): the best validated schedule found so
far comes back, with its gap, from every step that can run long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import training_chain

from poet.console import SAME_CTRL_C_S
from poet.schedule import Budget, validate
from poet.solve import SolveOptions, costed_graph, solve_costed
from poet.solve.baselines import keep_all_peak
from poet.solve.bounds import eviction_cover
from poet.solve.lp import solve_highs
from poet.solve.milp import build, plan_to_start
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import plan_costs
from poet.solve.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]


def _budget(g, frac, mult):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return Budget(int(lo + frac * (hi - lo)), mult * g.plain_runtime_s, "serial")


def _stop_at(phase: str):
    """A progress callback that asks to stop once the solve reports ``phase``, and the stop."""
    asked = threading.Event()

    def progress(d):
        if d["phase"] == phase:
            asked.set()

    return progress, asked.is_set


def test_a_solve_stopped_in_its_guide_search_returns_the_best_plan_so_far_and_skips_the_rest():
    # without a time limit this case goes on to a 60-s interval search and then an unbounded MILP
    g = costed_graph("resnet18_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    progress, stop = _stop_at("guide search")
    s = solve_costed(
        g,
        b,
        "poet",
        SolveOptions(threads=2, gap=0.01, progress=progress, stop=stop, time_limit_s=300, find_min_budgets=False),
    )
    assert s.report.stopped_early and "stopped early on request" in s.report.message
    assert s.steps and s.status == "feasible" and s.report.method == "greedy"
    assert s.report.phase("interval search") is None and s.report.milp is None
    assert s.report.solve_seconds < 60  # far from the 300-s limit it would otherwise use
    assert validate(g, s.steps, b) == s.totals
    lb = s.report.bound_energy_j
    assert s.report.gap == pytest.approx((s.totals.energy_j - lb) / s.totals.energy_j)


def test_stopped_highs_hands_back_its_start_as_the_incumbent():
    # vgg16_cifar's MILP (80 nodes) is big enough not to be solved in presolve, and small
    # enough that HiGHS reaches its first callback in seconds even on a loaded machine
    g = costed_graph("vgg16_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    guide = eviction_cover(g, b).guide
    plan = best_greedy(g, b, guide=guide)
    f = build(g, b, tighten=True)
    start, why = plan_to_start(f, g, plan)
    assert start is not None, why
    res = solve_highs(f.problem, time_limit=300, threads=2, gap=1e-6, start=start, stop=lambda: True)
    assert res.detail == "Interrupted by user" and res.status == "feasible"
    assert res.seconds < 60  # it stops at its first callback, not at 300 s
    assert res.objective * f.energy_unit == pytest.approx(plan_costs(g, plan, b.paging_time)[0], rel=1e-6)
    assert np.allclose(res.x, start)


def test_a_stopped_interval_search_returns_at_once_with_a_validated_plan_or_none():
    intervals = pytest.importorskip("poet.solve.search.intervals")
    pytest.importorskip("ortools")
    g = costed_graph("resnet18_cifar", "m4")
    b = _budget(g, 0.2, 1.2)
    guide = eviction_cover(g, b).guide
    start = best_greedy(g, b, guide=guide)
    found = intervals.interval_plan(g, b, start=start, time_limit=300, stop=lambda: True)
    plan = found.plan
    assert found.cp_seconds < 60
    if plan is not None:
        from poet.solve.stage import emit

        validate(g, emit(g, plan), b)
        assert plan_costs(g, plan, b.paging_time)[0] <= plan_costs(g, start, b.paging_time)[0] * (1 + 1e-9)


def test_a_stop_during_an_infeasible_solve_keeps_the_verdict_and_cuts_the_budget_search_short():
    g = costed_graph("resnet18_cifar", "m4")
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    b = Budget(int(lo + 0.2 * (hi - lo)), 1.0 * g.plain_runtime_s, "serial")  # no slack: proven infeasible
    s = solve_costed(g, b, "poet", SolveOptions(threads=2, gap=0.01, stop=lambda: True, time_limit_s=300))
    assert s.status == "infeasible" and s.report.stopped_early
    assert "before the smallest feasible budgets were all found" in s.report.message
    assert s.report.min_budgets.runtime_s is None and s.report.min_budgets.runtime_note is None  # not started
    assert s.report.solve_seconds < 60  # not the up to 2 x 300 s of the two budget MILPs
    note = s.report.min_budgets.ram_note  # stopped at HiGHS's first callback, if it had one
    assert note is None or note == "proven" or "best found before the stop" in note


def test_an_unproven_answer_cut_short_is_not_cached(monkeypatch):
    calls = []
    real = STRATEGIES["poet"]

    def poet(g, budget, opts):
        calls.append(1)
        return real(g, budget, opts).with_(status="feasible")  # as if unproven

    monkeypatch.setitem(STRATEGIES, "poet", poet)
    g = training_chain(6, seed=3)
    b = Budget(ram_bytes=max(n.ram_bytes for n in g.nodes) * 4, runtime_s=1.5 * g.plain_runtime_s)
    for _ in range(2):
        s = solve_costed(g, b, "poet", SolveOptions(cache=True, stop=lambda: True))
        assert s.report.stopped_early and s.report.cache_error is None
    assert len(calls) == 2  # the second solve ran again


def test_ctrl_c_in_the_command_line_prints_the_best_schedule_so_far_and_a_second_one_aborts():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(method: str, phase: str, presses: int):
        cmd = [
            sys.executable,
            "-m",
            "poet",
            "solve",
            "--model",
            "resnet18_cifar",
            "--device",
            "m4",
            "--memory",
            "1.8MB",
            "--runtime",
            "1.2x",
            "--no-cache",
            "--method",
            method,
        ]
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )  # its own group, as a terminal's foreground job
        seen = []
        for line in p.stderr:  # not a terminal: a line per step
            seen.append(line)
            if phase in line:
                os.killpg(p.pid, signal.SIGINT)  # the whole group: the search workers too
                presses -= 1
            if "poet: stopping early" in line and presses:
                time.sleep(SAME_CTRL_C_S + 0.3)  # sooner, it is the same Ctrl-C
                os.killpg(p.pid, signal.SIGINT)
                presses -= 1
        out, err = p.communicate(timeout=120)
        return p.returncode, out, "".join(seen) + err

    # in the guide search (two worker processes): the search's plan comes back at once
    rc, out, err = run("auto", "guide search", 1)
    assert rc == 0, err
    assert "stopped early on request" in out and "Validated: an independent replay" in out
    assert "poet: stopping early" in err and "Traceback" not in err
    # in HiGHS's presolve, which it cannot leave before its next callback: a second Ctrl-C aborts
    rc, out, err = run("faithful", "building the MILP", 2)
    assert rc == 130 and "poet: interrupted" in err and "Traceback" not in err
