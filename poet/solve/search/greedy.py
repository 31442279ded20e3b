"""The greedy rules: fast feasible stage plans, one run per eviction rule, the cheapest kept.

A run (:func:`poet.solve.search.greedy_run.greedy_run`) walks the stages in order and evicts at
each stage's RAM peak by its rule's order, paging out or dropping for recomputation.
:func:`greedy_plan` is one rule's run; :func:`best_greedy` runs the rules (and the guided ones)
against stricter internal deadlines and keeps the cheapest plan that replays within the budgets.
It makes no optimality claim; its plans warm-start the MILP and, for graphs too large for the MILP,
are returned with their gap to the eviction cover's bound.
"""

from __future__ import annotations

import math
import random
import time

from ...graph.core import CostedGraph
from ...schedule.core import Budget
from ..stage.emit import replays, without_deadline
from ..stage.plan import GuideKind, Plan, drop_unread_pageouts, plan_costs
from .greedy_run import GreedyFailed, GreedyOverrun, greedy_run


def greedy_plan(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    prefer: str = "energy",
    cap_bytes: int | None = None,
    guide: dict[int, str] | None = None,
    guide_once: bool = False,
    time_limit: float | None = None,
    give_up_above: float | None = None,
    stop=None,
    clock=time.perf_counter,
) -> Plan | None:
    """A feasible plan, or None when this rule cannot find one within the budgets (or within
    ``time_limit`` seconds, or once ``stop()`` is true, or once the plan is bound to take more than
    ``give_up_above`` seconds to run).

    prefer: ``energy`` (page or drop, whichever is cheaper while time allows),
    ``page`` (page whenever time allows), ``remat`` (drop whenever time allows),
    ``closure`` (evict the cheapest restoration per byte and squared distance to the
    next use) or ``cascade`` (``closure``, with a tensor's restoration counted once
    more for every dropped tensor still waiting to be recomputed from it).
    guide: tensors to evict first and how to restore them (``eviction_cover``'s
    choice: ``GuideKind.PAGE`` or ``REMAT``), or to evict last (``KEEP``); the others
    follow the rule.  guide_once: a tensor listed for eviction loses that priority once it
    has been restored (recomputed or paged in), so a recomputed chain can stay for its
    next readers instead of being evicted first again.
    """
    stop_at = None if time_limit is None else clock() + time_limit
    try:
        return greedy_run(
            g,
            budget,
            remat=remat,
            paging=paging,
            prefer=prefer,
            cap_bytes=cap_bytes,
            guide=guide,
            guide_once=guide_once,
            stop_at=stop_at,
            give_up_above=give_up_above,
            stop=stop,
            clock=clock,
        )
    except GreedyFailed:
        return None


def best_greedy(
    g: CostedGraph,
    budget: Budget,
    *,
    remat: bool = True,
    paging: bool = True,
    cap_bytes: int | None = None,
    exhaustive_up_to: int = 400,
    guide: dict[int, str] | None = None,
    per_rule: list | None = None,
    closest: list | None = None,
    rules: list | None = None,
    time_limit: float | None = None,
    stop=None,
    clock=time.perf_counter,
    run=greedy_run,
) -> Plan | None:
    """The cheapest feasible plan among the greedy's eviction rules (None if none is feasible).

    The greedy's running time estimate can undershoot (recomputation chains), so
    rules that overrun the deadline are retried against a stricter internal one;
    up to ``exhaustive_up_to`` nodes every internal deadline is tried (a tighter
    one sometimes steers the rule to a cheaper plan).  With a ``guide`` (the
    eviction cover's choice) the guided rule is tried as well, with and without
    ``guide_once``.  ``per_rule``, if given, receives the cheapest feasible plan
    of every rule; ``closest``, if given and no rule meets the deadline, the plan
    that overruns it least.  ``rules``: the (prefer, guide, guide_once) runs to
    try instead of these.  ``time_limit``: the runs stop after that many seconds, a run in
    progress included (one run takes about 0.4 s on 1,600 nodes, but 10 s to minutes on 5,000
    and on dense 1,000-node DAGs); what was found by then is returned.  Once a run has made a
    plan but none meets the deadline they stop after half of it: rules that keep overrunning
    leave the rest to the deadline's guides.  ``stop``: polled during the runs; once it is true
    the run in progress ends and no other starts.  ``clock``: what the time limit is measured by;
    ``run``: what makes one run (:func:`~poet.solve.search.greedy_run.greedy_run`; a test passes one that
    counts the runs or moves its clock).
    """
    t0 = clock()
    best, best_e, made = None, math.inf, False
    if rules is None:
        rules = [(p, None, False) for p in rule_names(remat, paging)]
        if guide:
            rules += [("energy", guide, False), ("energy", guide, True)]
            ck = checkpointed(g, guide)
            if ck:
                rules.append(("energy", ck, False))
    over: list = []  # [runtime, plan] of the plan overrunning the deadline least
    for pref, gd, once in rules:
        rule_best, rule_e = None, math.inf
        for shrink in (1.0, 0.75, 0.5, 0.25, 0.0):
            met = best is not None or rule_best is not None  # a plan within the deadline exists
            left = None
            if time_limit is not None:
                # until some run has made a plan, the runs may take all of the time limit
                left = (time_limit if met or not made else 0.5 * time_limit) - (clock() - t0)
            if (left is not None and left < 0) or (stop is not None and stop()):
                break
            b = budget
            if budget.runtime_s is not None and shrink < 1.0:
                slack = max(0.0, budget.runtime_s - g.plain_runtime_s)
                b = Budget(budget.ram_bytes, g.plain_runtime_s + shrink * slack, budget.paging_time)
            # a run bound to overrun the deadline is given up as soon as that is certain, unless its plan
            # may yet be the nearest miss: it would be discarded (the same plans, sooner)
            give_up = None
            if budget.runtime_s is not None:
                if closest is None or met:
                    give_up = budget.runtime_s * (1 + 1e-7)
                elif over:
                    give_up = max(budget.runtime_s, over[0]) * (1 + 1e-7)
            try:
                p = run(
                    g,
                    b,
                    remat=remat,
                    paging=paging,
                    prefer=pref,
                    cap_bytes=cap_bytes,
                    guide=gd,
                    guide_once=once,
                    stop_at=None if left is None else clock() + left,
                    give_up_above=give_up,
                    stop=stop,
                    clock=clock,
                )
            except GreedyOverrun:
                made = True
                continue
            except GreedyFailed:
                break
            made = True
            drop_unread_pageouts(p)
            e, rt = plan_costs(g, p, budget.paging_time)
            p.rule = (pref, gd or {}, b, once)
            if budget.runtime_s is not None and rt > budget.runtime_s * (1 + 1e-9):
                if closest is not None and (not over or rt < over[0]) and replays(g, p, without_deadline(budget)):
                    over[:] = [rt, p]
                continue
            if not replays(g, p, budget):
                continue  # a rule's plan the emitter or validator refuses is skipped, never returned
            if e < rule_e:
                rule_best, rule_e = p, e
            if len(g.nodes) > exhaustive_up_to:
                break  # large graphs: first feasible deadline per rule
        if rule_best is not None:
            if per_rule is not None:
                per_rule.append(rule_best)
            if rule_e < best_e:
                best, best_e = rule_best, rule_e
    if best is None and over and closest is not None:
        closest.append(over[1])
    return best


def checkpointed(g: CostedGraph, guide: dict[int, str], every: int = 3) -> dict[int, str]:
    """The guide with every ``every``-th chain link kept (set to ``keep``), or {} when it has none.

    A chain link is a tensor the guide recomputes that another recomputed tensor needs as a live
    input, and whose own recomputation needs one: a ResNet block output, which recomputing the
    next block's output needs.  With every link dropped, each recomputation in the backward pass
    runs back through all earlier blocks; keeping every k-th one bounds that chain, as
    checkpointing does.
    """

    mem, last_reader = g.ram, g.last_reader  # (g.ram builds a list: once, not per edge)

    def live_remat_inputs(v: int) -> set[int]:
        out, stack, seen = set(), [v], set()
        while stack:
            u = stack.pop()
            for p in g.preds[u]:
                if p in seen:
                    continue
                seen.add(p)
                if last_reader[p] == u and mem[p] > 0:
                    stack.append(p)  # past its use: recomputed along with u
                elif guide.get(p) == GuideKind.REMAT:
                    out.add(p)
        return out

    needs = {v: live_remat_inputs(v) for v, k in guide.items() if k == GuideKind.REMAT}
    links = sorted({p for ins in needs.values() for p in ins if needs.get(p)})
    if not links:
        return {}
    return {**guide, **{v: GuideKind.KEEP for v in links[every - 1 :: every]}}


# A run under a random guide (random_guide_plan): the share of the tensors the guide names, the rules run
# (Belady's order; closure and cascade take seconds per run on a dense 250-node DAG).  Where every rule and
# cover failed (the layered family at 80% of its peak, remat: layered:100:19, 100:27, 100:33, 120:13),
# the first or second such run found a plan, 26-79% above the bound, for the guide search to start from.
RANDOM_GUIDE_SHARES = (0.05, 0.1, 0.2, 0.4)
RANDOM_GUIDE_RULES = ("energy", "remat")


def random_guide_plan(
    g: CostedGraph,
    budget: Budget,
    rnd: random.Random,
    *,
    remat: bool = True,
    paging: bool = True,
    time_limit: float | None = None,
    stop=None,
) -> Plan | None:
    """One greedy run under a random guide (a random share of the tensors, each evicted first to be
    recomputed or paged, or evicted last), drawn from ``rnd``: a plan where the rules' own orders fail,
    replayed by the validator within the budgets, with the rule that makes it (so the guide search can
    start from it); None when this guide gives none."""
    mem, last = g.ram, g.last_reader
    kinds = [k for k, ok in ((GuideKind.REMAT, remat), (GuideKind.PAGE, paging)) if ok] + [GuideKind.KEEP]
    share = rnd.choice(RANDOM_GUIDE_SHARES)
    named = [v for v in range(len(g.nodes)) if mem[v] > 0 and last[v] > v + 1 and rnd.random() < share]
    guide = {v: rnd.choice(kinds) for v in named}
    prefer, once = rnd.choice(RANDOM_GUIDE_RULES), rnd.random() < 0.5
    kw = dict(remat=remat, paging=paging, prefer=prefer, guide=guide, guide_once=once)
    p = greedy_plan(g, budget, **kw, time_limit=time_limit, stop=stop)
    if p is None:
        return None
    drop_unread_pageouts(p)
    if not replays(g, p, budget):
        return None
    p.rule = (prefer, guide, budget, once)
    return p


def rule_names(remat: bool = True, paging: bool = True) -> list[str]:
    """The greedy's rules that apply when both (or only one) of recomputation and paging are allowed."""
    return ["energy", "page", "remat", "closure", "cascade"] if (remat and paging) else ["energy", "closure", "cascade"]
