"""Record what a refactor of the solver must not change, and compare two records.

    python bench/refactor_check.py --out before.json          # on the old code
    python bench/refactor_check.py --out after.json           # on the new code
    python bench/refactor_check.py --compare before.json after.json

It records, deterministically (no timing enters a record):

* ``milp``: a SHA-256 of every array of the POET MILP (``milp.formulation.build``) for several graphs,
  budgets and strategies, faithful and tightened;
* ``lp``: a SHA-256 of every LP/MILP handed to HiGHS while the eviction cover (energy and runtime
  objectives, chains cut, too large to solve so the flow bound runs) is computed on those graphs,
  with the bound and the guide it returns (captured at ``highspy.Highs.passModel``, so it does not
  depend on how the code above HiGHS is organised);
* ``plans``: a SHA-256 of the plan of every greedy rule (plain, guided by the cover, guided once,
  checkpointed), of the one-pass paging schedule, the idle-gap plan and the Capuchin-style steps on
  those graphs and budgets (no time limit: deterministic);
* ``tiled``: a SHA-256 of the tiled graph (``poet-graph/1`` JSON) and the budget of several zoo
  models at budgets below their untiled minimum;
* ``traced``: a SHA-256 of the tiled graph of traced PyTorch demo models (``execute.tiled``), tiled
  for a budget below their untiled minimum or to a forced tile count, with the counts tried;
* ``solve``: status, method, energy, gap and a SHA-256 of the steps of a subset of the zoo table
  (``bench/zoo_table.py``'s grid: budgets 20% and 60% of the way from the hard minimum to the
  keep-all peak, 1.2x, gap 1%) that the portfolio proves within seconds, the ``remat``, ``paging``
  and faithful paths, two infeasible cases, and ``poet solve --model resnet18_cifar --device m0
  --memory 32KiB --time-limit 60`` (tiled, 2,922 nodes) through the command line.

Cases whose answer depends on when a time limit cuts a search are left out: two runs of the same
code would differ.  It takes 3-6 minutes on the shared 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import io
import json
import sys

import highspy
import numpy as np

from poet import solve
from poet.graph.io import graph_to_dict
from poet.solve.api import costed_graph, make_budget
from poet.solve.baselines import keep_all_peak
from poet.solve.bounds import eviction_cover
from poet.solve.milp.formulation import build

GRAPHS = [
    ("linear", "m4"),
    ("vgg16_cifar", "a72"),
    ("resnet18_cifar", "m4"),
    ("transformer", "m4"),
    ("layered:60:1", "a72"),
]
# (RAM as a fraction of the way from the hard minimum to the keep-all peak, as zoo_table.py places it; deadline)
BUDGETS = [(0.2, "1.2x"), (0.5, "2x"), (0.3, None), (0.02, "1.05x")]
TILED = [("resnet18_cifar", "m0", "32KiB"), ("resnet18_cifar", "m0", "16KiB"), ("vgg16_cifar", "m4", "256KiB")]
# (model, device, RAM fraction of the way from the minimum to the keep-all peak): proven within seconds
ZOO = [
    ("linear", "a72", 0.2),
    ("linear", "m4", 0.2),
    ("linear", "m4", 0.6),
    ("resnet18", "m4", 0.2),  # proven by the guide search
    ("vgg16", "m4", 0.2),
    ("vgg16_cifar", "a72", 0.2),
    ("vgg16_cifar", "m4", 0.2),
    ("vgg16_cifar", "m4", 0.6),
    ("resnet18", "a72", 0.2),
    ("resnet18", "m4", 0.6),
    ("resnet18_cifar", "a72", 0.2),
    ("resnet18_cifar", "m4", 0.6),
    ("resnet50", "a72", 0.6),
    ("bert", "a72", 0.2),
    ("bert", "m4", 0.2),
    ("transformer", "a72", 0.2),
    ("transformer", "m4", 0.6),
]
# other paths through the solver: (model, device, RAM fraction as above, runtime, strategy, method)
PATHS = [
    ("linear", "m4", 0.3, "1.2x", "remat", "auto"),
    ("linear", "m4", 0.3, "1.2x", "paging", "auto"),
    ("resnet18_cifar", "a72", 0.4, "1.2x", "remat", "auto"),
    ("vgg16_cifar", "m4", 0.3, "2x", "paging", "auto"),
    ("linear", "m4", 0.3, "1.2x", "poet", "faithful"),
    ("linear", "m4", 0.2, "1.2x", "poet", "warm"),
    ("transformer", "m4", 0.3, "1.2x", "poet", "fast"),
    ("layered:60:1", "a72", 0.6, "1.5x", "poet", "auto"),
    ("layered:60:1", "a72", 0.5, "2x", "remat", "auto"),
    ("linear", "m4", 0.0, "1.0001x", "poet", "auto"),  # deadline too short: the cover proves it
    ("linear", "m4", -0.1, None, "poet", "auto"),  # below the largest node: the size bound
]


def ram_at(g, frac: float) -> int:
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


def sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def text_sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:16]


@contextlib.contextmanager
def captured_models(into: list):
    """Every model passed to HiGHS inside the block, hashed."""
    original = highspy.Highs.passModel

    def spy(self, lp, *a, **kw):
        m = lp.a_matrix_
        into.append(
            sha(
                lp.col_cost_,
                lp.col_lower_,
                lp.col_upper_,
                lp.row_lower_,
                lp.row_upper_,
                m.start_,
                m.index_,
                m.value_,
                np.array([int(v) for v in lp.integrality_], dtype=np.int64),
            )
        )
        return original(self, lp, *a, **kw)

    highspy.Highs.passModel = spy
    try:
        yield
    finally:
        highspy.Highs.passModel = original


def milp_records() -> dict:
    out = {}
    for model, dev in GRAPHS:
        g = costed_graph(model, dev)
        for frac, rt in BUDGETS:
            mem = f"{frac:.0%}"
            b = make_budget(g, ram_at(g, frac), rt)
            for remat, paging in ((True, True), (True, False), (False, True)):
                for tighten in (False, True):
                    p = build(g, b, remat=remat, paging=paging, tighten=tighten).problem
                    key = f"milp {model}/{dev} {mem} {rt} remat={remat} paging={paging} tighten={tighten}"
                    out[key] = sha(p.c, p.col_lo, p.col_hi, p.integer, p.starts, p.index, p.value, p.row_lo, p.row_hi)
    return out


def lp_records() -> dict:
    out = {}
    for model, dev in GRAPHS:
        g = costed_graph(model, dev)
        for frac, rt in BUDGETS:
            mem = f"{frac:.0%}"
            b = make_budget(g, ram_at(g, frac), rt)
            variants = {
                "energy": dict(time_limit=None),
                "time": dict(time_limit=None, objective="time"),
                "remat-only": dict(time_limit=None, paging=False),
                "chains cut": dict(time_limit=None, chain_depth=1, max_links=0),
                "too large (flow bound)": dict(time_limit=1e-9),
            }
            for name, kw in variants.items():
                models: list = []
                with captured_models(models):
                    lb, guide = cover_of(g, b, **kw)
                guide_text = json.dumps(sorted((int(k), str(v)) for k, v in guide.items()))
                out[f"cover {model}/{dev} {mem} {rt} {name}"] = {
                    "bound": repr(float(lb)),
                    "guide": text_sha(guide_text),
                    "evictions": len(guide),
                    "models": models,
                }
    return out


def plan_sha(plan) -> str | None:
    if plan is None:
        return None
    d = [
        [sorted(c) for c in plan.comp],
        [sorted(k) for k in plan.keep],
        [sorted((k, sorted(v)) for k, v in i.items()) for i in plan.ins],
        [sorted(o) for o in plan.outs],
    ]
    return text_sha(json.dumps(d))


def cover_of(g, b, **kw):
    """(bound, guide) of the eviction cover, whichever form it returns them in (and takes its chain
    depth in: arguments before the refactor, SolvePolicy fields after)."""
    if "chain_depth" in kw and "policy" in inspect.signature(eviction_cover).parameters:
        from poet.solve.policy import SolvePolicy

        kw["policy"] = SolvePolicy(cover_chain_depth=kw.pop("chain_depth"), cover_max_links=kw.pop("max_links"))
    r = eviction_cover(g, b, **kw)
    return (r.bound, r.guide) if hasattr(r, "bound") else r


def plan_records() -> dict:
    """The greedy rules' plans (each rule, guided by the cover, guided once, checkpointed), the
    one-pass paging schedule, the idle-gap plan and the Capuchin-style steps: no time limit, so
    deterministic."""
    from poet.solve.baselines import capuchin_plan
    from poet.solve.search.gap_drops import gap_drop_plan
    from poet.solve.search.greedy import checkpointed, greedy_plan, rule_names
    from poet.solve.search.stream import stream_schedule

    out = {}
    for model, dev in GRAPHS + [("resnet50", "m4")]:
        g = costed_graph(model, dev)
        for frac, rt in BUDGETS if len(g) <= 200 else BUDGETS[:1]:
            b = make_budget(g, ram_at(g, frac), rt)
            where = f"{model}/{dev} {frac:.0%} {rt}"
            for remat, paging in ((True, True), (True, False)):
                _, guide = cover_of(g, b, remat=remat, paging=paging, time_limit=None)
                runs = [(r, None, False) for r in rule_names(remat, paging)]
                runs += [("energy", guide, False), ("energy", guide, True), ("remat", checkpointed(g, guide), False)]
                for prefer, gd, once in runs:
                    p = greedy_plan(g, b, remat=remat, paging=paging, prefer=prefer, guide=gd, guide_once=once)
                    kind = "guided" if gd is guide and gd else "checkpointed" if gd else "plain"
                    out[f"greedy {where} remat={remat} paging={paging} {prefer} {kind} once={once}"] = plan_sha(p)
            found = stream_schedule(g, b)
            if found is not None and not isinstance(found, tuple):
                found = (found.steps, found.energy_j, found.runtime_s) if found.steps else None
            out[f"one-pass {where}"] = (
                None
                if found is None
                else [text_sha(json.dumps([[str(st.op), st.node, st.stage] for st in found[0]])), repr(found[1])]
            )
            out[f"gap drops {where}"] = plan_sha(gap_drop_plan(g, b))
            if len(g) <= 200:  # it replays the whole plan every round: minutes on resnet50
                cap = capuchin_plan(g, b)
                steps = cap.steps if hasattr(cap, "steps") else cap[1]
                out[f"capuchin {where}"] = text_sha(json.dumps([[str(st.op), st.node, st.stage] for st in steps]))
        print(f"  plans {model}/{dev}", file=sys.stderr)
    return out


def tiled_records() -> dict:
    from poet.solve.tiled import tiled_problem

    out = {}
    for model, dev, mem in TILED:
        p = tiled_problem(model, dev, memory=mem, runtime="3x")
        d = graph_to_dict(p.graph)
        out[f"tiled {model}/{dev} {mem}"] = {
            "graph": text_sha(json.dumps(d, sort_keys=True)),
            "nodes": len(p.graph),
            "budget": [p.budget.ram_bytes, repr(p.budget.runtime_s), p.budget.paging_time],
        }
    return out


# traced PyTorch programs (demo models): (model, batch size, RAM as a fraction of the untiled minimum or a
# forced tile count)
TRACED = [("cnn", 4, 0.5), ("cnn", 4, 2), ("mlp", 8, 0.3), ("dwcnn", 4, 0.4), ("gpt", 1, 0.5), ("gpt", 1, 4)]


def costed(program, dev):
    """A traced program priced on ``dev`` (``TorchProgram.costed`` before the pricing moved to
    ``poet.hardware.cost``)."""
    try:
        from poet.hardware.cost import costed_program
    except ImportError:
        return program.costed(dev)
    return costed_program(program, dev)


def traced_records() -> dict:
    """The tiled graph (``poet-graph/1`` JSON, costed on m4) of demo models traced at the aten level,
    tiled for a budget below their untiled minimum (the count search) or to a forced count."""
    import torch

    from poet.execute.tiled import tile_for_budget
    from poet.graph.torch_export import export_training_graph
    from poet.hardware.device import load_device

    try:
        from poet.demo_models import build
    except ImportError:  # before the demo models moved out of poet.execute
        from poet.execute.models import build

    out = {}
    dev = load_device("m4")
    for model, bs, how in TRACED:
        torch.manual_seed(0)
        net, loss_fn, data = build(model, batch_size=bs, seed=0, dropout=0.0)
        net.train()
        inputs, targets = data.batch()
        prog = export_training_graph(net, inputs, loss_fn, targets, name=model)
        untiled_min = costed(prog, dev).min_ram_bytes()
        if isinstance(how, int):
            choice = tile_for_budget(prog, dev, untiled_min, count=how)
        else:
            choice = tile_for_budget(prog, dev, int(untiled_min * how))
        g = costed(choice.program, dev)
        out[f"traced {model} bs={bs} {how}"] = {
            "graph": text_sha(json.dumps(graph_to_dict(g), sort_keys=True)),
            "nodes": len(g),
            "tried": [list(t) for t in choice.tried],
            "tiled_min": choice.tiled_min_bytes,
            "lines": text_sha("\n".join(choice.lines())),
        }
        print(f"  traced {model} {how}: {len(g)} nodes, tried {choice.tried}", file=sys.stderr)
    return out


def schedule_record(s) -> dict:
    steps = json.dumps([[str(st.op), st.node, st.stage] for st in s.steps])
    return {
        "status": s.status,
        "method": s.report.method,
        "energy_j": None if s.totals is None else repr(s.totals.energy_j),
        "gap": None if s.report.gap is None else f"{s.report.gap:.6e}",
        "bound": None if s.report.bound_energy_j is None else repr(s.report.bound_energy_j),
        "steps": text_sha(steps),
        "num_steps": len(s.steps),
    }


def solve_records() -> dict:
    out = {}
    for model, dev, frac in ZOO:
        g = costed_graph(model, dev)
        s = solve(g, memory=ram_at(g, frac), runtime="1.2x", time_limit=30, gap=0.01, find_min_budgets=False)
        out[f"zoo {model}/{dev} {frac:.0%} 1.2x"] = schedule_record(s)
        print(
            f"  zoo {model}/{dev} {frac:.0%}: {s.status} {s.report.method} {s.report.solve_seconds:.1f} s",
            file=sys.stderr,
        )
    for model, dev, frac, rt, strategy, method in PATHS:
        g = costed_graph(model, dev)
        mem = f"{frac:.0%}"
        s = solve(g, memory=ram_at(g, frac), runtime=rt, strategy=strategy, method=method, time_limit=60, gap=0.01)
        mb = s.report.min_budgets
        rec = schedule_record(s)
        rec["min_budgets"] = [mb.ram_bytes, mb.ram_bytes_lower_bound, mb.runtime_s, repr(mb.runtime_s_lower_bound)]
        out[f"path {model}/{dev} {mem} {rt} {strategy} {method}"] = rec
        print(f"  path {model}/{dev} {mem} {strategy} {method}: {s.status} {s.report.method}", file=sys.stderr)
    return out


def cli_records() -> dict:
    from poet.cli import main

    argv = ["solve", "--model", "resnet18_cifar", "--device", "m0", "--memory", "32KiB"]
    argv += ["--time-limit", "60", "--json", "--no-cache", "--quiet"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    d = json.loads(buf.getvalue())
    sv = d["solver"]
    print(f"  poet {' '.join(argv)}: {d['status']} {sv.get('method')} {sv.get('solve_seconds')}", file=sys.stderr)
    return {
        "cli " + " ".join(argv[:8]): {
            "rc": rc,
            "status": d["status"],
            "method": sv.get("method"),
            "energy_j": repr(sv.get("energy_j")),
            "gap": None if sv.get("gap") is None else f"{sv['gap']:.6e}",
            "nodes": d["nodes"],
            "num_steps": d["num_steps"],
            "tiling": sv.get("tiling", {}).get("nodes_after"),
        }
    }


def compare(a_path: str, b_path: str) -> int:
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    keys = sorted(set(a) | set(b))
    diff = [k for k in keys if a.get(k) != b.get(k)]
    for k in diff:
        print(f"DIFFERS {k}:\n  {a_path}: {a.get(k)}\n  {b_path}: {b.get(k)}")
    print(f"{len(keys) - len(diff)} of {len(keys)} records identical" + ("" if diff else " (all)"))
    return 1 if diff else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the record here (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", default="milp,lp,plans,tiled,traced,solve,cli", help="which sections to record")
    a = ap.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    rec: dict = {}
    sections = {"milp": milp_records, "lp": lp_records, "plans": plan_records, "tiled": tiled_records}
    sections["solve"] = solve_records
    sections["cli"] = cli_records
    sections["traced"] = traced_records
    for name in a.only.split(","):
        print(f"{name} ...", file=sys.stderr)
        rec.update(sections[name]())
    text = json.dumps(rec, indent=1, sort_keys=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print(f"{len(rec)} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
