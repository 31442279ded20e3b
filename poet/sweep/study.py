"""Studies: sweeps of several models x devices run as one, and their summary.

A study is given on the command line (``--model a,b --device m4,a72``: every model on every device
with one grid) or in a TOML file (``--study study.toml``, see docs/sweeps.md) whose entries may each
have their own grid.  Each model x device is an ordinary sweep directory inside the study
directory; on top of them ``study.json`` names the sweeps, and ``study.md``/``study.csv`` give POET's
saving over the best single technique (remat-only or paging-only) at every point of every sweep.
All points of all sweeps share one backend, so a cluster is kept busy across sweeps.
"""

from __future__ import annotations

import csv
import io
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..fileio import atomic_write_text, read_json
from ..units import fmt_energy
from .grid import (
    DEFAULT_STRATEGIES,
    SweepError,
    SweepSpec,
    check_size,
    parse_list,
    parse_memory_range,
)
from .reuse import best_single
from .runner import SweepRun, drive

STUDY_FORMAT = "poet-study/1"
GRID_KEYS = ("memory", "steps", "runtime", "strategies", "time_limit", "paging_time", "batch_size", "gap", "method")
ENTRY_KEYS = ("models", "devices") + GRID_KEYS
GRID_DEFAULTS = {
    "memory": "10%..100%",
    "steps": 10,
    "runtime": "1.0x,1.2x,2x",
    "strategies": ",".join(DEFAULT_STRATEGIES),
    "time_limit": 60.0,
    "paging_time": "serial",
    "batch_size": 1,
    "gap": 1e-3,
    "method": "auto",
    "tile": "auto",
}
SUMMARY_COLUMNS = [
    "model",
    "device",
    "memory",
    "ram_budget_bytes",
    "ram_fraction",
    "runtime",
    "runtime_budget_x",
    "poet_status",
    "poet_energy_j",
    "remat_energy_j",
    "paging_energy_j",
    "best_single",
    "best_single_energy_j",
    "saving",
    "plain_energy_j",
]


@dataclass
class StudySweep:
    """One model x device of a study: its grid and its directory's name inside the study."""

    spec: SweepSpec
    name: str


def sweep_name(model: str, device: str | None) -> str:
    return f"{Path(model).stem}-{device or 'graph'}"


def spec_from(model: str, device: str | None, grid: dict, threads: int | None = None, where: str = "") -> SweepSpec:
    """A sweep's spec from grid values as the command line or a study file gives them."""
    g = {**GRID_DEFAULTS, **{k: v for k, v in grid.items() if v is not None}}

    def name(key):  # as the user wrote it: a key of the study file, or the command line's option
        return f"{where}{key}" if where else "--" + key.replace("_", "-")

    def text(key):
        v = g[key]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return ",".join(v)
        if isinstance(v, str):
            return v
        raise SweepError(f"{name(key)} must be a string or a list of strings, not {v!r}")

    def number(key, kind):
        v = g[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
            raise SweepError(f"{name(key)} must be {'an integer' if kind is int else 'a number'}, not {v!r}")
        return kind(v)

    runtimes = parse_list(text("runtime"), name("runtime"), example="1.2x,2x")
    strategies = parse_list(text("strategies"), name("strategies"), example="poet,remat,paging")
    mem = g["memory"]
    items = mem if isinstance(mem, list) else [text("memory")]
    if not all(isinstance(x, str) for x in items):
        raise SweepError(f"{name('memory')} must be a string or a list of strings, not {mem!r}")
    steps = number("steps", int)
    if ".." in "".join(items):  # a range: refuse a huge grid before its budgets are listed
        check_size(steps * sum(".." in x for x in items), len(runtimes), len(strategies))
    memories = list(dict.fromkeys(m for x in items for m in parse_memory_range(x, steps)))
    return SweepSpec(
        model=model,
        device=device,
        memories=memories,
        runtimes=runtimes,
        strategies=strategies,
        paging_time=text("paging_time"),
        time_limit_s=number("time_limit", float),
        batch_size=number("batch_size", int),
        gap=number("gap", float),
        threads=threads,
        method=text("method"),
        tile=str(g["tile"]) if isinstance(g["tile"], int) and not isinstance(g["tile"], bool) else text("tile"),
    )


def study_from_lists(
    models: list[str], devices: list[str | None], grid: dict, threads: int | None = None
) -> list[StudySweep]:
    """Every model on every device, all with one grid."""
    return _unique([StudySweep(spec_from(m, d, grid, threads), sweep_name(m, d)) for m in models for d in devices])


def load_study(path, grid: dict, threads: int | None = None) -> list[StudySweep]:
    """The sweeps of a study file.  Top-level keys are the grid of every entry; each ``[[sweep]]``
    entry (or the top level itself, if it names ``models``) is every one of its models on every one
    of its devices.  Values the file leaves out come from ``grid`` (the command line's)."""
    p = Path(path)
    try:
        d = tomllib.loads(p.read_text())
    except OSError as e:
        raise SweepError(f"cannot read study file {p}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SweepError(f"study file {p} is not valid TOML: {e}") from None
    top = {k: v for k, v in d.items() if k != "sweep"}
    _check_keys(top, ENTRY_KEYS, f"{p}")
    entries = d.get("sweep", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SweepError(f"{p}: sweep must be a list of tables ([[sweep]] entries)")
    labelled = [(f"{p}: [[sweep]] number {i + 1}: ", e) for i, e in enumerate(entries)]
    if "models" in top:
        labelled.insert(0, (f"{p}: ", {}))  # the top level is an entry of its own
    if not labelled:
        raise SweepError(f"{p} names no sweep: give models = [...] and devices = [...], or [[sweep]] entries")
    base = {**grid, **{k: top[k] for k in GRID_KEYS if k in top}}
    out = []
    for where, e in labelled:
        _check_keys(e, ENTRY_KEYS, where.rstrip(": "))
        merged = {**top, **e}
        models = _names(merged.get("models"), "models", where)
        devices = _names(merged.get("devices", [""]), "devices", where, allow_empty=True)
        g = {**base, **{k: e[k] for k in GRID_KEYS if k in e}}
        for m in models:
            for dev in devices:
                out.append(StudySweep(spec_from(m, dev or None, g, threads, where), sweep_name(m, dev or None)))
    return _unique(out)


def _check_keys(d: dict, allowed, where: str) -> None:
    bad = sorted(set(d) - set(allowed))
    if bad:
        raise SweepError(
            f"{where}: unknown key{'s' if len(bad) > 1 else ''} {', '.join(bad)}; a study file knows "
            f"{', '.join(allowed)} (and [[sweep]] entries)"
        )


def _names(v, key: str, where: str, allow_empty: bool = False) -> list[str]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or not (v or allow_empty):
        example = '["linear", "vgg16_cifar"]' if key == "models" else '["m4", "a72"]'
        raise SweepError(f"{where}{key} must be a non-empty list of names, e.g. {key} = {example}")
    return v


def _unique(sweeps: list[StudySweep]) -> list[StudySweep]:
    seen = {}
    for s in sweeps:
        if s.name in seen:
            raise SweepError(
                f"the study has {s.spec.model} on {s.spec.device} twice (directory {s.name}); "
                f"list every model x device once"
            )
        seen[s.name] = s
    return sweeps


def run_study(
    sweeps: list[StudySweep],
    out,
    backend,
    *,
    force: bool = False,
    retry: bool = False,
    progress: bool = True,
    stream=None,
) -> list[dict]:
    """Run (or resume) every sweep of a study into ``out/NAME``; returns their sweep documents."""
    out = Path(out)
    runs = [
        SweepRun(
            s.spec,
            out / s.name,
            force=force,
            retry=retry,
            label=f"{Path(s.spec.model).stem}@{s.spec.device or 'graph'}",
        )
        for s in sweeps
    ]
    _prepare_study_dir(out, force)
    manifest = {
        "format": STUDY_FORMAT,
        "sweeps": [{"dir": s.name, "model": s.spec.model, "device": s.spec.device} for s in sweeps],
    }
    old = _load_manifest(out)
    if old:  # a study resumed with more (or other) sweeps keeps naming the ones it had
        names = {s["dir"] for s in manifest["sweeps"]}
        manifest["sweeps"] += [s for s in old.get("sweeps", []) if s.get("dir") not in names]
    atomic_write_text(out / "study.json", json.dumps(manifest, indent=1))
    drive(runs, backend, progress=progress, stream=stream)
    return [r.doc for r in runs]


def _prepare_study_dir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / "study.json").exists() and not force:
        raise SweepError(
            f"--out {out} exists, is not empty and holds no study.json; refusing to write into it "
            f"(choose another --out, or pass --force)"
        )
    out.mkdir(parents=True, exist_ok=True)


def _load_manifest(out: Path) -> dict | None:
    try:
        d = read_json(out / "study.json", "study file", SweepError)
    except SweepError:
        return None
    return d if isinstance(d, dict) and d.get("format") == STUDY_FORMAT else None


# -- the summary ------------------------------------------------------------------------


def _num(x):
    return None if x in (None, "") else float(x)


def saving_rows(docs: list[dict]) -> list[dict]:
    """One row per (model, device, RAM budget, deadline): POET's energy, the best single technique's,
    and POET's saving over it (a fraction of the single technique's energy)."""
    out = []
    for doc in docs:
        ident, plain = doc["identity"], doc["context"]["plain_energy_j"]
        by = {(r["strategy"], r["memory"], r["runtime"]): r for r in doc["points"]}
        single = best_single(doc["points"])
        seen = {}
        for r in doc["points"]:
            seen.setdefault((r["memory"], r["runtime"]), r)
        for (mem, rt), r in seen.items():
            poet = by.get(("poet", mem, rt))
            pe = _num(poet.get("energy_j")) if poet else None
            best = single.get((mem, rt))
            out.append(
                {
                    "model": ident["model"],
                    "device": ident["device"],
                    "memory": mem,
                    "ram_budget_bytes": r["ram_budget_bytes"],
                    "ram_fraction": r.get("ram_fraction"),
                    "runtime": rt,
                    "runtime_budget_x": r.get("runtime_budget_x"),
                    "poet_status": poet.get("status") if poet else None,
                    "poet_energy_j": pe,
                    "remat_energy_j": _num((by.get(("remat", mem, rt)) or {}).get("energy_j")),
                    "paging_energy_j": _num((by.get(("paging", mem, rt)) or {}).get("energy_j")),
                    "best_single": best[1] if best else None,
                    "best_single_energy_j": best[0] if best else None,
                    "saving": (best[0] - pe) / best[0] if best and pe is not None and best[0] > 0 else None,
                    "plain_energy_j": plain,
                }
            )
    return out


def sweep_summaries(docs: list[dict]) -> list[dict]:
    """Per sweep: how many points are proven, POET's largest saving and where, and the solver time."""
    rows = saving_rows(docs)
    out = []
    for doc in docs:
        ident = doc["identity"]
        pts = doc["points"]
        mine = [r for r in rows if r["model"] == ident["model"] and r["device"] == ident["device"]]
        best = max((r for r in mine if r["saving"] is not None), key=lambda r: r["saving"], default=None)
        only = [
            r
            for r in mine
            if r["poet_energy_j"] is not None
            and r["best_single_energy_j"] is None
            and (r["remat_energy_j"] is None and r["paging_energy_j"] is None)
        ]
        out.append(
            {
                "model": ident["model"],
                "device": ident["device"],
                "points": len(pts),
                "planned": len(doc["spec"]["memories"]) * len(doc["spec"]["runtimes"]) * len(doc["spec"]["strategies"]),
                "proven": sum(r.get("status") in ("optimal", "infeasible") for r in pts),
                "unproven": sum(r.get("status") in ("feasible", "heuristic") for r in pts),
                "no_schedule": sum(r.get("status") in ("no_solution", "error") for r in pts),
                "solve_seconds": sum(float(r.get("solve_seconds") or 0) for r in pts if not r.get("reused_from")),
                "plain_energy_j": doc["context"]["plain_energy_j"],
                "best_saving": best["saving"] if best else None,
                "best_at": f"{best['memory']} / {best['runtime']}" if best and abs(best["saving"]) > 1e-9 else "",
                "only_poet_fits": len(only),
            }
        )
    return out


def study_markdown(docs: list[dict]) -> str:
    lines = [
        "# Study: POET's saving over the best single technique",
        "",
        (
            "Saving: (best of remat-only and paging-only - POET) / that best, at the same RAM budget and "
            "deadline; the largest over each sweep's grid.  `only POET` counts the points where POET "
            "has a schedule and neither single technique does.  Proven: optimal or infeasible."
        ),
        "",
        (
            "| model | device | plain pass | points | proven | unproven | no schedule | largest saving | at "
            "(RAM / deadline) | only POET | solver time |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sweep_summaries(docs):
        x = s["best_saving"]
        sav = "" if x is None else "none" if abs(x) <= 1e-9 else f"{x:.1%}"
        pts = f"{s['points']}" + ("" if s["points"] == s["planned"] else f" of {s['planned']}")
        lines.append(
            f"| {s['model']} | {s['device']} | {fmt_energy(s['plain_energy_j'])} | {pts} | {s['proven']} | "
            f"{s['unproven']} | {s['no_schedule']} | {sav} | {s['best_at']} | {s['only_poet_fits']} | "
            f"{s['solve_seconds']:.0f} s |"
        )
    lines += ["", "Every point: `study.csv`; each sweep's tables and plots: its directory.", ""]
    return "\n".join(lines)


def study_csv(docs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in saving_rows(docs):
        w.writerow({c: ("" if r.get(c) is None else r[c]) for c in SUMMARY_COLUMNS})
    return buf.getvalue()


def write_study_summary(out, docs: list[dict]) -> list[Path]:
    """``study.md`` and ``study.csv`` (each written whole or not at all)."""
    out = Path(out)
    atomic_write_text(out / "study.md", study_markdown(docs))
    atomic_write_text(out / "study.csv", study_csv(docs))
    return [out / "study.md", out / "study.csv"]
