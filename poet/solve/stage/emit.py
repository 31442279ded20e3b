"""From a stage plan to instructions: the one free rule, and the emitter built on it.

Within a stage the emitted order is: page-outs of resident tensors, frees of tensors the
stage does not need, then for each position k (ascending): page-ins scheduled before k,
compute k, page-out k, frees after k.  When a tensor leaves RAM is decided here and only
here (:func:`last_readers`, :func:`freed_at_start`, :func:`freed_after`); the MILP's RAM rows
(:mod:`poet.solve.milp.formulation`), its warm start (:mod:`poet.solve.milp.warm_start`), the
greedy's RAM replay (:mod:`poet.solve.search.greedy`) and the interval search's lives
(:mod:`poet.solve.search.intervals`) all charge RAM by these functions, so what they price is
what the validator replays.
"""

from __future__ import annotations

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Op, Step
from ...schedule.validate import ScheduleError, simulate
from ..errors import SolveError
from .plan import Plan


def last_readers(g: CostedGraph, comp: list[int]) -> dict[int, int]:
    """Per tensor, the last node of ``comp`` (a stage's computations, ascending) that reads it."""
    last: dict[int, int] = {}
    for k in comp:
        for i in g.preds[k]:
            last[i] = k
    return last


def freed_at_start(at_start, last_reader: dict[int, int], keep_next: set[int]) -> list[int]:
    """The free rule at a stage's start: of the tensors in RAM then (``at_start``), those that no
    computation of the stage reads and the next stage does not keep, ascending."""
    return [i for i in sorted(at_start) if i not in last_reader and i not in keep_next]


def freed_after(g: CostedGraph, k: int, last_reader: dict[int, int], keep_next: set[int]) -> list[int]:
    """The free rule after computing ``k`` in a stage: of ``k``'s inputs and ``k`` itself (in that
    order), those that the next stage does not keep and no later computation of the stage reads.
    (The caller frees those of them that are in RAM; whatever else the next stage does not keep
    is freed at the stage's end.)"""
    return [i for i in (*g.preds[k], k) if i not in keep_next and last_reader.get(i, -1) <= k]


def emit(g: CostedGraph, plan: Plan) -> list[Step]:
    """Instruction list from stage decisions (see the module docstring for the order)."""
    n = len(g.nodes)
    resident: set[int] = set()
    steps: list[Step] = []
    for t in range(n):
        comp = plan.comp[t]
        keep_next = plan.keep[t + 1] if t + 1 < n else set()
        outs = plan.outs[t]
        last_reader = last_readers(g, comp)
        at_start = set(resident)
        for i in sorted(at_start):
            if i in outs:
                steps.append(Step(Op.PAGE_OUT, i, t))
        for i in freed_at_start(at_start, last_reader, keep_next):
            steps.append(Step(Op.FREE, i, t))
            resident.discard(i)
        stage_ins = plan.ins[t]
        positions = sorted(set(comp) | set(stage_ins))
        comp_set = set(comp)
        for k in positions:
            for i in stage_ins.get(k, ()):
                steps.append(Step(Op.PAGE_IN, i, t))
                resident.add(i)
            if k not in comp_set:
                continue
            steps.append(Step(Op.COMPUTE, k, t))
            resident.add(k)
            if k in outs and k not in at_start:
                steps.append(Step(Op.PAGE_OUT, k, t))
            for i in freed_after(g, k, last_reader, keep_next):
                if i in resident:
                    steps.append(Step(Op.FREE, i, t))
                    resident.discard(i)
        unplaced = outs - at_start - comp_set
        if unplaced:
            raise SolveError(
                f"stage plan pages out {sorted(unplaced)} in stage {t}, but they are neither "
                f"in RAM at its start nor computed in it"
            )
        for i in sorted(resident - keep_next):
            steps.append(Step(Op.FREE, i, t))
        resident &= keep_next
        if keep_next - resident:
            raise SolveError(
                f"stage plan keeps {sorted(keep_next - resident)} in RAM at stage {t + 1} "
                f"without computing or paging them in"
            )
    return steps


def without_deadline(budget: Budget) -> Budget:
    """The same RAM budget and paging model, with no deadline."""
    return Budget(budget.ram_bytes, None, budget.paging_time)


def replays(g: CostedGraph, plan: Plan, budget: Budget) -> bool:
    """Whether the plan's instructions replay within ``budget`` in the independent validator."""
    try:
        simulate(g, emit(g, plan), budget)
    except (ScheduleError, SolveError):
        return False
    return True
