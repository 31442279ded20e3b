"""How a solve spends its time: the tuning of the portfolio, and the clock it is measured by.

:class:`SolvePolicy` holds every tuning number of the solve (:mod:`poet.solve.phases`, the eviction
cover, the front door's rules for tiled graphs) in one frozen,
documented object (``SolveOptions(policy=...)``); the defaults are what the benchmarks in
``bench/results.md`` were measured with.  The numbers quoted next to each field were measured
when it was set and go stale as the code changes: re-measure before relying on them.

:class:`TimeBudget` is the time limit as the phases see it, read from a clock that a test can
replace (``SolveOptions(clock=...)``) instead of patching ``time``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SolvePolicy:
    """The portfolio's tuning.  Changing a field changes which phases run and for how long, never
    what counts as a valid or a proven schedule."""

    # ``auto`` runs the MILP (method ``fast``) up to this many nodes, only the heuristics beyond.
    # Above it the O(n^2) MILP (about 530k columns at 352 nodes) does not reach a root bound within
    # a minute on 2 cores, and HiGHS's presolve overruns time limits on a loaded machine.
    auto_max_nodes: int = 200
    # HiGHS 1.16 does not check its time limit through presolve, its MIP setup and (on large models)
    # the root LP: on the resnet18_cifar/m4 MILP (447,043 nonzeros, 2 threads) a 2-s limit stopped
    # after 4.7 s and a 3-s one after 5.0-5.4 s (1.2e-5 s per nonzero); on an op-level LSTM's
    # (1,402,473 nonzeros) a 15-s limit stopped after 32.1 s (2.2e-5).  With a schedule already held,
    # the MILP is not started when less than this many seconds per nonzero are left.
    milp_setup_s_per_nonzero: float = 2.5e-5
    # The tightened MILP has 19-24 nonzeros per node squared on the zoo and aten graphs (18.8 on a
    # 66-node aten ResNet, 23.5 on resnet18_cifar): an estimate to build it early only when needed.
    milp_nonzeros_per_node_squared: int = 25
    # Seeds per search start on graphs of at least ``restart_min_nodes`` nodes, a new one each round
    # of the guide search.  Below that the MILP that follows proves small graphs faster than more
    # searching would (the 20- and 30-node zoo nets in seconds); from about 70 nodes on, a
    # warm-started MILP ran for minutes without improving its start.
    search_rounds: int = 4
    restart_min_nodes: int = 100
    # Where the tightened cover's deadline sits between the fastest possible runtime and the real
    # deadline (0: the fastest, 1: the deadline).  On the op-level ResNets on the a72 at 1.2x, the
    # cover at the real deadline spends all of the time on paging, and its guide's plans page the
    # same tensors in two or three times and overrun; at 0.15 of the way its guide, checkpointed, met
    # the deadline at 2.1% (40 blocks) and 2.2% (100 blocks) over plain, where the fastest guide's
    # plans, searched for 120 s, ended at 11% and 19%.
    tightened_deadline_share: float = 0.15
    # The share of the deadline's slack over plain that the energy cover's evictions take, above
    # which the deadline's guides run before the rules.  At the benchmarks' budgets: 0.98-1.00 on the
    # op-level ResNets on the a72 at 1.2x, where every rule overran (for minutes on 4,818 nodes), 1.00
    # on resnet50/a72 at 20-30% RAM and 1.2x (where rules met it), at most 0.90 elsewhere.  A hint,
    # not a proof: among equally cheap eviction sets the share varies (0.68-0.98 on 2-8-block ResNets
    # whose rules all overran).  Either order makes the same runs when time allows.
    deadline_bound_share: float = 0.95
    # The interval search (CP-SAT) runs after the guide search, while the gap is open, on graphs of
    # this many nodes.  Below, the MILP proves the small zoo nets in seconds; above, a warm-started
    # MILP never improved its start nor proved a zoo case, and the interval search takes the rest of
    # the time limit.  On resnet50 (352 nodes) it took the gaps from 1.72% to 1.62% and 3.55% to
    # 3.35% at 60 s; on a 658-node op-level ResNet only from 4.31% to 4.25% at 120 s (the gap is in
    # the bound there), so larger graphs go without.
    interval_min_nodes: int = 100
    interval_max_nodes: int = 400
    # ... and when at least this much of the time limit is left for the guide search and it.  It gains
    # little in its first 10 s (3 s of them CP-SAT's presolve on resnet18_cifar), and a short solve's
    # time is the guide search's: it proves resnet18_cifar/m4 at 30% RAM in 5 s.
    interval_min_rest_s: float = 20.0
    # the interval search's time without a time limit
    interval_seconds: float = 60.0
    # The guide search's share of the time left when the interval search follows.  On
    # resnet18_cifar/m4 at 20% RAM the search stalls within 10 s, and the interval search needs tens
    # of seconds; the cases the search proves take it under 10 s.
    search_share_before_intervals: float = 0.25
    # A guide search's time without a time limit.
    search_seconds: float = 30.0
    # The eviction cover's time: ``cover_min_seconds``, or ``cover_share`` of a longer time limit
    # (``cover_seconds`` without one).  On 1,600-node graphs HiGHS's presolve of the cover alone takes
    # about 10 s, and a cover stopped before its root LP bounds nothing and guides badly; it stops as
    # soon as it is solved.
    cover_seconds: float = 60.0
    cover_min_seconds: float = 10.0
    cover_share: float = 0.25
    # Chain links the cover follows from a recomputed tensor when following them all would exceed
    # ``cover_max_links`` in all (the greedy's recomputations go 8 deep).  A backward pass's gradient
    # chains run hundreds deep (560 links on 40 blocks): on 4,818 nodes they made 944k of the ILP's
    # columns, 45k at depth 8.  Stopping a chain drops constraints, so the bound stays valid; it was
    # the same at depth 8 on every zoo and aten case measured, but the optimal eviction set it
    # returns, the guide, can differ, and the rules' plans with it (aten 40 blocks on m4: 1.1385 of
    # plain against 1.1157), so chains are cut only where they are that many.
    cover_chain_depth: int = 8
    cover_max_links: int = 100_000
    # The cover stops within this much of the plain energy (or runtime) of optimal: its dual bound
    # is still what is used, and proving the last 1e-5 took most of its time (HiGHS had the bound of
    # the 4,818-node a72 case at its root, then branched for minutes).
    cover_abs_gap: float = 1e-5
    # HiGHS does not check its time limit through the cover's presolve and root LP either: on a
    # 3,000-node chain's cover (796,576 nonzeros) a 10-s limit stopped after 12.3 s, on a 1,000-node
    # layered DAG's (270,297) after 10.5 s, both with no bound above the plain energy.  A cover whose
    # setup would take over half of its time at ``milp_setup_s_per_nonzero`` is not solved (its bound is
    # then a relaxation's).  Building the ILP here takes about ``cover_build_s_per_nonzero`` on an idle
    # machine (1.7e-6 measured: 4.0 million nonzeros in 6.9 s on the tiled resnet18_cifar/m0); slower
    # means a loaded machine, where HiGHS's setup is slower too, and the setup estimate is scaled by as much.
    cover_build_s_per_nonzero: float = 2e-6
    # The Capuchin-style incumbent of the ``poet`` strategy gets this share of the time limit
    # (``capuchin_seconds`` without one): it takes a fraction of a second on the zoo but grows about
    # as the cube of the graph's size (41 s on 1,618 nodes).
    capuchin_share: float = 0.1
    # ... and runs only on graphs of at most this many nodes: on more, its share ends before its first
    # rounds do anything (3,218 nodes took 57 s to finish; on a 20,000-node chain its set-up alone took
    # seconds of a 3-s limit), and the one-pass paging schedule holds a plan there anyway.
    capuchin_max_nodes: int = 2000
    capuchin_seconds: float = 60.0
    # Each smallest-feasible-budget MILP's time without a time limit.
    min_budget_seconds: float = 120.0
    # The share of the time limit that the idle-gap recomputation plan (poet.solve.search.gap_drops)
    # may take, before the cover: under a second on 250-node layered DAGs, 5-13 s on 1,000 nodes for
    # all of its covers on a loaded machine; it stops with the best so far.
    gap_drops_share: float = 0.25
    # Graphs of this many nodes or more get the one-pass paging schedule (poet.solve.search.stream) first:
    # linear in the graph (0.4 s on the 2,922-node tiled resnet18_cifar, 1.5 s on 20,000-node chains), it
    # is what a time limit returns when the phases after it cannot finish on a graph that size.
    stream_min_nodes: int = 1000
    # ... and on tiled graphs of any size: there the one-pass rule in a searched order (order_search.py)
    # beats every stage-form schedule known on small instances (bench/tiled_truth.py's resnet-t2: 1.264
    # against 1.457 mJ).  The C backend's re-solves for a smaller arena turn it off: such schedules pack
    # into arenas worse (tests/test_qemu_zoo.py's 678-node re-solve: an arena of 7,680 B for a 7,168-B peak).
    stream_small_tiled: bool = True
    # Up to this many nodes the one-pass rule with recomputation (poet.solve.search.stream_remat) runs
    # beside it and the cheaper validated schedule is held: 0.3 s on the 2,922-node tiled
    # resnet18_cifar, 3-4 s on the 33,536-node tiled bert (m4, load 3-5).  Past it (bert at 32 KiB:
    # 1.3 million nodes, where the plain pass alone holds gigabytes of steps) it is not run.
    stream_remat_max_nodes: int = 200_000
    # Plans in the stage form hold every kept tensor at every stage.  Where keeping every tensor until
    # its last reader is more (tensor, stage) pairs than this (stage.plan.live_pairs; 100 million on a
    # 20,000-node chain), the idle-gap plan, whose kept sets are about that large, is not tried.
    stage_pairs_max: int = 5_000_000
    # Emitting and validating the answer takes time linear in the graph after the last phase: about 40
    # microseconds per node on an idle machine (256,563 steps of the 37,376-node tiled bert), several
    # times that under load.  The phases share the time limit less this much per node (at most a fifth
    # of the limit), so that the answer, not the last phase, ends within the limit.
    finish_s_per_node: float = 1e-4
    # A greedy rule's run takes about this long per node and per (tensor, stage) pair resident under the
    # budget (counted by the one-pass schedule): the page rule took 0.13 s on the 2,922-node tiled
    # resnet18_cifar/m0 (9,899 pairs; 4.3e-5 s per node), 1.2-4.0 s on 1,500-3,000-node generated graphs
    # at 30-80% of their peak (370,000-1,000,000 pairs; 2e-6 to 7e-6 s per pair), load 4.  Where a
    # schedule is held, the rules do not start when their time would not cover one run by the larger
    # estimate (on a 20,000-node chain at 80%: 44 million pairs, minutes): the plan held is the answer.
    greedy_s_per_node: float = 4e-5
    greedy_s_per_pair: float = 5e-6
    # Where the rules, the deadline search and the idle-gap plan end with no schedule, the search for one
    # (randomized idle-gap covers and greedy runs under random guides, in turns of ``hunt_turn_s``) goes
    # on until the time limit (``hunt_seconds`` without one): the solve used to give up there with half
    # of its limit unspent (layered:250 seeds at 80% of their peak, remat: after 31-32 s of 60, with no
    # schedule on 6 of 15 seeds; now 2 of 15, after 60 s: bench/no_schedule_yet.py, docs/reliability.md).
    # When the MILP may follow (methods fast and warm, up to 200 nodes with auto), the search gets this
    # share of what is left and the MILP the rest (HiGHS found the one schedule of layered:80:18 at 80%,
    # remat, in 84 s; the search found one in 0.1 s).
    hunt_seconds: float = 60.0
    hunt_turn_s: float = 1.0
    hunt_share_before_milp: float = 0.5
    # -- tiled graphs (the tiling planner's rewrite of a zoo model, solved by the poet strategy)
    # Above this many nodes the portfolio (MILP, covers, guided rules) is not tried: its phases do not
    # answer a graph this size within minutes, and the streaming page rule (the one-pass paging
    # schedule, linear in the graph) answers it in seconds (bert at 256 KiB: 33,536 nodes).
    tiled_portfolio_max_nodes: int = 12_000
    # When the portfolio ends its time without a schedule on a tiled graph (it can spend a short limit
    # on its lower bound and guided rules), the streaming page rule is tried for this long.
    tiled_fallback_seconds: float = 60.0
    # The window re-solve (search/windows.py) improves the one-pass schedule: windows of this many
    # stages, each a MILP of at most ``window_seconds`` (warm-started from the old steps), for
    # ``window_share`` of the time left when the one-pass schedule is the answer (a tiled graph past
    # tiled_portfolio_max_nodes) and ``window_portfolio_share`` when the portfolio's phases follow.
    # Measured on the m4 (docs/tiling.md, "Windowed improvement"), on the 60-s portfolio's schedule of
    # resnet18_cifar at 256 KiB (380 nodes): 16 stages -0.47% in 27 s (all 48 windows), 32 stages -0.33%
    # in 100 s, 48 stages none within 10 s per window; on the one-pass schedule of the transformer at
    # 256 KiB (2,496 nodes) 16 stages -0.01% in 60 s; 200 stages (215k columns) reach no solution in 30 s.
    # The residency bound (residency_bound.py: the restorations' RAM, forced paging) runs after the
    # eviction cover on tiled graphs of at most this many nodes and nonzeros (it grows with nodes times
    # tensors alive at once), for ``residency_share`` of the cover's time; the larger bound is used.  On
    # bench/tiled_truth.py's cnn2-t2 (41 nodes) it raises the bound from 0.179 to 0.283 mJ in 0.6 s, and
    # on cnn1-t4 (43 nodes) to the best schedule known (proving it).
    # The reader-gap cover (reader_gaps.py: a restoration per absence between two readers of a tile)
    # runs after the eviction cover on every tiled graph, for ``reader_gap_share`` of the time left (at
    # most the cover's time and ``reader_gap_max_seconds``; 0: not run); the larger bound is used.  On
    # the m4 at 256 KiB it raises the tiled one-block transformer's bound from 45.00 to 52.30 J (in 20 s;
    # 2,496 nodes).
    reader_gap_share: float = 0.25
    reader_gap_max_seconds: float = 60.0
    # Past ``residency_max_nonzeros`` an ILP is left to the residency-bound phase (phases/residency.py),
    # built only if its nonzeros, at ``residency_nonzeros_per_second``, fit in ``residency_share`` of the
    # time left, and given that share (in a child process).  Measured on the m4 (docs/tiling.md, 2 cores, nothing else
    # running): resnet18_cifar at 256 KiB (380 nodes, 1.18M nonzeros) reaches 7.08 J in 60 s and 7.287 J
    # in 120 s (the cover 6.48, the reader-gap cover 6.65); vgg16_cifar at 32 KiB (769 nodes, 4.16M
    # nonzeros) its first bound at 97 s, 3.919 J at 130 s, 3.932 J at 300 s (the reader-gap cover 3.684).
    residency_max_nodes: int = 1000
    residency_max_nonzeros: int = 300_000
    residency_nonzeros_per_second: float = 20_000.0
    residency_share: float = 0.5
    # Past residency_max_nodes (up to residency_stretch_max_nodes; its columns grow with the nodes times
    # the tensors alive at once), or when the whole ILP does not fit its time, the residency-bound phase
    # sums the bounds of stretches of residency_stretch_moments moments (residency_stretches.py), in
    # residency_stretch_share of the time left (its bound keeps rising with the time each stretch
    # gets).  Measured on resnet18_cifar at 32 KiB on the m4 (2,922 nodes; the whole ILP 60.8M
    # nonzeros): docs/tiling.md, "The residency bound stretch by stretch".
    # It runs only where the plan held is more than residency_stretch_min_gap above the bound held (the
    # m0 and a72 tiled answers are proven within 0.3%: their later phases keep their time).
    residency_stretch_max_nodes: int = 20_000
    residency_stretch_moments: int = 100
    residency_stretch_min_gap: float = 0.02
    residency_stretch_share: float = 0.85
    # On a tiled graph of at most this many nodes the MILP phase runs CP-SAT first (the same MILP,
    # lp/cpsat.py; skipped without OR-Tools) for ``tiled_cpsat_share`` of the time left, then HiGHS
    # warm-started from the cheaper of CP-SAT's schedule and the plan held, for the rest
    # (``tiled_cpsat_seconds`` of CP-SAT without a limit).  On the m4's tiny tiles a page is mostly the
    # SD card's latency and the optimum is recompute-heavy, which CP-SAT's search reaches and HiGHS's
    # does not from the rules' paging-side plans: bench/tiled_truth.py's cnn2-t2 (41 nodes) 0.421 mJ on
    # CP-SAT against HiGHS's 0.850 in 60 s each (docs/tiling.md).  In the 30-s portfolio (load ~4, one
    # run each) a share of 0.95 against 0.5: cnn2-t2 0.599 against 0.730 mJ, cnn3-t2 0.893 against 1.106,
    # resnet-t2 2.017 against 2.077 (HiGHS rarely improved on CP-SAT's schedule in the rest).
    tiled_cpsat_max_nodes: int = 400
    tiled_cpsat_share: float = 0.9
    tiled_cpsat_seconds: float = 60.0
    # With a warm start, CP-SAT runs only its large-neighbourhood workers (``use_lns_only``): its
    # improvements on these MILPs come from LNS around the incumbent, and with its full-problem workers
    # besides, two shared cores make few LNS calls (30 s, 8 workers: 2-3 calls per neighbourhood).
    # Paired runs of 45 s (CP-SAT alone on the pass's own MILP and warm start, load 5-7): cnn2-t2 2.76
    # against 3.04 units of plain backprop, resnet-t2 7.78 against 8.27, cnn3-t2 3.18 against 3.38
    # (docs/tiling.md).  Without a start the default search finds the first schedule.
    tiled_cpsat_lns_only: bool = True
    # Where that pass follows, the guide search gets at most this share of the time left (else half):
    # in the 60-s portfolio on cnn3-t2 (51 nodes) it took 19 s to reach 1.106 mJ, leaving CP-SAT 34 s,
    # which reaches 0.66 mJ in 30 s from the same start alone (docs/tiling.md).
    tiled_cpsat_search_share: float = 0.1
    # Both (LNS only, the guide search's share) on graphs of at most this many nodes: on cnn2-t8 (155
    # nodes) they left the 60-s portfolio at 0.354 mJ, 5.1% above its 0.337 without them.
    tiled_cpsat_small_nodes: int = 100
    # On those small graphs the pass's time goes in rounds of ``tiled_neighbourhood_round_s``: CP-SAT, then
    # the neighbourhood search on the MILP's columns (milp/neighbourhoods.py: a few tensors' or stages'
    # decisions freed, the rest fixed, re-solved on CP-SAT) for ``tiled_neighbourhood_share`` of
    # the round, each from the other's best.  50-s runs from the pass's own start (docs/tiling.md):
    # cnn2-t2 0.4208 mJ (the best known) in 2 of 2 against 1 in 5 of the pass alone; resnet-t2 1.64 and
    # 1.56 mJ against 1.82-2.01; cnn3-t2 0.668, 0.657 (best known 0.646).  0 turns it off.
    tiled_neighbourhood_share: float = 0.5
    tiled_neighbourhood_round_s: float = 16.0
    window_stages: int = 16
    window_seconds: float = 5.0
    window_share: float = 0.5
    window_portfolio_share: float = 0.1
    # The windows go most expensive first; after this many in a row that keep nothing they stop (on the
    # one-pass schedules of the m4 rows they keep almost nothing: the time goes back to the answer).
    window_patience: int = 30
    # On a tiled graph the guide search leaves this share of its time to the window polish of the best
    # plan (when no MILP follows).
    window_polish_share: float = 0.25
    # Where the one-pass schedule is the cheapest held and not within the gap of the bound, the order
    # search (search/order_search.py: one node of its order moved at a time, each order priced by the
    # recomputing one-pass rule) takes this share of the time left, in rounds of order_search_round_tries
    # tries on every core (the best order handed to each search between rounds; by tries, not seconds, so
    # that a search that ends before the limit is the same on any machine), before the guide search,
    # whose stage-form plans do not reach it there.  Measured on resnet18_cifar at 32 KiB on the m4:
    # docs/tiling.md, "Searching the one-pass rule's order".
    order_search_share: float = 0.9
    order_search_round_tries: int = 200
    # A tiled graph has thousands of nodes: without a time limit asked for, it is solved within this
    # many seconds, so that an answer comes within minutes.
    tiled_time_limit_s: float = 240.0
    # Planning the tiles is part of answering (seconds to tens of seconds on large models): it comes
    # out of the time limit, and the solve keeps at least this share of the limit.
    tiled_min_solve_share: float = 0.25
    # Tiles planned for less RAM than the budget (poet/solve/headroom.py): with time left after the first
    # answer and its gap over headroom_min_gap, graphs tiled for these shares of the budget are solved
    # at the whole budget (then the step is halved around the best share, down to headroom_finest_step),
    # at most headroom_max_plans of them, each while at least headroom_min_seconds are left.
    headroom_shares: tuple[float, ...] = (0.875, 0.75)
    headroom_finest_step: float = 1 / 64
    headroom_max_plans: int = 6
    headroom_min_seconds: float = 20.0
    headroom_min_gap: float = 0.02
    # Auto tiling stops refining past this many nodes, or after this many seconds of planning (None:
    # the planner's defaults, poet.graph.tiling_plan.MAX_NODES and MAX_PLAN_SECONDS, 60,000 and 60 s:
    # beyond them planning takes minutes).  bert at 32 KiB needs millions (docs/tiling.md, "Scale");
    # ``poet solve --max-tile-nodes N --max-tile-seconds S`` sets them.
    tile_max_nodes: int | None = None
    tile_max_seconds: float | None = None
    # Where those are None, ``poet solve`` / ``poet.solve()`` derive them (:meth:`tile_caps`): planning
    # may take ``tiled_plan_seconds`` without a time limit asked for (bert at 32 KiB took 808-971 s under
    # load 7-10), else the share of the limit the solve does not keep; the graph may grow to what this
    # machine's available RAM holds at ``tiled_bytes_per_node`` (poet solve's peak RSS on bert at 32 KiB:
    # 6.60 GB at 1,300,480 nodes, 5,075 B per node), ``tiled_memory_share`` of it.
    tiled_plan_seconds: float = 1200.0
    tiled_bytes_per_node: int = 6_000
    tiled_memory_share: float = 0.8
    # Without a time limit asked for, a tiled graph's solve gets at least this long per node after its
    # planning: the streaming page rule took 331 s and validation 104 s on bert at 32 KiB (1,300,480
    # nodes) under load 7-10, 3.3e-4 s per node in all.
    tiled_solve_s_per_node: float = 4e-4

    def with_tile_caps(self, max_nodes: int | None, max_seconds: float | None) -> SolvePolicy:
        """This policy with auto tiling's caps set where given (None keeps the current one)."""
        return dataclasses.replace(
            self,
            tile_max_nodes=self.tile_max_nodes if max_nodes is None else max_nodes,
            tile_max_seconds=self.tile_max_seconds if max_seconds is None else max_seconds,
        )

    def tile_caps(self, asked: float | None, available_bytes: int | None) -> TileCaps:
        """Auto tiling's caps for a solve with time limit ``asked`` (None: none asked for) on a machine
        with ``available_bytes`` of RAM free (None: unknown, taken as 16 GiB); the fields set win.

        With a limit, planning keeps to the share of it the solve does not (so the limit holds, planning
        included); the node cap is the graph whose solve the available RAM holds by the estimate."""
        seconds = self.tiled_plan_seconds if asked is None else (1.0 - self.tiled_min_solve_share) * asked
        if self.tile_max_seconds is not None:
            seconds = self.tile_max_seconds if asked is None else min(self.tile_max_seconds, seconds)
        if self.tile_max_nodes is not None:
            return TileCaps(self.tile_max_nodes, seconds, "")
        ram = 16 * 2**30 if available_bytes is None else available_bytes
        nodes = max(1, int(self.tiled_memory_share * ram / self.tiled_bytes_per_node))
        known = "available" if available_bytes is not None else "assumed (this system does not say what is free)"
        why = (
            f"{self.tiled_memory_share:.0%} of the {ram / 1e9:.1f} GB of RAM {known}, at about "
            f"{self.tiled_bytes_per_node:,} B per node of a tiled solve"
        )
        return TileCaps(nodes, seconds, why)

    # -- each phase's share of the time limit (``limit`` None: no limit; ``elapsed``: since the start)
    def tiled_solve_limit(
        self, asked: float | None, planning_s: float, nodes: int = 0
    ) -> tuple[float | None, float | None]:
        """(the time limit, the solve's share of it) for a tiled graph of ``nodes`` whose tiles took
        ``planning_s`` to plan (and price).  An asked limit covers planning: the solve gets what planning
        left, at least ``tiled_min_solve_share`` of it.  Without one the default ``tiled_time_limit_s``
        does too, but the solve gets at least ``tiled_solve_s_per_node`` per node after planning, and
        the limit reported is then planning plus that."""
        if asked is not None:
            return asked, max(self.tiled_min_solve_share * asked, asked - planning_s)
        base = self.tiled_time_limit_s
        solve = max(self.tiled_min_solve_share * base, base - planning_s, self.tiled_solve_s_per_node * nodes)
        return max(base, planning_s + solve), solve

    def cover_time(self, limit: float | None) -> float:
        """The eviction cover's time (see ``cover_seconds``)."""
        if limit is None:
            return self.cover_seconds
        return min(limit, max(self.cover_min_seconds, self.cover_share * limit))

    def rules_time(self, limit: float | None, elapsed: float) -> float | None:
        """The greedy rules' time: half of what the limit leaves (they take a few seconds below 2,000
        nodes, but minutes in all on 5,000), none without a limit."""
        if limit is None:
            return None
        return max(0.0, 0.5 * (limit - elapsed))

    def search_time(self, limit: float | None, elapsed: float, milp_follows: bool, share: float | None = None) -> float:
        """A guide search's time: ``share`` of what the limit leaves, by default half when the MILP may
        follow and 90% when nothing does (the rest covers emitting and validating)."""
        if limit is None:
            return self.search_seconds
        if share is None:
            share = 0.5 if milp_follows else 0.9
        return max(0.0, share * (limit - elapsed))

    def interval_time(self, limit: float | None, elapsed: float) -> float:
        """The interval search's time: 90% of what the limit leaves (it spends about 3 s in CP-SAT's
        presolve on resnet18_cifar before it improves anything)."""
        if limit is None:
            return self.interval_seconds
        return self.search_time(limit, elapsed, False)

    def milp_setup_seconds(self, nonzeros: float) -> float:
        """About how long HiGHS takes to start on a MILP of ``nonzeros``, deaf to its time limit."""
        return self.milp_setup_s_per_nonzero * nonzeros

    def finish_reserve(self, limit: float | None, nodes: int) -> float:
        """The time kept back from the phases for emitting and validating the answer (``finish_s_per_node``)."""
        return 0.0 if limit is None else min(0.2 * limit, self.finish_s_per_node * nodes)

    def estimated_milp_nonzeros(self, nodes: int) -> int:
        """The tightened MILP's size by the estimate, without building it."""
        return self.milp_nonzeros_per_node_squared * nodes**2


DEFAULT_POLICY = SolvePolicy()


@dataclass(frozen=True)
class TileCaps:
    """Where auto tiling stops refining (``plan_tiling``'s ``max_nodes``, ``max_seconds``), and why the
    node cap is what it is when it was derived rather than asked for (else "")."""

    nodes: int
    seconds: float
    nodes_why: str


def available_ram_bytes() -> int | None:
    """The RAM this machine can give a new process without swapping (Linux's MemAvailable), None when
    the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


class TimeBudget:
    """A time limit (or none) counted from ``start`` on ``clock`` (seconds; by default from when this
    object was made)."""

    def __init__(
        self, limit_s: float | None, clock: Callable[[], float] = time.perf_counter, start: float | None = None
    ):
        self.limit_s = limit_s
        self.clock = clock
        self.start = clock() if start is None else start

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float | None:
        """Seconds left of the limit (negative once past it), None without a limit."""
        return None if self.limit_s is None else self.limit_s - self.elapsed()
