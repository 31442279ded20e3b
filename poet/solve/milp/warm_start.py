"""Between the MILP's columns and stage plans: reading a solution back, and writing a plan in as a warm start.

:func:`decode` turns a MILP solution into a :class:`~poet.solve.stage.plan.Plan`;
:func:`plan_to_start` writes any plan (the greedy's, the interval search's) into every column
of a formulation, free-edge and RAM columns included, so HiGHS starts from a complete incumbent.
"""

from __future__ import annotations

import numpy as np

from ...graph.core import CostedGraph
from ..lp.problem import max_violation
from ..stage.emit import freed_after, last_readers
from ..stage.plan import Plan
from .formulation import Formulation


def decode(f: Formulation, x: np.ndarray) -> Plan:
    T = f.T
    plan = Plan.empty(T)
    on = lambda col: col >= 0 and x[col] > 0.5  # noqa: E731
    for t in range(T):
        plan.comp[t] = [k for k in range(t + 1) if on(f.R[t, k])]
        plan.keep[t] = {i for i in range(T) if on(f.S[t, i])}
        plan.outs[t] = {i for i in range(t + 1) if on(f.O[t, i])}
    for (t, i), lst in f.I.items():
        for k, col in lst:
            if x[col] > 0.5:
                plan.ins[t].setdefault(k, []).append(i)
    return plan


def plan_to_start(f: Formulation, g: CostedGraph, plan: Plan) -> tuple[np.ndarray | None, str]:
    """Every column of ``f`` (free-edge and RAM columns included) from a plan: a complete warm start.

    Returns (x, "") or (None, why) when the plan does not map onto this formulation.
    """
    p = f.problem
    x = np.zeros(p.num_cols)
    T = f.T
    stored: set[int] = set()

    def put(col, what):
        if col < 0:
            raise KeyError(what)
        x[col] = 1.0

    try:
        for t in range(T):
            for i in plan.keep[t]:
                put(f.S[t, i], f"S[{t},{i}]")
            for i in stored:
                if f.D[t, i] >= 0:
                    x[f.D[t, i]] = 1.0
            for k in plan.comp[t]:
                put(f.R[t, k], f"R[{t},{k}]")
            for k, lst in plan.ins[t].items():
                for i in lst:
                    col = dict(f.I.get((t, i), ())).get(k, -1)
                    put(col, f"I[{t},{i},{k}]")
            for i in plan.outs[t]:
                put(f.O[t, i], f"O[{t},{i}]")
                stored.add(i)
            # free-edge columns: i freed right after computing k (same rule as emit)
            keep_next = plan.keep[t + 1] if t + 1 < T else set()
            comp = plan.comp[t]
            later_reader = last_readers(g, comp)
            for k in comp:
                for i in freed_after(g, k, later_reader, keep_next):
                    col = f.F.get((t, k, i), -1)
                    if col >= 0:
                        x[col] = 1.0
    except KeyError as e:
        return None, f"plan uses a variable the formulation pruned: {e.args[0]}"
    # continuous columns (U, overlap z) from their defining rows
    for col, exprs, const in f.defs:
        x[col] = max(0.0, max(sum(v * x[c] for c, v in e) for e in exprs) + const)
    viol = max_violation(p, x)
    if viol > 1e-7:
        return None, f"plan violates the formulation by {viol:.2e}"
    return x, ""
