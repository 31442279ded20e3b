"""Nothing held yet: search for a schedule until the time limit, instead of giving up with time left.

Where the greedy rules, the deadline search and the idle-gap plan all end without a schedule (dense
random DAGs at 80% of their peak with recomputation only: the rules' recomputations cascade, and the
four idle-gap covers do not fit), the solve used to answer "no schedule found" with half of its limit
unspent.  This phase takes turns of ``policy.hunt_turn_s`` between two randomized searches until one
finds a schedule or the limit is reached (half of what is left when the MILP may follow): idle-gap
covers with random depths, sizes and prices (:func:`~poet.solve.search.gap_drops.gap_drop_search`;
fast, they fit the 250-node graphs), and greedy runs under random guides
(:func:`~poet.solve.search.greedy.random_guide_plan`; they fit the 100-node ones, and the guide search
can start from their plans).  What it finds, the searches after it improve.
"""

from __future__ import annotations

import random

from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..search.gap_drops import gap_drop_search
from ..search.greedy import random_guide_plan
from ..stage.plan import live_pairs
from .state import Origin, SolveState


class ScheduleHunt:
    name = "schedule hunt"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches_skip():
            return state.searches_skip()
        if state.has_schedule():
            return "a schedule is held"
        left = state.time.left()
        if left is not None and left <= 0:
            return "no time left"
        if state.stopped():
            return "asked to stop"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        g, budget, opts, policy = state.g, state.budget, state.opts, state.policy
        since = state.time.elapsed()
        state.progress("searching for a first schedule", bound=state.lb)
        share = 1.0 if state.method == "heuristic" else policy.hunt_share_before_milp  # the MILP may follow
        end = since + (policy.hunt_seconds if state.time.limit_s is None else share * state.time.left())
        covers = state.remat and live_pairs(g) <= policy.stage_pairs_max  # (the idle-gap plan's size rule)
        # one generator per search: the guides drawn do not depend on how many covers a turn had time for
        cover_rnd, guide_rnd = random.Random(0), random.Random(1)
        tries = runs = 0
        found = None
        while found is None and state.time.elapsed() < end and not state.stopped():
            turn = min(policy.hunt_turn_s, end - state.time.elapsed())
            if covers:
                search = gap_drop_search(g, budget, cover_rnd, time_limit=turn, stop=opts.stop, clock=opts.clock)
                tries += search.tries
                if search.plan is not None:
                    found = (search.plan, Origin.GAP_DROPS)
                    break
            turn = min(policy.hunt_turn_s, end - state.time.elapsed())
            if turn <= 0:
                break
            runs += 1
            plan = random_guide_plan(
                g, budget, guide_rnd, remat=state.remat, paging=state.paging, time_limit=turn, stop=opts.stop
            )
            if plan is not None:
                found = (plan, Origin.GREEDY)
        if found is not None:
            state.offer(*found)
            state.note(heuristic_energy_j=state.plan_e)
        facts = {"found": found is not None, "covers": tries, "guided_runs": runs}
        if found is not None:
            facts["by"] = found[1].value
        return state.phase_record(self.name, since, **facts)
