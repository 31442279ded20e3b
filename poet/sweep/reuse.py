"""Filling in a point from finished ones, only where that is provably its answer.

Three exact arguments are used (docs/sweeps.md, "Reusing solves"): the lower bound of one plain
pass, dominance of an optimum at looser budgets for a containing strategy, and infeasibility at
looser budgets.  Heuristic strategies (chen, capuchin) are never filled in from others.
"""

from __future__ import annotations

import math

from ..schedule.core import FEASIBLE, HEURISTIC, INFEASIBLE, OPTIMAL

# Which strategies' feasible sets contain which (at equal budgets): a schedule of
# the key strategy that is optimal is a lower bound for the listed ones.
SUPERSETS = {
    "poet": ("poet", "remat", "paging", "keep-all"),
    "remat": ("remat", "keep-all"),
    "paging": ("paging", "keep-all"),
    "keep-all": ("keep-all",),
}
_RTOL = 1e-6


def _deadline(row) -> float:
    return math.inf if row.get("runtime_budget_s") in (None, "") else float(row["runtime_budget_s"])


def _fits(row: dict, ram: int, deadline: float) -> bool:
    return (
        row.get("peak_ram_bytes") is not None
        and int(row["peak_ram_bytes"]) <= ram
        and float(row["runtime_s"]) <= deadline * (1 + _RTOL)
    )


def _in_space(row: dict, strategy: str) -> bool:
    """Is this finished schedule a member of ``strategy``'s search space?"""
    paged = (row.get("page_ins") or 0) + (row.get("page_outs") or 0) > 0
    recomputed = (row.get("recomputes") or 0) > 0
    if strategy == "poet":
        return True
    if strategy == "remat":
        return not paged
    if strategy == "paging":
        return not recomputed
    if strategy == "keep-all":
        return not paged and not recomputed
    return False


def reusable(strategy: str, ram: int, deadline: float, done: list[dict], plain_energy_j: float):
    """A finished row whose result is provably the answer at (strategy, ram, deadline), or None.

    Returns ``(row, status, why)``.  Only exact arguments are used:

    * lower bound: every node is computed at least once and paging costs are
      non-negative, so a schedule of energy equal to one plain pass is optimal
      for every strategy whose space holds it, at any budget it fits;
    * dominance: an optimal schedule of strategy S at budgets (M', T') that are
      no tighter than (M, T), where S's space contains the target strategy's
      (poet contains remat and paging; all contain keep-all), that fits
      (M, T) and lies in the target's space, is optimal there (within the gap
      it was proven to);
    * infeasibility: proven infeasible at looser budgets for a strategy whose
      space contains the target's means infeasible here.

    Heuristic strategies (chen, capuchin) are never filled in from others.
    """
    if strategy not in SUPERSETS:
        return None
    for r in done:
        if r.get("status") not in (OPTIMAL, FEASIBLE, HEURISTIC) or r.get("energy_j") is None:
            continue
        if (
            float(r["energy_j"]) <= plain_energy_j * (1 + 1e-9)
            and _fits(r, ram, deadline)
            and _in_space(r, strategy)
            and r.get("schedule_file")
        ):
            return r, OPTIMAL, "energy equals the lower bound (one plain pass) and the schedule fits"
    for r in done:
        src = r.get("strategy")
        if src not in SUPERSETS or strategy not in SUPERSETS[src]:
            continue
        looser = int(r["ram_budget_bytes"]) >= ram and _deadline(r) >= deadline
        if not looser:
            continue
        if r.get("status") == OPTIMAL and r.get("schedule_file") and _fits(r, ram, deadline) and _in_space(r, strategy):
            return r, OPTIMAL, f"optimal for {src} at looser budgets and fits these"
        if r.get("status") == INFEASIBLE:  # MILP proofs, or keep-all's fixed peak/runtime
            return r, INFEASIBLE, f"{src} proven infeasible at looser budgets"
    return None


def pick(todo: list, running, budgets: dict):
    """The first point of ``todo`` that no running point of a containing strategy dominates (else the
    first): a point that a running one may settle waits for it."""
    for p in todo:
        s, m, r = p
        b = budgets[(m, r)]
        blocked = False
        for q in running:
            qs, qm, qr = q
            if qs in SUPERSETS and s in SUPERSETS[qs]:
                bq = budgets[(qm, qr)]
                if bq.ram_bytes >= b.ram_bytes and (bq.runtime_s or math.inf) >= (b.runtime_s or math.inf):
                    blocked = True
                    break
        if not blocked:
            return p
    return todo[0]


def best_single(rows: list[dict]) -> dict:
    """Per (memory, runtime): the best energy of remat-only and paging-only (for savings tables)."""
    out: dict = {}
    for r in rows:
        if r["strategy"] in ("remat", "paging") and r.get("energy_j") not in (None, ""):
            k = (r["memory"], r["runtime"])
            e = float(r["energy_j"])
            if k not in out or e < out[k][0]:
                out[k] = (e, r["strategy"])
    return out
