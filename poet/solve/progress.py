"""Telling the caller which step a solve is in (the CLI's progress line), without ever failing it."""

from __future__ import annotations


def report_progress(opts, phase: str, **d) -> None:
    """Tell the caller's progress callback which step the solve is in (and the best energy and bound so
    far, in joules): on 5,000 nodes a step takes minutes.  A failing callback never stops the solve."""
    if opts.progress is None:
        return
    try:
        opts.progress({"phase": phase, "energy_unit_j": 1.0, **d})
    except Exception:
        pass
