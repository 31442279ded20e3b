"""Fuzz the command line and the file loaders with bad input, as a new user would (issue 23).

Runs a few hundred bad inputs through ``poet.cli.main`` (in this process, so a case costs a
solve, not an interpreter start) and through the Python loaders (``load_graph``,
``load_device``, ``load_schedule``), then counts four kinds of failure:

* traceback    -- an exception escaped ``main`` (or a loader raised something that is not one
                  of POET's own errors: TypeError, RecursionError, OverflowError, ...);
* wrong        -- a wrong answer: a bad value accepted and acted on, a tampered schedule or
                  cache entry believed, a claim repeated without being checked;
* data loss    -- a file the user had was replaced by a truncated one, deleted, or
                  overwritten by a command that then failed;
* unclear      -- refused, but the message does not name the field or option at fault.

Usage (from the repository root; PYTHONPATH chooses the tree under test)::

    PYTHONPATH=$PWD python bench/fuzz_cli.py            # summary + each failing case
    PYTHONPATH=$PWD python bench/fuzz_cli.py --only graph --verbose

The full-disk cases mount a 16 KiB tmpfs and need root; without it they are skipped (and say so).
The ``train`` cases import torch and take about a minute; ``--no-train`` leaves them out.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    rc: int | None
    out: str
    err: str
    exc: str = ""  # a traceback that escaped main

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Outcome:
    area: str
    name: str
    kind: str = "ok"  # ok | traceback | wrong | data loss | unclear
    detail: str = ""


@dataclass
class Fuzz:
    work: Path
    results: list[Outcome] = field(default_factory=list)
    verbose: bool = False

    def record(self, area, name, kind="ok", detail=""):
        self.results.append(Outcome(area, name, kind, detail))
        if self.verbose or kind != "ok":
            print(f"[{kind:>9}] {area}: {name}  {detail[:300]}", flush=True)


def run_cli(argv: list[str], env: dict | None = None) -> Run:
    """``poet.cli.main(argv)`` with stdout/stderr captured and ``env`` set for the call."""
    from poet.cli import main

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    rc, exc = None, ""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:
        exc = traceback.format_exc()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Run(rc, out.getvalue(), err.getvalue(), exc)


def poet_errors() -> tuple:
    from poet.graph.core import GraphError
    from poet.hardware.device import DeviceError
    from poet.schedule.validate import ScheduleError
    from poet.units import BudgetError

    return (GraphError, DeviceError, ScheduleError, BudgetError)


def classify(
    f: Fuzz,
    area: str,
    name: str,
    r: Run,
    *,
    names: tuple[str, ...] = (),
    refuse: bool = False,
    wrong_if=None,
    detail: str = "",
) -> None:
    """Traceback if one escaped (or was printed); wrong if ``refuse`` and it ran (rc 0) or ``wrong_if``
    holds; unclear if refused without naming any of ``names``."""
    if r.exc or "Traceback (most recent call last)" in r.text:
        f.record(area, name, "traceback", (r.exc or r.err).strip().splitlines()[-1] if (r.exc or r.err) else "")
        return
    if wrong_if is not None and wrong_if(r):
        f.record(area, name, "wrong", detail or f"rc {r.rc}: {r.text.strip()[-200:]}")
        return
    if refuse and r.rc == 0:
        f.record(area, name, "wrong", f"accepted (rc 0): {r.out.strip()[:160]}")
        return
    if refuse and "error" not in r.err.lower():
        f.record(area, name, "wrong", f"acted on, not refused (rc {r.rc}): {r.out.strip()[-160:]}")
        return
    if r.rc not in (0, None) and r.err.strip() and names and not any(n.lower() in r.err.lower() for n in names):
        f.record(area, name, "unclear", f"message does not name {names[0]!r}: {r.err.strip()[-200:]}")
        return
    f.record(area, name)


def api_call(f: Fuzz, area: str, name: str, fn, *args, names: tuple[str, ...] = (), refuse: bool = True):
    """A loader must return or raise one of POET's errors (naming the field); anything else is a traceback."""
    try:
        fn(*args)
    except poet_errors() as e:
        if names and not any(n.lower() in str(e).lower() for n in names):
            f.record(area, name + " [api]", "unclear", f"{type(e).__name__}: {e}"[:300])
        else:
            f.record(area, name + " [api]")
        return
    except BaseException as e:
        f.record(area, name + " [api]", "traceback", f"{type(e).__name__}: {str(e)[:200]}")
        return
    if refuse:
        f.record(area, name + " [api]", "wrong", "accepted")
    else:
        f.record(area, name + " [api]")


# ----------------------------------------------------------------------------------------------- fixtures


def make_fixtures(work: Path) -> dict:
    from poet.graph.io import graph_to_dict
    from poet.schedule.io import schedule_to_dict
    from poet.solve.api import costed_graph, solve

    g = costed_graph("linear", "m4")
    graph = graph_to_dict(g)
    (work / "lin.json").write_text(json.dumps(graph))
    s = solve(g, memory="80%", runtime="2x", strategy="paging")
    sched = schedule_to_dict(s)
    (work / "sched.json").write_text(json.dumps(sched))
    ov = solve(costed_graph("linear", "a72"), memory="80%", runtime="2x", paging_time="overlap")
    assert ov.steps and any(st.op == "page_in" for st in ov.steps), "the overlap fixture needs paging"
    overlap = schedule_to_dict(ov)
    return {"graph": graph, "sched": sched, "overlap": overlap, "g": g}


def write(path: Path, obj) -> Path:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "9" * 5000
BAD_NUMBERS = {  # JSON text of a value that is not a usable count/cost
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "null": "null",
    "string": '"12"',
    "bool": "true",
    "list": "[1]",
    "object": '{"a": 1}',
    "negative": "-1",
    "1e30": "1e30",
    "10^30 int": "1" + "0" * 30,
    "1e400": "1e400",
    "5000 digits": HUGE_INT,
}


def _json_with(obj, path: list, raw: str) -> str:
    """``obj`` as JSON with the value at ``path`` replaced by the raw JSON text ``raw``."""
    marker = "__FUZZ_MARKER__"
    o = copy.deepcopy(obj)
    cur = o
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = marker
    return json.dumps(o).replace(json.dumps(marker), raw)


# ----------------------------------------------------------------------------------------------- areas


def fuzz_budgets(f: Fuzz, fx: dict):
    area = "budgets"
    lin = f.work / "lin.json"
    base = ["solve", "--graph", lin, "--quiet", "--no-cache", "--time-limit", "20"]
    for mem in [
        "50%%",
        "%",
        "x%",
        "1KiB%",
        "inf%",
        "1e400%",
        "nan%",
        "-5%",
        "0%",
        " %",
        "1e-400%",
        "0.5",
        "0",
        "-1",
        "1e400",
        "nan",
        "inf",
        "",
        " ",
        "1.5.2MB",
        "3XB",
        "1e-3KB",
        "0.9",
        "true",
        "0x10",
        "1_000",
        "١٢٣",
    ]:
        r = run_cli(base + ["--memory", mem, "--runtime", "2x"])
        classify(f, area, f"--memory {mem!r}", r, names=("memory",), refuse=mem not in ("1e-3KB",))
    for rt in [
        "",
        " ",
        "1e400s",
        "nan",
        "nanx",
        "-1s",
        "0s",
        "0.5x",
        "1e400x",
        "inf s",
        "1e-400s",
        "abc",
        "2 x",
        "1e308x",
        "infx",
        "-infs",
        "1e-300s",
    ]:
        r = run_cli(base + ["--memory", "80%", "--runtime", rt, "--json"])
        bad_json = lambda r: "Infinity" in r.out or "NaN" in r.out
        refuse = rt not in ("2 x", "1e-300s", "1e308x")
        classify(f, area, f"--runtime {rt!r}", r, names=("runtime",), refuse=refuse, wrong_if=bad_json)
    r = run_cli(base + ["--memory", "80%", "--runtime", "1e400s", "--out", f.work / "inf.json", "--force"])
    wrote_inf = (f.work / "inf.json").exists() and "Infinity" in (f.work / "inf.json").read_text()
    classify(
        f,
        area,
        "--runtime 1e400s --out",
        r,
        names=("runtime",),
        wrong_if=lambda r: wrote_inf,
        detail="wrote Infinity into the JSON",
    )
    for opt, vals in {
        "--time-limit": ["nan", "inf", "-1", "0", "1e400"],
        "--gap": ["nan", "-1", "1", "2", "inf"],
        "--threads": ["0", "-1"],
        "--batch-size": ["0", "-1"],
        "--strategy": ["bogus", ""],
        "--method": ["bogus"],
        "--fixed-ram": ["nan", "-1", "1e400", "0.5", "inf", ""],
    }.items():
        for v in vals:
            argv = base + ["--memory", "80%", "--runtime", "2x", opt, v]
            if opt == "--batch-size":
                argv = [
                    "solve",
                    "--model",
                    "linear",
                    "--device",
                    "m4",
                    "--memory",
                    "80%",
                    "--quiet",
                    "--no-cache",
                    opt,
                    v,
                ]
            r = run_cli(argv)
            classify(
                f, area, f"{opt} {v!r}", r, names=(opt.lstrip("-").replace("-", "_"), opt, opt.lstrip("-")), refuse=True
            )
    for v in ["-1", "0", "abc", "nan", "1e400", "", "auto,3"]:
        r = run_cli(
            ["solve", "--model", "linear", "--device", "m4", "--memory", "80%", "--quiet", "--no-cache", "--tile", v]
        )
        classify(f, area, f"--tile {v!r}", r, names=("--tile", "tile"), refuse=True)
    # the device is ignored with a graph file
    r = run_cli(base + ["--memory", "80%", "--device", "a72"])
    classify(
        f,
        area,
        "--graph with --device",
        r,
        wrong_if=lambda r: r.rc == 0 and "device" not in r.err.lower(),
        detail="--device silently ignored",
    )
    # fixed RAM of 10^30 bytes
    for strat in ("poet", "remat", "paging", "chen", "capuchin", "keep-all"):
        r = run_cli(base + ["--memory", "80%", "--runtime", "2x", "--fixed-ram", "1" + "0" * 30, "--strategy", strat])
        classify(
            f,
            area,
            f"--fixed-ram 10^30 --strategy {strat}",
            r,
            names=("fixed",),
            refuse=True,
            wrong_if=lambda r: "inf s" in r.text or "internal" in r.text.lower() or "bug" in r.text.lower(),
        )
    # chen's smallest-RAM hint must be a budget at which chen is feasible
    for rt in ("1x", "1.05x", "2x", "50ms"):  # 50 ms is below this graph's plain 88.6 ms: no plan meets it
        r = run_cli(base + ["--memory", "80%", "--runtime", rt, "--strategy", "chen"])
        hint_wrong = False
        import re

        m = re.search(r"Smallest feasible RAM budget.*\((\d+) B\)", r.out)
        if m:
            r2 = run_cli(base + ["--memory", m.group(1), "--runtime", rt, "--strategy", "chen"])
            hint_wrong = r2.rc != 0
        classify(
            f,
            area,
            f"chen at --runtime {rt}: RAM hint",
            r,
            wrong_if=lambda r: hint_wrong,
            detail="the hinted RAM budget is still infeasible",
        )


def fuzz_graphs(f: Fuzz, fx: dict):
    from poet.graph.io import load_graph

    area = "graph files"
    gd = fx["graph"]
    cases: dict[str, str | bytes] = {}
    for label, raw in BAD_NUMBERS.items():
        cases[f"nodes[0].ram_bytes {label}"] = _json_with(gd, ["nodes", 0, "ram_bytes"], raw)
        cases[f"fixed_ram_bytes {label}"] = _json_with(gd, ["fixed_ram_bytes"], raw)
        cases[f"nodes[0].compute_time_s {label}"] = _json_with(gd, ["nodes", 0, "compute_time_s"], raw)
        cases[f"nodes[1].pagein_energy_j {label}"] = _json_with(gd, ["nodes", 1, "pagein_energy_j"], raw)
    cases["ram_bytes 1.5"] = _json_with(gd, ["nodes", 0, "ram_bytes"], "1.5")
    for label, raw in {"string": '"x"', "list": "[1]", "number": "3", "true": "true"}.items():
        cases[f"meta {label}"] = _json_with(gd, ["meta"], raw)
    for label, raw in {"string": '"x"', "empty list": "[]", "object": "{}", "null": "null"}.items():
        cases[f"nodes {label}"] = _json_with(gd, ["nodes"], raw)
        cases[f"edges {label}"] = _json_with(gd, ["edges"], raw)
    for label, raw in {
        "[[0]]": "[[0]]",
        "strings": '[["a", "b"]]',
        "self loop": "[[0, 0]]",
        "backwards": "[[1, 0]]",
        "float": "[[0, 1.5]]",
        "huge": "[[0, " + "1" + "0" * 30 + "]]",
        "bool": "[[true, 1]]",
        "negative": "[[-1, 1]]",
        "not a list": "[3]",
    }.items():
        cases[f"edges {label}"] = _json_with(gd, ["edges"], raw)
    for label, raw in {"list": "[1]", "object": "{}", "null": "null", "huge": HUGE_INT}.items():
        cases[f"name {label}"] = _json_with(gd, ["name"], raw)
    for label, raw in {"bogus": '"sideways"', "null": "null", "list": "[]"}.items():
        cases[f"nodes[0].kind {label}"] = _json_with(gd, ["nodes", 0, "kind"], raw)
    for label, raw in {"string": '"0"', "float": "0.0", "null": "null", "huge": HUGE_INT}.items():
        cases[f"nodes[0].id {label}"] = _json_with(gd, ["nodes", 0, "id"], raw)
    cases["nodes[0] a list"] = _json_with(gd, ["nodes", 0], "[1, 2]")
    cases["format missing"] = json.dumps({k: v for k, v in gd.items() if k != "format"})
    cases["format a list"] = _json_with(gd, ["format"], "[]")
    cases["top level list"] = "[]"
    cases["top level string"] = '"poet-graph/1"'
    cases["top level number"] = "3"
    cases["empty file"] = ""
    cases["deep nesting"] = DEEP
    cases["deep nesting inside meta"] = _json_with(gd, ["meta"], '{"a":' * 50_000 + "1" + "}" * 50_000)
    cases["5000-digit integer at top"] = HUGE_INT
    txt = json.dumps(gd)
    cases["non-UTF-8 (latin-1)"] = txt.replace('"linear"', '"lin\u00e9ar"', 1).encode("latin-1")
    cases["UTF-16"] = txt.encode("utf-16")
    cases["UTF-8 with BOM"] = b"\xef\xbb\xbf" + txt.encode()
    cases["binary garbage"] = bytes(range(256)) * 4
    cases["truncated"] = txt[: len(txt) // 2]
    for name, content in cases.items():
        p = f.work / "bad_graph.json"
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        r = run_cli(
            ["solve", "--graph", p, "--memory", "80%", "--runtime", "2x", "--quiet", "--no-cache", "--time-limit", "20"]
        )
        ok_values = (
            name.startswith(("meta", "name"))
            and not name.endswith(("string", "list", "number", "true", "huge", "object", "null"))
            or name in ("UTF-8 with BOM",)
        )
        key = name.split()[0].split(".")[-1].split("[")[0]
        classify(
            f,
            area,
            name,
            r,
            names=(key, "graph"),
            refuse=not ok_values
            and name != "edges empty list"
            and not name.startswith(("name", "nodes[0].id float"))
            and "1e30" not in name
            and "10^30" not in name
            and name not in ("meta object",),
        )
        api_call(f, area, name, load_graph, p, names=(key, "graph", str(p)), refuse=False)
    for special in ("directory", "missing"):
        p = f.work if special == "directory" else f.work / "nope.json"
        classify(
            f,
            area,
            special,
            run_cli(["solve", "--graph", p, "--memory", "80%", "--quiet", "--no-cache"]),
            names=(str(p),),
            refuse=True,
        )
        api_call(f, area, special, load_graph, p, names=(str(p),))


def fuzz_schedules(f: Fuzz, fx: dict):
    from poet.schedule.io import load_schedule

    area = "schedule files"
    sd = fx["sched"]
    page_at = next(i for i, s in enumerate(sd["steps"]) if s["op"] == "page_out")
    cases: dict[str, str | bytes] = {}
    for label, raw in {
        "string": '"abc"',
        "list": "[1]",
        "NaN": "NaN",
        "Infinity": "Infinity",
        "negative": "-1",
        "zero": "0",
        "bool": "true",
        "object": "{}",
        "1e400": "1e400",
        "5000 digits": HUGE_INT,
    }.items():
        cases[f"budget.runtime_s {label}"] = _json_with(sd, ["budget", "runtime_s"], raw)
    for label, raw in {
        "10^30": "1" + "0" * 30,
        "1e400": "1e400",
        "negative": "-1",
        "float": "1.5",
        "string": '"x"',
        "bool": "true",
        "NaN": "NaN",
        "5000 digits": HUGE_INT,
        "null": "null",
    }.items():
        cases[f"budget.ram_bytes {label}"] = _json_with(sd, ["budget", "ram_bytes"], raw)
    for label, raw in {"list": "[1, 2]", "string": '"x"', "number": "3", "null": "null"}.items():
        cases[f"budget {label}"] = _json_with(sd, ["budget"], raw)
    cases["budget.paging_time bogus"] = _json_with(sd, ["budget", "paging_time"], '"sometimes"')
    cases["budget.paging_time list"] = _json_with(sd, ["budget", "paging_time"], "[]")
    for label, raw in {
        "list": "[1]",
        "object": "{}",
        "string": '"x"',
        "negative": "-1",
        "float": "1.5",
        "bool": "true",
        "huge": HUGE_INT,
    }.items():
        cases[f"steps[{page_at}].stage {label}"] = _json_with(sd, ["steps", page_at, "stage"], raw)
    for label, raw in {
        "string": '"x"',
        "negative": "-1",
        "10^30": "1" + "0" * 30,
        "bool": "true",
        "float": "1.0",
        "huge": HUGE_INT,
    }.items():
        cases[f"steps[0].node {label}"] = _json_with(sd, ["steps", 0, "node"], raw)
    cases["steps[0].op bogus"] = _json_with(sd, ["steps", 0, "op"], '"teleport"')
    cases["steps[0].op list"] = _json_with(sd, ["steps", 0, "op"], "[]")
    cases["steps a string"] = _json_with(sd, ["steps"], '"x"')
    cases["steps an object"] = _json_with(sd, ["steps"], "{}")
    cases["steps[0] a list"] = _json_with(sd, ["steps", 0], '["compute", 0]')
    cases["status bogus"] = _json_with(sd, ["status"], '"great"')
    cases["status list"] = _json_with(sd, ["status"], "[]")
    cases["solver a list"] = _json_with(sd, ["solver"], "[1]")
    cases["solver a string"] = _json_with(sd, ["solver"], '"x"')
    cases["solver.gap a string"] = _json_with(sd, ["solver", "gap"], '"x"')
    cases["solver.gap NaN"] = _json_with(sd, ["solver", "gap"], "NaN")
    cases["solver.bound_energy_j a list"] = _json_with(sd, ["solver", "bound_energy_j"], "[]")
    cases["solver.solve_seconds a string"] = _json_with(sd, ["solver", "solve_seconds"], '"x"')
    cases["totals junk"] = _json_with(sd, ["totals"], '"x"')
    cases["strategy a list"] = _json_with(sd, ["strategy"], "[]")
    cases["graph a string"] = _json_with(sd, ["graph"], '"x"')
    cases["graph node ram_bytes null"] = _json_with(sd, ["graph", "nodes", 0, "ram_bytes"], "null")
    cases["graph node ram_bytes NaN"] = _json_with(sd, ["graph", "nodes", 0, "ram_bytes"], "NaN")
    cases["graph meta a string"] = _json_with(sd, ["graph", "meta"], '"x"')
    cases["deep nesting"] = DEEP
    cases["deep nesting in solver"] = _json_with(sd, ["solver"], '{"a":' * 50_000 + "1" + "}" * 50_000)
    txt = json.dumps(sd)
    cases["non-UTF-8"] = txt.replace('"linear"', '"lin\u00e9ar"', 1).encode("latin-1")
    cases["UTF-16"] = txt.encode("utf-16")
    cases["empty"] = ""
    cases["top-level list"] = "[]"
    fine = {
        "budget.runtime_s 5000 digits",
        "solver.solve_seconds a string",
        "totals junk",
        "strategy a list",
        "graph meta a string",
        "solver.gap a string",
        "solver.gap NaN",
        "solver.bound_energy_j a list",
        "budget.ram_bytes 10^30",
        "solver a list",
        "solver a string",
        "deep nesting in solver",
        "steps[0].node float",
        "budget.ram_bytes 5000 digits",
    }
    for name, content in cases.items():
        p = f.work / "bad_sched.json"
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        key = name.split()[0].split(".")[-1].split("[")[0]
        for cmd in ("validate", "report"):
            argv = [cmd, p] + (["--out", f.work / "rep", "--force"] if cmd == "report" else [])
            r = run_cli(argv)
            classify(f, area, f"{cmd}: {name}", r, names=(key, str(p)), refuse=name not in fine)
        api_call(f, area, name, load_schedule, p, names=(key, str(p)), refuse=False)

    # wrong answers the validator must catch
    nan_rt = _json_with(sd, ["budget", "runtime_s"], "NaN")
    r = run_cli(["validate", write(f.work / "nan_rt.json", nan_rt)])
    classify(f, "wrong answers", "validate: budget.runtime_s NaN", r, refuse=True, names=("runtime",))
    ov = fx["overlap"]
    from poet.schedule.io import schedule_from_dict

    honest = schedule_from_dict(json.loads(json.dumps(ov))).totals.runtime_s
    pages = [i for i, s in enumerate(ov["steps"]) if s["op"] in ("page_in", "page_out")]
    for label in ("page steps moved to stage 0", "stage removed", "all steps in stage 0"):
        t = copy.deepcopy(ov)
        for i, s in enumerate(t["steps"]):
            if label == "stage removed":
                s.pop("stage", None)
            elif label == "all steps in stage 0" or i in pages:
                s["stage"] = 0
        try:
            claimed = schedule_from_dict(json.loads(json.dumps({**t, "budget": {**t["budget"], "runtime_s": None}})))
            claimed_rt = claimed.totals.runtime_s
        except poet_errors():
            claimed_rt = honest
        t["budget"]["runtime_s"] = claimed_rt * 1.0000001
        r = run_cli(["validate", write(f.work / "ov.json", t)])
        overruns = claimed_rt < honest * (1 - 1e-9)
        classify(
            f,
            "wrong answers",
            f"validate overlap: {label} (honest {honest:.4g} s, claimed {claimed_rt:.4g} s)",
            r,
            names=("stage",),
            refuse=overruns,
        )
    # report repeats claims: a costlier valid schedule still marked optimal with gap 1e-6
    t = copy.deepcopy(sd)
    extra = next(s["node"] for s in t["steps"] if s["op"] == "compute")
    t["steps"].extend([{"op": "page_out", "node": t["steps"][-1]["node"]}] * 1)
    t["status"], t["solver"]["gap"] = "optimal", 1e-6
    t["solver"]["bound_energy_j"] = (t["totals"] or {}).get("energy_j", 0)
    del extra
    p = write(f.work / "claims.json", t)
    r = run_cli(["report", p, "--out", f.work / "rep_claims", "--force"])
    classify(
        f,
        "wrong answers",
        "report: costlier schedule claimed optimal (gap 1e-6)",
        r,
        wrong_if=lambda r: (
            r.rc == 0 and "1.00e-06" in r.out and "not re-checked" not in r.out and "claimed" not in r.out.lower()
        ),
        detail="repeated the file's gap and status unchecked",
    )


def fuzz_devices(f: Fuzz, fx: dict):
    from poet.hardware.device import DEVICE_DIR, load_device

    area = "device TOML"
    base = (DEVICE_DIR / "m4.toml").read_text()
    cases: dict[str, tuple[str | bytes, str]] = {}
    for label, raw in {
        "string": '"256KB"',
        "inf": "inf",
        "nan": "nan",
        "table": "{a = 1}",
        "negative": "-1",
        "float": "1.5",
        "bool": "true",
        "huge": "1" + "0" * 30,
    }.items():
        cases[f"ram_bytes {label}"] = (base.replace("ram_bytes = 262144", f"ram_bytes = {raw}"), "ram_bytes")
    for key, orig in [
        ("flops_per_s", "flops_per_s = 6369910.145 "),
        ("power_w", "power_w = 0.0109824"),
        ("read_bytes_per_s", "read_bytes_per_s = 4616510.0"),
        ("read_latency_s", "read_latency_s = 0.000109"),
    ]:
        for label, raw in {
            "nan": "nan",
            "inf": "inf",
            "-inf": "-inf",
            "bool": "true",
            "string": '"1"',
            "zero": "0",
            "negative": "-1",
            "table": "{a = 1}",
        }.items():
            if key == "power_w" and label == "zero" or key == "read_latency_s" and label == "zero":
                continue
            cases[f"{key} {label}"] = (base.replace(orig, f"{key} = {raw}"), key)
    cases["no [compute]"] = (base.replace("[compute]", "[computer]"), "compute")
    cases["name a table"] = (base.replace('name = "m4"', "name = {a = 1}"), "name")
    cases["not TOML"] = ("this is = = not toml", "TOML")
    cases["non-UTF-8"] = (base.replace("nRF52840", "nRF52840 \u00e9").encode("latin-1"), "UTF-8")
    cases["UTF-16"] = (base.encode("utf-16"), "UTF-8")
    cases["empty"] = ("", "compute")
    wrong_accept = {
        "power_w bool",
        "ram_bytes bool",
        "flops_per_s bool",
        "read_bytes_per_s bool",
        "read_latency_s bool",
    }
    for name, (content, key) in cases.items():
        p = f.work / "dev.toml"
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        r = run_cli(
            [
                "solve",
                "--model",
                "linear",
                "--device",
                p,
                "--memory",
                "80%",
                "--quiet",
                "--no-cache",
                "--time-limit",
                "20",
            ]
        )
        classify(
            f,
            area,
            name,
            r,
            names=(key,),
            refuse=True,
            wrong_if=(lambda r: r.rc == 0) if name in wrong_accept else None,
            detail="a boolean taken as a number",
        )
        api_call(f, area, name, load_device, p, names=(key,))


def _cache_env(d: Path) -> dict:
    return {"POET_CACHE_DIR": str(d)}


def fuzz_cache(f: Fuzz, fx: dict):
    area = "cache"
    lin = f.work / "lin.json"
    argv = ["solve", "--graph", lin, "--memory", "80%", "--runtime", "2x", "--quiet", "--time-limit", "30"]
    d = f.work / "cache"
    shutil.rmtree(d, ignore_errors=True)
    first = run_cli(argv, env=_cache_env(d))
    entries = list(d.glob("*.json"))
    if first.rc != 0 or len(entries) != 1:
        f.record(area, "setup", "traceback" if first.exc else "wrong", f"first solve: rc {first.rc} {first.exc[-200:]}")
        return
    entry = entries[0]
    good = json.loads(entry.read_text())
    energy_line = next((ln for ln in first.out.splitlines() if ln.strip().startswith("energy")), "")
    tampered: dict[str, str | bytes] = {
        "deep nesting": DEEP,
        "deep nesting in solver": _json_with(good, ["solver"], '{"a":' * 50_000 + "1" + "}" * 50_000),
        "status infeasible, steps []": json.dumps({**good, "status": "infeasible", "steps": []}),
        "status no_solution, steps []": json.dumps({**good, "status": "no_solution", "steps": []}),
        "non-UTF-8": json.dumps(good).encode() + b"\xff\xfe",
        "UTF-16": json.dumps(good).encode("utf-16"),
        "binary": bytes(range(256)),
        "empty": "",
        "steps a string": json.dumps({**good, "steps": "x"}),
        "steps[0] a list": _json_with(good, ["steps", 0], '["compute", 0]'),
        "step stage a dict": _json_with(good, ["steps", 0, "stage"], "{}"),
        "solver a list": json.dumps({**good, "solver": [1]}),
        "solver.gap NaN": _json_with(good, ["solver", "gap"], "NaN"),
        "time_limit_s a string": json.dumps({**good, "time_limit_s": "x"}),
        "top-level list": "[]",
        "5000-digit integer": HUGE_INT,
    }
    # a valid but costlier schedule, still marked optimal
    from poet.schedule.core import Step
    from poet.schedule.validate import validate
    from poet.solve.api import costed_graph, make_budget

    g = costed_graph(str(lin))
    b = make_budget(g, "80%", "2x")
    steps = [Step(s["op"], s["node"], s.get("stage")) for s in good["steps"]]
    base_e = validate(g, steps, b).energy_j
    costlier = None
    for i, s in enumerate(steps):  # add a page-out + page-in round trip of a freed tensor after its free
        if s.op == "free":
            trial = steps[: i + 1] + [Step("page_in", s.node)] + steps[i + 1 :] if False else None
            trial = (
                steps[:i]
                + [Step("page_out", s.node), s, Step("page_in", s.node), Step("free", s.node)]
                + steps[i + 1 :]
            )
            try:
                if validate(g, trial, b).energy_j > base_e * 1.01:
                    costlier = trial
                    break
            except Exception:
                continue
    if costlier is not None:
        tampered["costlier steps, status optimal"] = json.dumps(
            {**good, "status": "optimal", "steps": [{"op": s.op, "node": s.node} for s in costlier]}
        )
    for name, content in tampered.items():
        entry.write_bytes(content if isinstance(content, bytes) else content.encode())
        r = run_cli(argv, env=_cache_env(d))
        if name.startswith("status"):
            wrong = lambda r: r.rc != 0 or "infeasible" in r.out.lower() or "no schedule" in r.out.lower()
        elif name.startswith("costlier"):
            wrong = lambda r: "optimal" in r.out and "NOT proven" not in r.out and "cache" in r.out
        else:
            wrong = lambda r: r.rc != 0
        classify(f, area, f"entry {name}", r, wrong_if=wrong, detail=f"rc {r.rc}: {r.out[:200]}")
        entry.write_text(json.dumps(good))
    del energy_line
    # the size cap from the environment
    for val in ("nan", "-1", "abc", "", "inf", "1e400", "0x10", "-inf"):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        others = []
        for k in range(3):
            o = d / (f"{k:064x}.json")
            o.write_text(json.dumps(good))
            others.append(o)
        r = run_cli(argv + ["--memory", "81%"], env={**_cache_env(d), "POET_CACHE_MAX_MB": val})
        lost = [o for o in others if not o.exists()]
        if lost and not r.exc:
            f.record(area, f"POET_CACHE_MAX_MB={val!r}", "data loss", f"deleted {len(lost)} of 3 entries (rc {r.rc})")
            continue
        accepted = val in ("",)
        classify(f, area, f"POET_CACHE_MAX_MB={val!r}", r, names=("POET_CACHE_MAX_MB",), refuse=not accepted)


def fuzz_train(f: Fuzz, fx: dict):
    area = "train"
    mod = f.work / "fuzz_user_model.py"
    mod.write_text("def broken():\n    raise RuntimeError('the user code is broken')\ndef wrong():\n    return 3\n")
    sys.path.insert(0, str(f.work))
    base = ["train", "--model", "mlp", "--memory", "100%", "--quiet", "--no-cache", "--time-limit", "20"]
    cases = {
        "--steps 0": (base + ["--steps", "0"], ("steps",), True, None),
        "--steps -3": (base + ["--steps", "-3"], ("steps",), True, None),
        "--batch-size -1": (base + ["--steps", "1", "--batch-size", "-1"], ("batch",), True, None),
        "--batch-size 0": (base + ["--steps", "1", "--batch-size", "0"], ("batch",), True, None),
        "--lr nan --check": (base + ["--steps", "2", "--lr", "nan", "--check"], ("lr",), True, None),
        "--lr inf": (base + ["--steps", "1", "--lr", "inf"], ("lr",), True, None),
        "--lr -1": (base + ["--steps", "1", "--lr", "-1"], ("lr",), True, None),
        "--dropout 2": (base + ["--steps", "1", "--dropout", "2"], ("dropout",), True, None),
        "--dropout nan": (base + ["--steps", "1", "--dropout", "nan"], ("dropout",), True, None),
        "--time-limit nan": (base + ["--steps", "1", "--time-limit", "nan"], ("time",), True, None),
        "--model module:function that raises": (
            ["train", "--model", "fuzz_user_model:broken", "--steps", "1", "--quiet", "--no-cache"],
            ("broken",),
            True,
            None,
        ),
        "--model module:function returning 3": (
            ["train", "--model", "fuzz_user_model:wrong", "--steps", "1", "--quiet", "--no-cache"],
            ("wrong",),
            True,
            None,
        ),
        "--model missing:fn": (
            ["train", "--model", "no_such_mod_xyz:fn", "--steps", "1"],
            ("no_such_mod_xyz",),
            True,
            None,
        ),
        "--model bogus": (["train", "--model", "bogus", "--steps", "1"], ("bogus",), True, None),
        "plan --memory nan%": (["plan", "--model", "mlp", "--memory", "nan%", "--quiet"], ("memory",), True, None),
        "plan --memory 1e400%": (["plan", "--model", "mlp", "--memory", "1e400%", "--quiet"], ("memory",), True, None),
        "plan --runtime ''": (
            ["plan", "--model", "mlp", "--runtime", "", "--quiet", "--no-cache"],
            ("runtime",),
            True,
            None,
        ),
    }
    for name, (argv, names, refuse, _wrong) in cases.items():
        r = run_cli(argv)
        wrong_if = None
        if "nan --check" in name:
            wrong_if = lambda r: "nan vs nan" in r.out
        classify(f, area, name, r, names=names, refuse=refuse, wrong_if=wrong_if)


def fuzz_data_loss(f: Fuzz, fx: dict):
    area = "data loss"
    lin = f.work / "lin.json"
    # report DIR --point bogus must not write anything before it fails
    sw = f.work / "sweep"
    r = run_cli(
        [
            "sweep",
            "--model",
            lin,
            "--memory",
            "80%,90%",
            "--runtime",
            "2x",
            "--strategies",
            "keep-all,chen",
            "--out",
            sw,
            "--jobs",
            "1",
            "--quiet",
            "--no-plots",
        ]
    )
    if r.rc != 0 or r.exc:
        f.record(area, "sweep setup", "traceback" if r.exc else "wrong", (r.exc or r.err)[-300:])
    else:
        for p in sw.iterdir():
            if p.is_file() and p.suffix in (".md", ".png", ".svg"):
                p.unlink()
        before = {p.name: p.stat().st_mtime_ns for p in sw.iterdir()}
        time.sleep(0.01)
        r = run_cli(["report", sw, "--point", "bogus|1|2"])
        after = {p.name: p.stat().st_mtime_ns for p in sw.iterdir()}
        changed = [k for k in after if before.get(k) != after[k]]
        if changed and r.rc != 0:
            f.record(area, "report DIR --point bogus", "data loss", f"wrote {changed} then failed")
        else:
            classify(f, area, "report DIR --point bogus", r, names=("--point", "point"), refuse=True)
        # a damaged sweep.json: refused naming the file, nothing written
        good = (sw / "sweep.json").read_text()
        doc = json.loads(good)
        bad_docs = {
            "points a string": {**doc, "points": "x"},
            "a point a string": {**doc, "points": ["x"]},
            "a point without key": {**doc, "points": [{}]},
            "deep": "[" * 100_000,
            "points null": {**doc, "points": None},
            "non-UTF-8": b"\xff" + good.encode(),
        }
        for name, content in bad_docs.items():
            data = (
                content
                if isinstance(content, bytes)
                else (content if isinstance(content, str) else json.dumps(content)).encode()
            )
            (sw / "sweep.json").write_bytes(data)
            before = {p.name: p.stat().st_mtime_ns for p in sw.iterdir()}
            r = run_cli(["report", sw])
            after = {p.name: p.stat().st_mtime_ns for p in sw.iterdir()}
            changed = [k for k in after if k != "sweep.json" and before.get(k) != after[k]]
            if changed and r.rc != 0:
                f.record(area, f"report on a sweep.json with {name}", "data loss", f"wrote {changed} then failed")
            else:
                classify(f, area, f"report on a sweep.json with {name}", r, names=("sweep.json", "sweep"))
        (sw / "sweep.json").write_text(good)

    if os.geteuid() != 0 or not shutil.which("mount"):
        f.record(area, "full disk (skipped: needs root to mount a tmpfs)")
        return
    mnt = Path(tempfile.mkdtemp(prefix="poet-fuzz-tmpfs-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)]).returncode != 0:
        f.record(area, "full disk (skipped: mount failed)")
        return
    try:

        def fill():
            with contextlib.suppress(OSError), open(mnt / "filler", "ab") as fh:
                while True:
                    fh.write(b"\0" * 512)
                    fh.flush()
                    os.fsync(fh.fileno())

        def check(name, target: Path, old: bytes, r: Run, names=()):
            now = target.read_bytes() if target.exists() else None
            valid_new = False
            if now is not None and now != old:
                try:
                    json.loads(now)
                    valid_new = True
                except ValueError:
                    pass
            if now != old and not valid_new:
                f.record(
                    area,
                    name,
                    "data loss",
                    f"old file replaced by {0 if now is None else len(now)} bytes of broken output; rc {r.rc}",
                )
            elif leftovers := [p.name for p in mnt.iterdir() if p.name not in ("filler", target.name, "rep")]:
                f.record(area, name, "data loss", f"left behind {leftovers}")
            else:
                classify(f, area, name, r, names=names or (str(target),))

        old = b'{"my": "precious old schedule"}'
        target = mnt / "s.json"
        target.write_bytes(old)
        fill()
        r = run_cli(
            [
                "solve",
                "--graph",
                lin,
                "--memory",
                "80%",
                "--runtime",
                "2x",
                "--quiet",
                "--no-cache",
                "--out",
                target,
                "--force",
            ]
        )
        check("solve --out on a full disk, --force", target, old, r)
        target.write_bytes(old)
        r = run_cli(["export-graph", "--model", "linear", "--device", "m4", "--out", target, "--force"])
        check("export-graph --out on a full disk, --force", target, old, r)
        (mnt / "filler").unlink()
        rep = mnt / "rep"
        rep.mkdir()
        (rep / "report.md").write_bytes(b"old report")
        fill()
        r = run_cli(["report", f.work / "sched.json", "--out", rep, "--force"])
        now = (rep / "report.md").read_bytes()
        if now != b"old report" and not now.endswith(b"\n"):
            f.record(area, "report --out on a full disk", "data loss", f"report.md now {len(now)} bytes")
        elif [p for p in rep.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")]:
            f.record(area, "report --out on a full disk", "data loss", "left temporary files")
        else:
            classify(f, area, "report --out on a full disk", r, names=(str(rep),))
    finally:
        subprocess.run(["umount", str(mnt)])
        shutil.rmtree(mnt, ignore_errors=True)


AREAS = {
    "budgets": fuzz_budgets,
    "graph": fuzz_graphs,
    "schedule": fuzz_schedules,
    "device": fuzz_devices,
    "cache": fuzz_cache,
    "train": fuzz_train,
    "data-loss": fuzz_data_loss,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=list(AREAS), action="append", help="run only these areas")
    ap.add_argument("--no-train", action="store_true", help="skip the torch cases")
    ap.add_argument("--verbose", action="store_true", help="print every case, not only failures")
    ap.add_argument("--json", help="write every outcome to this file")
    a = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import poet

    print(f"fuzzing poet from {Path(poet.__file__).parent}", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="poet-fuzz-") as tmp:
        work = Path(tmp)
        os.environ["POET_CACHE_DIR"] = str(work / "default-cache")
        fz = Fuzz(work, verbose=a.verbose)
        fx = make_fixtures(work)
        for name, fn in AREAS.items():
            if (a.only and name not in a.only) or (a.no_train and name == "train"):
                continue
            try:
                fn(fz, fx)
            except Exception:
                fz.record(name, "harness", "traceback", traceback.format_exc().strip().splitlines()[-1])
    kinds = ["traceback", "wrong", "data loss", "unclear"]
    print(f"\n{len(fz.results)} cases in {time.perf_counter() - t0:.0f} s")
    print(f"{'area':<16}{'cases':>6}" + "".join(f"{k:>11}" for k in kinds))
    for area in dict.fromkeys(o.area for o in fz.results):
        rows = [o for o in fz.results if o.area == area]
        print(f"{area:<16}{len(rows):>6}" + "".join(f"{sum(o.kind == k for o in rows):>11}" for k in kinds))
    print(f"{'total':<16}{len(fz.results):>6}" + "".join(f"{sum(o.kind == k for o in fz.results):>11}" for k in kinds))
    if a.json:
        Path(a.json).write_text(json.dumps([o.__dict__ for o in fz.results], indent=1))
    return 0 if not any(o.kind != "ok" for o in fz.results) else 1


if __name__ == "__main__":
    math.isfinite(0.0)
    sys.exit(main())
