"""Simple rule-based schedules, for exercising the executor without a solver.

* ``keep``   -- compute in order, free each output after its last reader;
* ``remat``  -- forward outputs that are not checkpoints (every ``every``-th
  forward node) are freed after their last forward reader and recomputed on
  demand in the backward pass;
* ``paging`` -- the same forward outputs are paged out once and paged back in
  when the backward pass needs them.

They are valid (replayed by the validator) but make no optimality claim; the
solver strategies (``poet.solve``) are what you plan with.
"""

from __future__ import annotations

from ..graph.core import BACKWARD, FORWARD, CostedGraph
from ..schedule.core import HEURISTIC, Budget, Op, Schedule, Step
from ..schedule.report import SolveReport
from ..schedule.validate import validate

KINDS = ("keep", "remat", "paging")


def reference_steps(g: CostedGraph, kind: str = "keep", every: int = 4) -> list[Step]:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n = len(g)
    succs, preds = g.succs, g.preds
    fwd = [v for v in range(n) if g.nodes[v].kind == FORWARD]
    # forward outputs the backward pass reads
    needed_bwd = {u for v in range(n) if g.nodes[v].kind == BACKWARD for u in preds[v] if g.nodes[u].kind == FORWARD}
    ckpt = set(fwd[:: max(1, every)]) if kind != "keep" else set(fwd)
    droppable = {u for u in needed_bwd if u not in ckpt}
    steps: list[Step] = []
    in_ram: set[int] = set()
    paged: set[int] = set()
    done = [False] * n

    def finished(u: int) -> bool:
        return all(done[s] for s in succs[u])

    def materialize(u: int, temps: list[int]) -> None:
        if u in in_ram:
            return
        if kind == "paging" and u in paged:
            steps.append(Step(Op.PAGE_IN, u))
        else:
            for p in preds[u]:
                materialize(p, temps)
            steps.append(Step(Op.COMPUTE, u))
        in_ram.add(u)
        temps.append(u)

    for v in range(n):
        temps: list[int] = []
        for p in preds[v]:
            materialize(p, temps)
        steps.append(Step(Op.COMPUTE, v))
        in_ram.add(v)
        done[v] = True
        if kind == "paging" and v in droppable:
            steps.append(Step(Op.PAGE_OUT, v))
            paged.add(v)
        drop_pending = any(not finished(u) for u in droppable)
        fwd_phase = g.nodes[v].kind == FORWARD
        for u in sorted(in_ram):
            if finished(u):
                if u in ckpt and drop_pending and kind == "remat":
                    continue  # a checkpoint stays while recomputes may start from it
                free = True
            elif u in temps:
                free = True  # recomputed / paged-in values are dropped after use
            elif u in droppable and fwd_phase:
                free = all(done[s] for s in succs[u] if g.nodes[s].kind == FORWARD)
            else:
                free = False
            if free:
                steps.append(Step(Op.FREE, u))
                in_ram.discard(u)
    for u in sorted(in_ram):
        steps.append(Step(Op.FREE, u))
    return steps


def reference_schedule(
    g: CostedGraph, kind: str = "keep", every: int = 4, ram_bytes: int | None = None, paging_time: str = "serial"
) -> Schedule:
    """A validated schedule; the budget defaults to exactly its peak RAM."""
    steps = reference_steps(g, kind, every)
    tot = validate(g, steps, Budget(ram_bytes=10**18, paging_time=paging_time))
    budget = Budget(ram_bytes=ram_bytes if ram_bytes is not None else tot.peak_ram_bytes, paging_time=paging_time)
    tot = validate(g, steps, budget)
    return Schedule(
        graph=g,
        budget=budget,
        steps=tuple(steps),
        status=HEURISTIC,
        strategy=f"reference-{kind}",
        totals=tot,
        report=SolveReport(method=f"rule-based {kind} (every={every})"),
    )
