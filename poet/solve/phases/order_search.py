"""The order search: the one-pass schedule held, improved by moving nodes of the order it was made in.

Where the recomputing one-pass rule's schedule is the cheapest held (resnet18_cifar at 32 KiB on the
``m4``: 8.551 J in the depth-first order, against 8.78 J for the best stage-form plan), the guide search
that follows improves the stage-form plans, which do not reach it.  Here
:class:`~poet.solve.search.order_search.OrderSearch` moves one node of that schedule's order at a time
(each order priced by the same pass) on every core, in rounds: between rounds every search goes on from
the best order found.  The schedule of the best order goes through the validator here, and replaces the
one held only when cheaper.
"""

from __future__ import annotations

from ...schedule.core import PAGING_OVERLAP
from ...schedule.report import PhaseRecord
from ..policy import SolvePolicy
from ..search.order import first_computed_order, stream_remat_in_order
from ..search.order_search import OrderSearch
from ..search.pool import SearchPool, worker_count
from .one_pass import validated
from .state import SolveState


class OrderSearchPhase:
    name = "order search"

    def skip_reason(self, state: SolveState, policy: SolvePolicy) -> str | None:
        if state.searches_skip():
            return state.searches_skip()
        held = state.stream
        if held is None:
            return "no one-pass schedule held"
        if state.plan_e is not None and state.plan_e <= held.energy_j:
            return "a plan held costs no more than the one-pass schedule"
        if held.energy_j <= state.target():
            return "the one-pass schedule is within the gap of the bound"
        if state.budget.paging_time == PAGING_OVERLAP:
            return "overlapped paging: the one-pass rule runs in the graph's order only"
        n = len(state.g.nodes)
        if n > policy.stream_remat_max_nodes:
            return f"{n:,} nodes, more than policy.stream_remat_max_nodes"
        if state.stopped():
            return "asked to stop"
        left = state.time.left()
        if left is not None and left * policy.order_search_share < 1.0:
            return f"{max(left, 0.0):.1f} s left"
        return None

    def run(self, state: SolveState) -> PhaseRecord:
        """``order_search_share`` of the time left (no limit: until every search has gone its patience
        without gain)."""
        since, policy, held, stop = state.time.elapsed(), state.policy, state.stream, state.opts.stop
        g, budget = state.g, state.budget
        state.progress("order search", objective=held.energy_j)
        left = state.time.left()
        span = None if left is None else policy.order_search_share * max(0.0, left)

        def rest() -> float | None:
            return None if span is None else span - (state.time.elapsed() - since)

        order = first_computed_order(held.steps, len(g.nodes))
        t_end = None if span is None else state.opts.clock() + span
        start = stream_remat_in_order(g, budget, order, t_end, stop, state.opts.clock)
        facts: dict = {"start_energy_j": start.energy_j}
        if not start.found:  # its time ran out, or the held schedule was not the pass's: nothing to start from
            return state.phase_record(self.name, since, rounds=0, moves=0, kept=0, **facts)
        workers = worker_count(state.opts.threads)
        tries = policy.order_search_round_tries
        searches = [
            OrderSearch(g, budget, order, start.energy_j, seed=k, target_energy=state.target(), round_tries=tries)
            for k in range(workers)
        ]
        rounds = 0
        with SearchPool(g, workers) as pool:
            while not state.stopped() and not all(s.done for s in searches):
                now = rest()
                if now is not None and now <= 0.0:
                    break
                seconds = 1e9 if now is None else now  # a round ends by its tries, or the time
                searches = pool.run([(s, seconds, None) for s in searches], stop=stop)  # side by side
                rounds += 1
                best = min(searches, key=lambda s: s.energy_j)
                for s in searches:
                    s.adopt(best)
                state.progress("order search", objective=min(best.energy_j, held.energy_j))
        best = min(searches, key=lambda s: s.energy_j)
        facts.update(
            rounds=rounds,
            moves=sum(s.moves for s in searches),
            kept=sum(s.kept for s in searches),
            search_energy_j=best.energy_j,
        )
        if best.energy_j < held.energy_j:
            found, energy = validated(state, best.result(stop=stop, clock=state.opts.clock))
            facts["energy_j"] = energy
            if found.found and energy < held.energy_j:
                state.stream = found
        return state.phase_record(self.name, since, **facts)
