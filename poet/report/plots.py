"""Figures (PNG + SVG) of sweeps and schedules, drawn with matplotlib's non-interactive backend."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..schedule.core import Op  # noqa: E402
from ..units import fmt_bytes  # noqa: E402

STYLE = {  # strategy -> (colour, marker, label)
    "poet": ("#d62728", "o", "POET (remat + paging)"),
    "remat": ("#1f77b4", "s", "remat only (MILP)"),
    "paging": ("#2ca02c", "^", "paging only (MILP)"),
    "capuchin": ("#9467bd", "D", "Capuchin-style greedy"),
    "capuchin-paper": ("#8c564b", "P", "Capuchin as published"),
    "pofo": ("#e377c2", "*", "POFO (chain DP)"),
    "chen": ("#ff7f0e", "v", "Chen sqrt(n) checkpointing"),
    "keep-all": ("#444444", "x", "keep-all (plain backprop)"),
}
ORDER = ("poet", "remat", "paging", "capuchin", "chen", "keep-all")


def _save(fig, out: Path, stem: str) -> list[Path]:
    from ..fileio import atomic_write

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    try:
        atomic_write(paths[0], lambda f: fig.savefig(f, format="png", dpi=130, bbox_inches="tight"), binary=True)
        atomic_write(paths[1], lambda f: fig.savefig(f, format="svg", bbox_inches="tight"), binary=True)
    finally:
        plt.close(fig)
    return paths


def _unit(max_bytes: float) -> tuple[float, str]:
    for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if max_bytes >= scale:
            return scale, name
    return 1.0, "B"


def _f(x):
    return None if x in (None, "") else float(x)


def _rt_label(row) -> str:
    return "no deadline" if row.get("runtime_budget_s") in (None, "") else f"deadline {row['runtime']}"


def _strategies(rows):
    seen = {r["strategy"] for r in rows}
    return [s for s in ORDER if s in seen] + sorted(seen - set(ORDER))


def _style(s):
    return STYLE.get(s, ("#17becf", ".", s))


class _Overhead:
    """Energy drawn as the extra over one plain pass, in percent, on a log axis.

    The interesting differences between strategies are often a small fraction
    of the total (paging on the A72 costs ~1e-4 of a pass), so absolute joules
    would put every line on top of each other.  Exactly-plain points (0 %)
    are drawn on a floor line labelled as such.
    """

    def __init__(self, rows, plain):
        self.plain = plain
        pos = [self.raw(_f(r.get("energy_j"))) for r in rows if _f(r.get("energy_j")) is not None]
        pos = [v for v in pos if v > 0]
        self.floor = (min(pos) / 4) if pos else 1e-4
        self.top = max(pos) * 2 if pos else 1.0

    def raw(self, e):
        return (e / self.plain - 1.0) * 100.0

    def __call__(self, e):
        v = self.raw(e)
        return self.floor if v <= self.floor * 1.0001 else v

    def style(self, ax):
        ax.set_yscale("log")
        ax.set_ylim(self.floor / 1.8, self.top)
        ax.axhline(self.floor, color="k", lw=0.8, ls=":", zorder=0)
        ax.text(
            0.01,
            self.floor * 1.12,
            "0 % (exactly one plain pass)",
            transform=ax.get_yaxis_transform(),
            fontsize=7.5,
            color="0.3",
            va="bottom",
        )


YLABEL = "energy above one plain pass (% , log)"


def sweep_plots(doc: dict, out) -> list[Path]:
    out = Path(out)
    paths = energy_vs_ram(doc, out)
    paths += energy_vs_runtime(doc, out)
    return paths


def energy_vs_ram(doc: dict, out: Path, stem: str = "energy_vs_ram") -> list[Path]:
    rows = doc["points"]
    c = doc["context"]
    ident = doc["identity"]
    plain = c["plain_energy_j"]
    runtimes = sorted(
        {r["runtime"] for r in rows},
        key=lambda rt: next((_f(r["runtime_budget_s"]) or math.inf) for r in rows if r["runtime"] == rt),
    )
    n = len(runtimes)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n + 0.6, 4.2), sharey=True, squeeze=False)
    ov = _Overhead(rows, plain)
    sc, un = _unit(max(int(r["ram_budget_bytes"]) for r in rows))
    for ax, rt in zip(axes[0], runtimes):
        sub = [r for r in rows if r["runtime"] == rt]
        for j, s in enumerate(_strategies(sub)):
            col, mk, lab = _style(s)
            pts = sorted(
                (int(r["ram_budget_bytes"]), _f(r.get("energy_j")), r["status"]) for r in sub if r["strategy"] == s
            )
            xs = [p[0] / sc for p in pts if p[1] is not None]
            ys = [ov(p[1]) for p in pts if p[1] is not None]
            # a small horizontal offset per strategy keeps coinciding markers visible
            ax.plot(
                xs,
                ys,
                color=col,
                marker=mk,
                ms=6 - 0.5 * j,
                lw=1.4,
                alpha=0.9,
                label=lab,
                mfc=col if s != "keep-all" else "none",
            )
            unproven = [(p[0] / sc, ov(p[1])) for p in pts if p[1] is not None and p[2] == "feasible"]
            if unproven:
                ax.scatter(*zip(*unproven), s=90, facecolors="none", edgecolors=col, lw=1.2, zorder=5)
        ov.style(ax)
        ax.axvline(c["min_ram_bytes"] / sc, color="0.5", lw=0.8, ls="--")
        ax.axvline(c["keep_all_peak_bytes"] / sc, color="0.5", lw=0.8, ls="-.")
        ax.set_title(
            _rt_label(sub[0])
            + (f" ({_f(sub[0]['runtime_budget_s']):.4g} s)" if sub[0].get("runtime_budget_s") not in (None, "") else "")
        )
        ax.set_xlabel(f"RAM budget ({un})")
        ax.grid(True, which="both", alpha=0.25)
    axes[0][0].set_ylabel(YLABEL)
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[0][1:]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    extra = [
        Line2D([], [], color="0.5", ls="--", lw=0.8, label="smallest possible RAM"),
        Line2D([], [], color="0.5", ls="-.", lw=0.8, label="keep-all peak"),
        Line2D([], [], color="0.3", marker="o", mfc="none", ls="", ms=9, label="not proven optimal"),
    ]
    fig.legend(
        list(seen.values()) + extra,
        list(seen) + [e.get_label() for e in extra],
        loc="upper center",
        ncol=4,
        bbox_to_anchor=(0.5, 1.13),
        fontsize=8.5,
        frameon=False,
    )
    fig.suptitle(
        f"{ident['model']} on {ident['device']}: energy vs RAM budget (one plain pass = {plain:.4g} J; "
        f"paging time {ident['paging_time']}; missing point = infeasible or no schedule found)",
        y=1.17,
        fontsize=11,
    )
    fig.tight_layout()
    return _save(fig, out, stem)


def energy_vs_runtime(doc: dict, out: Path, stem: str = "energy_vs_runtime") -> list[Path]:
    rows = [r for r in doc["points"] if r.get("runtime_budget_s") not in (None, "")]
    if len({r["runtime"] for r in rows}) < 2:
        return []
    c = doc["context"]
    ident = doc["identity"]
    plain = c["plain_energy_j"]
    mems = sorted({(int(r["ram_budget_bytes"]), r["memory"]) for r in rows})
    useful = [
        m
        for m in mems
        if any(
            r["memory"] == m[1] and r.get("energy_j") not in (None, "") and r["strategy"] != "keep-all" for r in rows
        )
    ]
    useful = [m for m in useful if m[0] < c["keep_all_peak_bytes"]] or useful
    if len(useful) > 4:
        idx = sorted({round(k * (len(useful) - 1) / 3) for k in range(4)})
        useful = [useful[k] for k in idx]
    if not useful:
        return []
    n = len(useful)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 0.6, 4.0), sharey=True, squeeze=False)
    ov = _Overhead(rows, plain)
    for ax, (ram, mem) in zip(axes[0], useful):
        sub = [r for r in rows if r["memory"] == mem]
        for j, s in enumerate(_strategies(sub)):
            col, mk, lab = _style(s)
            pts = sorted((_f(r["runtime_budget_x"]), _f(r.get("energy_j"))) for r in sub if r["strategy"] == s)
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [ov(p[1]) for p in pts],
                    color=col,
                    marker=mk,
                    ms=6 - 0.5 * j,
                    lw=1.4,
                    label=lab,
                    mfc=col if s != "keep-all" else "none",
                )
        ov.style(ax)
        ax.set_title(f"RAM budget {mem} ({fmt_bytes(ram)})")
        ax.set_xlabel("runtime budget (x one plain pass)")
        ax.grid(True, which="both", alpha=0.25)
    axes[0][0].set_ylabel(YLABEL)
    seen = {}
    for ax in axes[0]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="upper center",
        ncol=3,
        bbox_to_anchor=(0.5, 1.1),
        fontsize=8.5,
        frameon=False,
    )
    fig.suptitle(
        f"{ident['model']} on {ident['device']}: energy vs deadline (one plain pass = {plain:.4g} J)",
        y=1.14,
        fontsize=11,
    )
    fig.tight_layout()
    return _save(fig, out, stem)


# -- one schedule ------------------------------------------------------------------------

# Drawn per (stage, node); when several happen in one stage the later entry wins
# (e.g. a node computed and paged out in the same stage shows as page-out).
CATEGORIES = ["not in RAM", "in RAM", "on storage only", "compute", "recompute", "page-out", "page-in"]
COLOURS = ["#ffffff", "#c6dbef", "#fdd0a2", "#2171b5", "#d62728", "#8c510a", "#31a354"]


def schedule_matrix(s):
    """stages x nodes category codes (indexes into :data:`CATEGORIES`) and the stage labels."""
    import numpy as np

    g = s.graph
    n = len(g.nodes)
    stages = []
    stage_of = []
    for k, st in enumerate(s.steps):
        t = st.stage if st.stage is not None else k
        if not stages or stages[-1] != t:
            stages.append(t)
        stage_of.append(len(stages) - 1)
    T = len(stages)
    M = np.zeros((T, n), dtype=np.int8)
    resident: set[int] = set()
    stored: set[int] = set()
    computed = [0] * n
    last_in = {}
    for k, st in enumerate(s.steps):
        if st.op == Op.PAGE_IN:
            last_in[st.node] = stage_of[k]
    prev = -1

    def paint_state(row):
        for v in resident:
            M[row, v] = max(M[row, v], 1)
        for v in stored - resident:
            if last_in.get(v, -1) >= row and M[row, v] == 0:
                M[row, v] = 2

    for k, st in enumerate(s.steps):
        row = stage_of[k]
        if row != prev:
            paint_state(row)  # what is held when the stage begins
            prev = row
        v = st.node
        if st.op == Op.COMPUTE:
            computed[v] += 1
            code = 3 if computed[v] == 1 else 4
            resident.add(v)
        elif st.op == Op.PAGE_OUT:
            stored.add(v)
            code = 5
        elif st.op == Op.PAGE_IN:
            resident.add(v)
            code = 6
        else:
            resident.discard(v)
            code = 1 if M[row, v] < 1 else M[row, v]
        if code >= 3:
            M[row, v] = max(M[row, v], code) if not (M[row, v] >= 5 and code < 5) else M[row, v]
        else:
            M[row, v] = max(M[row, v], code)
        if k + 1 == len(s.steps) or stage_of[k + 1] != row:
            paint_state(row)  # and what is held when it ends
    return M, stages


def schedule_plots(s, out, stem: str = "schedule", title: str = "") -> list[Path]:
    out = Path(out)
    return schedule_picture(s, out, stem + "_picture", title) + ram_plot(s, out, stem + "_ram", title)


def schedule_picture(s, out: Path, stem: str, title: str = "") -> list[Path]:
    M, stages = schedule_matrix(s)
    g = s.graph
    T, n = M.shape
    size = min(11.0, max(5.0, 0.045 * max(T, n) + 3))
    fig, ax = plt.subplots(figsize=(size + 1.8, size))
    ax.imshow(M, cmap=ListedColormap(COLOURS), vmin=0, vmax=len(COLOURS) - 1, interpolation="nearest", aspect="auto")
    bwd = [i for i, nd in enumerate(g.nodes) if nd.kind == "backward"]
    if bwd:
        ax.axvline(min(bwd) - 0.5, color="k", lw=0.6, ls="--")
        ax.text(min(bwd) - 0.5, T - 1, " backward nodes \u2192", fontsize=8, va="bottom", ha="left", color="0.3")
    ax.set_xlabel("node id (forward nodes, then backward nodes)")
    ax.set_ylabel("stage (solver stage; time runs downwards)")
    t = s.totals
    sub = ""
    if t is not None:
        sub = (
            f"\nenergy {t.energy_j:.4g} J ({t.energy_j / g.plain_energy_j:.3f}x plain), "
            f"{t.recomputes} recomputes, {t.page_outs} page-outs, {t.page_ins} page-ins, "
            f"peak {fmt_bytes(t.peak_ram_bytes)} of {fmt_bytes(s.budget.ram_bytes)}"
        )
    ax.set_title(f"{g.name}: schedule {title}{sub}", fontsize=10)
    counts = [(M == k).sum() for k in range(len(CATEGORIES))]
    handles = [
        Patch(facecolor=COLOURS[k], edgecolor="0.6", label=CATEGORIES[k])
        for k in range(1, len(CATEGORIES))
        if counts[k] or k in (3, 1)
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    return _save(fig, out, stem)


def ram_plot(s, out: Path, stem: str, title: str = "") -> list[Path]:
    from ..schedule.validate import simulate
    from ..solve.baselines import keep_all_peak

    trace = simulate(s.graph, s.steps, s.budget).ram_after_step
    g = s.graph
    fig, ax = plt.subplots(figsize=(9, 3.6))
    xs = list(range(1, len(trace) + 1))
    kp = keep_all_peak(g)
    sc, un = _unit(max(max(trace), s.budget.ram_bytes, kp))
    ax.step(xs, [b / sc for b in trace], where="post", color="#2171b5", lw=1.2, label="RAM in use")
    ax.axhline(
        s.budget.ram_bytes / sc, color="#d62728", ls="--", lw=1.2, label=f"budget {fmt_bytes(s.budget.ram_bytes)}"
    )
    ax.axhline(kp / sc, color="0.4", ls=":", lw=1.0, label=f"keep-all peak {fmt_bytes(kp)}")
    ins = [k + 1 for k, st in enumerate(s.steps) if st.op == Op.PAGE_IN]
    outs = [k + 1 for k, st in enumerate(s.steps) if st.op == Op.PAGE_OUT]
    seen: dict[int, int] = {}
    rec = []
    for k, st in enumerate(s.steps):
        if st.op == Op.COMPUTE:
            seen[st.node] = seen.get(st.node, 0) + 1
            if seen[st.node] > 1:
                rec.append(k + 1)
    y0 = 0
    if rec:
        ax.plot(rec, [y0] * len(rec), "|", color="#d62728", ms=10, label=f"recompute ({len(rec)})")
    if outs:
        ax.plot(outs, [y0] * len(outs), "|", color="#8c510a", ms=14, label=f"page-out ({len(outs)})")
    if ins:
        ax.plot(ins, [y0] * len(ins), "|", color="#31a354", ms=14, label=f"page-in ({len(ins)})")
    first_bwd = next(
        (k + 1 for k, st in enumerate(s.steps) if st.op == Op.COMPUTE and g.nodes[st.node].kind == "backward"), None
    )
    if first_bwd:
        ax.axvline(first_bwd, color="0.6", lw=0.8)
        ax.text(first_bwd, ax.get_ylim()[1] * 0.98, " backward pass", fontsize=8, va="top", color="0.4")
    ax.set_xlabel("step of the instruction list")
    ax.set_ylabel(f"RAM ({un})")
    ax.set_xlim(0, len(trace) + 1)
    ax.set_ylim(bottom=-0.04 * max(max(trace), s.budget.ram_bytes, kp) / sc)
    ax.set_title(f"{g.name}: RAM over the schedule {title}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False)
    ax.grid(True, alpha=0.25)
    return _save(fig, out, stem)
