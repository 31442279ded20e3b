"""Chen et al. (2016)'s segment checkpointing: cut points, checkpoint plans, and their instructions.

The ``chen`` strategy (:mod:`poet.solve.strategies.chen`) tries every plan of
:func:`chen_plans` and keeps the cheapest that meets the budgets.
"""

from __future__ import annotations

import math

from ...graph.core import FORWARD, CostedGraph
from ...schedule.core import Op, Step
from ...units import fmt_bytes


def chain_cut_points(g: CostedGraph) -> list[int]:
    """Forward nodes that no forward edge jumps over: safe segment boundaries.

    ``c`` is a cut point when every forward edge ``(u, v)`` with ``u < c`` has
    ``v <= c``: the forward nodes after ``c`` read nothing from before ``c``
    except through ``c`` itself, so keeping ``c`` is enough to recompute them.
    """
    fwd = g.forward_ids()
    fset = set(fwd)
    cuts, furthest = [], -1
    for c in fwd:
        if furthest <= c:
            cuts.append(c)
        for s in g.succs[c]:
            if s in fset:
                furthest = max(furthest, s)
    return cuts


def segment_steps(g: CostedGraph, checkpoints) -> list[Step]:
    """Chen et al.'s segmented recomputation as an instruction list.

    Forward pass: every forward output that is not a checkpoint and lies
    before the last checkpoint is dropped as soon as its last *forward*
    reader has run (even though the backward pass will want it); checkpoints
    and the tail after the last checkpoint are kept.  Backward pass: when a
    backward node needs a dropped tensor, the missing part of its segment is
    recomputed from the nearest resident ancestors (the checkpoint), and
    every recomputed tensor stays only while a later node still needs it
    (directly, or to recompute something that is missing).  The stage of a
    recompute is the backward node it serves, like the MILP's stages.
    """
    n = len(g.nodes)
    fset = set(g.forward_ids())
    cps = set(checkpoints)
    last_cp = max(cps) if cps else -1
    droppable = {i for i in fset if i not in cps and i < last_cp}
    max_fwd_reader = [max((s for s in g.succs[i] if s in fset), default=-1) for i in range(n)]
    resident: set[int] = set()
    steps: list[Step] = []

    def needed_after(k: int, forward_phase: bool):
        """Does a node after ``k`` still need i, directly or to recompute a missing tensor?

        In the forward phase a droppable tensor counts as missing even while
        resident, because the drop rule will remove it before the backward pass.
        """
        memo: dict[int, bool] = {}

        def missing(s: int) -> bool:
            return s not in resident or (forward_phase and s in droppable)

        def need(i: int) -> bool:
            # readers before their inputs, without recursion (chains run thousands deep)
            stack = [i]
            while stack:
                v = stack[-1]
                if v in memo:
                    stack.pop()
                    continue
                pending = [s for s in g.succs[v] if s <= k and s not in memo and missing(s)]
                if pending:
                    stack.extend(pending)
                    continue
                memo[v] = any(s > k or (missing(s) and memo[s]) for s in g.succs[v])
                stack.pop()
            return memo[i]

        return need

    def ensure(x: int, stage: int):
        """Compute x and, first, every missing input, depth first (without recursion)."""
        if x in resident:
            return
        stack = [(x, iter(g.preds[x]))]
        while stack:
            v, inputs = stack[-1]
            for p in inputs:
                if p not in resident:
                    stack.append((p, iter(g.preds[p])))
                    break
            else:
                stack.pop()
                if v not in resident:
                    steps.append(Step(Op.COMPUTE, v, stage))
                    resident.add(v)

    for k in range(n):
        for p in g.preds[k]:
            ensure(p, k)
        steps.append(Step(Op.COMPUTE, k, k))
        resident.add(k)
        fwd_phase = g.nodes[k].kind == FORWARD
        need = needed_after(k, fwd_phase)
        for i in sorted(resident):
            if fwd_phase and i in droppable:
                drop = max_fwd_reader[i] <= k  # Chen: interiors are not kept for the backward pass
            else:
                drop = not need(i)
            if drop:
                resident.discard(i)
                steps.append(Step(Op.FREE, i, k))
    return steps


def chen_plans(g: CostedGraph) -> dict[str, list[int]]:
    """Checkpoint sets: the sqrt(n) rule, and Chen's memory-greedy rule over a grid of budgets.

    sqrt(n): every ~sqrt(n)-th forward node, snapped forward to the next cut
    point.  Greedy (Chen et al. 2016, Sec. 4.3): walk the forward nodes adding
    up output sizes and close a segment at the first cut point once the sum
    exceeds ``B``; ``B`` is searched on a geometric grid, as in the paper.
    """
    cuts = chain_cut_points(g)
    fwd = g.forward_ids()
    plans: dict[str, list[int]] = {}
    if not fwd:
        return {"sqrt(n)": []}
    stride = max(1, round(math.sqrt(len(fwd))))
    chosen: list[int] = []
    for j in range(stride - 1, len(fwd), stride):
        c = next((c for c in cuts if c >= fwd[j]), None)
        if c is not None and c not in chosen:
            chosen.append(c)
    plans[f"sqrt(n): every ~{stride} forward nodes"] = chosen
    cutset = set(cuts)
    sizes = [g.nodes[i].ram_bytes for i in fwd]
    total, biggest = sum(sizes), max(sizes)
    if total > 0 and biggest > 0:
        lo, hi = math.log(max(biggest, 1)), math.log(total)
        for j in range(16):
            b = math.exp(lo + (hi - lo) * j / 15)
            cps, acc = [], 0
            for i, sz in zip(fwd, sizes):
                acc += sz
                if i in cutset and acc > b:
                    cps.append(i)
                    acc = 0
            if cps and cps not in plans.values():
                plans[f"greedy B={fmt_bytes(b)}"] = cps
    return plans
