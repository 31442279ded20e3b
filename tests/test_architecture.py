"""The import graph of ``poet``: no cycles, no private names across modules, the packages of ``poet``
and the layers of ``poet.solve`` one way, and commands that do not need torch, matplotlib or OR-Tools
never load them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "poet"

# The packages of poet (and its top-level modules), lowest first: each imports only from the ones
# before it, so there is no cycle between packages.  Data flows model -> graph -> costs (hardware)
# -> solver -> schedule -> execute / report, and the command line sits on top.
PACKAGE_ORDER = [
    "units",  # byte, second and budget parsing
    "fileio",  # atomic writes, bounded reads
    "console",  # the terminal side of the commands: progress line, Ctrl-C, --out checks
    "graph",  # graphs, the zoo, tracing PyTorch, the tiling rewrite of zoo graphs
    "hardware",  # device profiles and the cost model (prices graphs and traced programs)
    "schedule",  # the instructions, the budget, the validator, the report
    "solve",  # the solvers: poet.solve.api.plan_and_solve is the front door
    "sweep",  # grids of budgets, studies
    "report",  # text, tables and plots of schedules and sweeps
    "demo_models",  # small trainable models and generated data
    "execute",  # schedules run on real tensors (PyTorch), the tiling of traced programs
    "cbackend",  # schedules compiled to C
    "planner",  # poet.plan: a PyTorch module in, an executable plan out
    "poet",  # the package itself: poet.solve, poet.plan, ... (its __init__)
    "cli",  # the command line, one module per command
    "__main__",  # python -m poet
]

# poet.solve's layers, lowest first: a module may import only from its own layer or the ones before
SOLVE_LAYERS = [
    ["errors", "policy", "options", "progress", "result"],
    ["stage"],
    ["lp"],
    ["milp", "bounds", "reader_gaps", "residency_bound", "residency_stretches"],
    ["baselines", "problem"],
    ["search"],
    ["min_budgets"],
    ["phases"],
    ["strategies"],
    ["cache", "headroom"],
    ["api"],
    ["tiled"],
]
HEAVY = ("torch", "matplotlib", "ortools")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def imports(name: str, mods: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """(poet module imported, names taken from it, line) for every import in the module, at any depth
    (an import inside a function is an edge too)."""
    tree = ast.parse(mods[name].read_text())
    here = name if is_package(name, mods) else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "poet"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "poet":
                continue
            names = [a.name for a in node.names]
            subs = [n for n in names if f"{target}.{n}" in mods]
            for n in subs:
                out.append((f"{target}.{n}", [], node.lineno))
            rest = [n for n in names if n not in subs]
            if rest or not subs:
                out.append((target, rest, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {t for t, _, _ in imports(m, mods) if t in mods and t != m} for m in mods}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_finds_the_modules_and_their_edges():
    g = graph()
    assert "poet.solve.phases.answer" in g and "poet.solve.stage.emit" in g
    assert "poet.solve.stage.emit" in g["poet.solve.phases.answer"]
    assert "poet.solve.phases.state" in g["poet.solve.phases.milp"]
    assert "poet.solve.cache" in g["poet.solve.api"]  # `from . import cache as disk`
    assert "poet.solve.search.intervals" in g["poet.solve.phases.guide_search"]  # `from ..search import intervals`


def test_there_is_no_import_cycle_in_poet():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_private_name_of_another():
    mods = modules()
    bad = []
    for m in mods:
        for target, names, line in imports(m, mods):
            if target == m:
                continue
            bad += [f"{m}:{line} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
            last = target.rpartition(".")[2]
            if last.startswith("_") and not last.startswith("__"):
                bad.append(f"{m}:{line} imports the private module {target}")
    assert bad == []


def package_of(name: str) -> str:
    """The package (or top-level module) of ``poet`` a module belongs to; ``poet`` for its __init__."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "poet"


def package_order_violations(g: dict[str, set[str]], order: list[str]) -> list[str]:
    rank = {p: i for i, p in enumerate(order)}
    bad = []
    for m, targets in sorted(g.items()):
        a = package_of(m)
        for t in sorted(targets):
            b = package_of(t)
            if a != b and rank[b] >= rank[a]:
                bad.append(f"{m} ({a}) imports {t} ({b}), which comes after it in PACKAGE_ORDER")
    return bad


def test_every_package_of_poet_has_a_place_in_the_order():
    assert len(set(PACKAGE_ORDER)) == len(PACKAGE_ORDER)
    missing = sorted({package_of(m) for m in modules()} - set(PACKAGE_ORDER))
    assert missing == [], f"add {missing} to PACKAGE_ORDER, after what they import and before what imports them"
    gone = sorted(set(PACKAGE_ORDER) - {package_of(m) for m in modules()})
    assert gone == [], f"{gone} are in PACKAGE_ORDER but not in poet"


def test_the_packages_of_poet_only_import_the_ones_before_them():
    assert package_order_violations(graph(), PACKAGE_ORDER) == []


def test_the_package_order_check_finds_an_upward_import():
    g = {"poet.graph.core": {"poet.hardware.device"}, "poet.hardware.device": {"poet.graph.core"}}
    assert package_order_violations(g, ["graph", "hardware"]) == [
        "poet.graph.core (graph) imports poet.hardware.device (hardware), which comes after it in PACKAGE_ORDER"
    ]


def package_cycles(g: dict[str, set[str]], packages: list[str]) -> dict[str, list[list[str]]]:
    """Per package, the cycles among its children (modules and subpackages, a subpackage standing
    for every module inside it): a cycle between packages that no cycle between modules shows."""
    out = {}
    for pkg in packages:
        depth = len(pkg.split(".")) + 1

        def child(m: str, pkg=pkg, depth=depth) -> str | None:
            return ".".join(m.split(".")[:depth]) if m.startswith(pkg + ".") else None

        cg: dict[str, set[str]] = {}
        for m, targets in g.items():
            a = child(m)
            if a is None:
                continue
            cg.setdefault(a, set())
            for t in targets:
                b = child(t)
                if b is not None and b != a:
                    cg[a].add(b)
                    cg.setdefault(b, set())
        found = cycles(cg)
        if found:
            out[pkg] = found
    return out


def test_no_package_of_poet_at_any_level_has_an_import_cycle():
    mods = modules()
    packages = sorted(m for m in mods if is_package(m, mods))
    assert {"poet", "poet.solve", "poet.solve.search", "poet.cbackend", "poet.cli"} <= set(packages)
    assert package_cycles(graph(), packages) == {}


def test_the_package_cycle_check_finds_a_cycle_no_module_cycle_shows():
    # a.x -> b.y and b.z -> a.w: no module cycle, but packages a and b import each other
    g = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert cycles(g) == []
    assert package_cycles(g, ["p"]) == {"p": [["p.a", "p.b"]]}


def test_the_readme_lists_the_package_order():
    # README's "Layout" names the packages lowest first, as PACKAGE_ORDER does
    text = (ROOT / "README.md").read_text()
    layout = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    found = [p for p in PACKAGE_ORDER if f"`poet.{p}`" in layout]
    positions = [layout.index(f"`poet.{p}`") for p in found]
    assert set(found) >= set(PACKAGE_ORDER) - {"poet", "__main__"}
    assert positions == sorted(positions), "README's Layout lists the packages out of PACKAGE_ORDER's order"


def solve_layer(name: str) -> int | None:
    parts = name.split(".")
    if parts[:2] != ["poet", "solve"] or len(parts) < 3:
        return None
    for i, layer in enumerate(SOLVE_LAYERS):
        if parts[2] in layer:
            return i
    raise AssertionError(f"{name} is in no layer of SOLVE_LAYERS: add it where it belongs")


def test_the_solve_layers_only_import_downward():
    g = graph()
    bad = []
    for m, targets in g.items():
        lm = solve_layer(m)
        if lm is None:
            continue
        for t in targets:
            lt = solve_layer(t)
            if t == "poet.solve":
                bad.append(f"{m} imports the package poet.solve (the top) ")
            elif lt is not None and lt > lm:
                bad.append(f"{m} (layer {lm}) imports {t} (layer {lt})")
    assert bad == []


def run_python(code: str, cwd: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "POET_CACHE_DIR": str(cwd / "cache"), "HOME": str(cwd)},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["devices"],
        [
            "solve",
            "--model",
            "linear",
            "--device",
            "m4",
            "--memory",
            "80%",
            "--runtime",
            "1.2x",
            "--quiet",
            "--out",
            "s.json",
        ],
    ],
)
def test_commands_that_need_neither_torch_nor_matplotlib_nor_ortools_do_not_load_them(argv, tmp_path):
    code = f"""
import contextlib, io, json, sys
import poet.cli
loaded = [m for m in {HEAVY!r} if m in sys.modules]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        rc = poet.cli.main({argv!r})
    except SystemExit as e:
        rc = e.code
    if {argv[0]!r} == "solve":
        rc = rc or poet.cli.main(["validate", "s.json"])
print(json.dumps({{"at_import": loaded, "rc": rc, "after": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    got = run_python(code, tmp_path)
    assert got == {"at_import": [], "rc": 0, "after": []}


def test_the_docs_in_order_table_lists_the_phases_in_order_with_their_modules():
    # docs/pipeline.md's "In order" table is poet.solve.phases.PHASES: a newcomer reads the order there
    from poet.solve.phases import PHASES

    text = (ROOT / "docs" / "pipeline.md").read_text()
    section = text.split("\n## In order\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert [cells[2].strip().strip("`") for cells in rows] == [phase.name for phase in PHASES]
    modules = [cells[3].strip().strip("`") for cells in rows]
    assert modules == [type(phase).__module__.rpartition(".")[2] + ".py" for phase in PHASES]
    assert [int(cells[1]) for cells in rows] == list(range(1, len(PHASES) + 1))
