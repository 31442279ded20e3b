"""Plan and run one corpus architecture (:mod:`corpus_models`) as a new user would, and say how it ended.

Traced once; planned with ``poet``, ``paging`` and ``remat`` at an untiled budget (two thirds of the
way from the untiled minimum to plain backprop's peak) and at a tiled one (halfway between the
smallest minimum tiling reaches and the untiled minimum); every feasible plan is run on the example
batch and compared with eager ``loss.backward()``: untiled runs bit for bit, tiled runs within the
bound (:mod:`numerics`).  Where tiling cannot go below the untiled minimum, a budget just under it
must be refused at plan time, naming the op that sets the minimum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import corpus_models
from numerics import bitwise_equal, eager_step, worst_tiled_error

import poet
from poet.execute.tiled import tile_for_budget
from poet.graph.torch_export import export_training_graph

STRATEGIES = ("poet", "paging", "remat")
TIME_LIMIT = 2.0


@dataclass
class Run:
    """One plan of one architecture: its budget, status, and when it ran, what it measured."""

    strategy: str
    budget: int
    tiled: bool
    status: str
    peak: int | None = None
    error: float | None = None  # tiled: worst error in units of the bound; untiled: names not bitwise
    differs: list = field(default_factory=list)
    worst: str = ""  # tiled: whose error is the largest (the loss or a parameter)


@dataclass
class Outcome:
    name: str
    nodes: int
    untiled_min: int
    tiled_min: int | None
    fixed: int
    eager_difference: float
    runs: list = field(default_factory=list)
    refused: str = ""  # the plan-time answer when tiling cannot lower the minimum

    def summary(self) -> str:
        parts = [f"{r.strategy} {'tiled' if r.tiled else 'untiled'} {r.status}" for r in self.runs]
        return (
            f"{self.name}: "
            + "; ".join(parts)
            + (f"; refused below the minimum: {self.refused}" if self.refused else "")
        )


def _run(pl, x, y, eager, traced_ref, strategy, budget, tiled) -> Run:
    run = Run(strategy, budget, tiled, pl.schedule.status)
    if not pl.feasible:
        return run
    res = pl.run(x, y, apply=False)
    run.peak = res.measured_peak_bytes
    if tiled:
        run.error, run.worst = worst_tiled_error(res, eager)
        run.differs = [run.worst] if run.error > 1 else []
    else:
        run.differs = bitwise_equal(res, traced_ref)
    return run


class _Reference:
    """The traced step's own answer (a keep-all run): what every untiled schedule must reproduce bit for bit."""

    def __init__(self, res):
        self.loss, self.grads = res.loss, res.grads


def run_architecture(name: str, strategies=STRATEGIES) -> Outcome:
    model, x, y, lf = corpus_models.build(name)
    eager = eager_step(model, x, y, lf)
    prog = export_training_graph(model, x, lf, y)
    probe = poet.plan_program(prog, memory="100%", strategy="keep-all", tile="off")
    g = probe.graph
    lo, fixed, peak = g.min_ram_bytes(), g.fixed_ram_bytes, probe.totals.peak_ram_bytes
    keep_all = probe.run(x, y, apply=False)
    traced_ref = _Reference(keep_all)
    out = Outcome(name, len(g), lo, None, fixed, float(prog.eager_difference or 0.0))
    untiled_budget = lo + 2 * (peak - lo) // 3
    for s in strategies:
        pl = poet.plan_program(prog, memory=untiled_budget, strategy=s, tile="off", time_limit=TIME_LIMIT)
        out.runs.append(_run(pl, x, y, eager, traced_ref, s, untiled_budget, False))
    smallest = tile_for_budget(prog, "m4", fixed)
    out.tiled_min = smallest.tiled_min_bytes
    if smallest.tiled_min_bytes is None or smallest.tiled_min_bytes >= lo:
        pl = poet.plan(model, x, lf, targets=y, memory=lo - 1, time_limit=TIME_LIMIT)
        out.refused = f"{pl.schedule.status}: " + " ".join(pl.tiling.lines() if pl.tiling else [])
        return out
    budget = (smallest.tiled_min_bytes + lo) // 2
    choice = tile_for_budget(prog, "m4", budget)
    for s in strategies:
        pl = poet.plan_program(choice.program, memory=budget, strategy=s, tile="off", time_limit=TIME_LIMIT)
        out.runs.append(_run(pl, x, y, eager, traced_ref, s, budget, True))
    return out
