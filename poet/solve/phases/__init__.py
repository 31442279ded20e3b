"""What ``poet solve`` runs for the MILP strategies (``poet``, ``remat``, ``paging``), in order: :data:`PHASES`.

Each phase is one module here, a :class:`~poet.solve.phases.state.Phase`: it runs unless its
``skip_reason`` gives one (the reason is recorded), and records what it did in the report
(``SolveReport.phases``).  All of them read and extend one :class:`~poet.solve.phases.state.SolveState`;
:func:`~poet.solve.phases.answer.answer` turns what they found into the answer: the cheapest validated
schedule held, its gap measured against the best proven bound.  docs/pipeline.md says why each runs
where it does, with the measurements.
"""

from __future__ import annotations

from types import MappingProxyType

from ...graph.core import CostedGraph
from ...schedule.core import Budget, Schedule
from ...schedule.report import PhaseRecord
from .answer import answer
from .capuchin import CapuchinPrelude
from .gap_drops import GapDrops
from .greedy_rules import DeadlineSearch, GreedyRules
from .guide_search import GuideSearchPhase
from .hunt import ScheduleHunt
from .interval_search import IntervalSearch
from .lower_bound import LowerBound
from .milp import Milp
from .one_pass import OnePassPaging
from .order_search import OrderSearchPhase
from .residency import LargeResidencyBound
from .smallest_budgets import SmallestBudgets
from .state import Phase, SolveState
from .stream_fallback import StreamFallback
from .windows import WindowPolish, WindowResolve

PHASES: tuple[Phase, ...] = (
    CapuchinPrelude(),  # poet only: a freely ordered schedule, an incumbent the stage form cannot express
    OnePassPaging(),  # large graphs: a schedule held from the start
    WindowResolve(),  # the one-pass schedule re-solved a window of stages at a time
    GapDrops(),  # recomputation across idle gaps: a plan where the rules' recomputations cascade
    LowerBound(),  # the eviction cover: the proven bound, and the guide
    GreedyRules(),  # the rules, guided by the cover (and by covers for stricter deadlines)
    DeadlineSearch(),  # every rule overran the deadline: search the nearest miss's guide
    ScheduleHunt(),  # still nothing held: randomized searches for a first schedule, until the limit
    LargeResidencyBound(),  # a residency ILP too large for the lower bound phase, once a schedule is held
    OrderSearchPhase(),  # the one-pass schedule, when the cheapest held: its order searched, node by node
    GuideSearchPhase(),  # local search over the guides of the best plans, in rounds, on every core
    IntervalSearch(),  # retention intervals on CP-SAT, mid-sized graphs
    Milp(),  # the MILP, warm-started from the best plan, while the gap is open
    WindowPolish(),  # the best plan's schedule re-solved a window at a time, in the time left
    SmallestBudgets(),  # proven infeasible: the smallest RAM and deadline that have a schedule
    StreamFallback(),  # a tiled graph with nothing found: the streaming page rule
)


def solve_portfolio(g: CostedGraph, budget: Budget, opts, *, remat: bool, paging: bool, strategy: str) -> Schedule:
    """The MILP strategies' solve: every phase in order, then the answer."""
    state = SolveState.start(g, budget, opts, strategy=strategy, remat=remat, paging=paging)
    for phase in PHASES:
        why = phase.skip_reason(state, state.policy)
        if why is None:
            state.records.append(phase.run(state))
        else:
            state.records.append(PhaseRecord(phase.name, 0.0, state.plan_e, MappingProxyType({"skipped": why})))
    return answer(state)


__all__ = ["PHASES", "Phase", "SolveState", "solve_portfolio"]
