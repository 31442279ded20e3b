"""The picture of a study: POET's saving over the best single technique, per model and device."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MARKERS = "osD^v<>pPX*h"


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


def saving_plot(rows: list[dict], out, stem: str = "saving") -> list[Path]:
    """One panel per deadline: POET's saving (in % of the best single technique's energy) against
    the RAM budget, one line per model x device.  ``rows``: :func:`poet.sweep.study.saving_rows`."""
    out = Path(out)
    runtimes = sorted(
        {r["runtime"] for r in rows},
        key=lambda rt: next(
            (float(r["runtime_budget_x"]) if r["runtime_budget_x"] not in (None, "") else math.inf)
            for r in rows
            if r["runtime"] == rt
        ),
    )
    runtimes = runtimes or ["none"]
    n = len(runtimes)
    fig, axes = plt.subplots(1, n, figsize=(4.8 * n + 1.8, 4.0), sharey=True, squeeze=False)
    series = sorted({(r["model"], r["device"]) for r in rows})
    for ax, rt in zip(axes[0], runtimes):
        for j, (model, device) in enumerate(series):
            pts = sorted(
                (float(r["ram_fraction"]) * 100, r["saving"] * 100)
                for r in rows
                if r["runtime"] == rt
                and r["model"] == model
                and r["device"] == device
                and r["saving"] is not None
                and r["ram_fraction"] not in (None, "")
            )
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker=MARKERS[j % len(MARKERS)],
                    ms=5,
                    label=f"{Path(str(model)).stem} / {device}",
                )
        ax.axhline(0, color="k", lw=0.8, ls=":")
        ax.set_title(f"deadline {rt}", fontsize=10)
        ax.set_xlabel("RAM budget (% of the way from fixed RAM to the keep-all peak)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("POET's saving over the best\nsingle technique (% of its energy)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    else:
        axes[0][0].text(
            0.5,
            0.5,
            "no point where POET and a single technique\nboth have a schedule",
            transform=axes[0][0].transAxes,
            ha="center",
            va="center",
            fontsize=9,
        )
    fig.suptitle("Joint remat + paging against the better of remat-only and paging-only", fontsize=11)
    fig.tight_layout()
    return _save(fig, out, stem)
