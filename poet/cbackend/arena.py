"""One static arena for a schedule: every residency of a node gets a byte offset.

A schedule's RAM figure is a sum of live bytes; a runtime with no heap needs addresses, and holes
between buffers can push the arena past that sum.  Each residency of a node (from its ``compute``
or ``page_in`` to its ``free``, or to the end) is a block of the node's bytes (rounded up to the
alignment) over a half-open interval of steps; two blocks whose intervals overlap may not overlap
in the arena.  Offsets come from an offline planner, as TensorFlow Lite Micro and TinyEngine plan
them: blocks in some order, each at the lowest offset clear of every block placed before it whose
lifetime overlaps (largest first, then the best of a few other orders while the time limit lasts).
Any packing can be reached that way by some order (place the blocks of an optimal packing in order
of their offsets: each lands at or below its optimal offset), which is what the exact packing of
the tests searches.
"""

from __future__ import annotations

import bisect
import random
import time
from dataclasses import dataclass

import numpy as np

from ..schedule.core import Op, Schedule

__all__ = [
    "ALIGN",
    "ORDERS",
    "ArenaPlan",
    "Residency",
    "check_plan",
    "first_fit_bytes",
    "live_peak",
    "place",
    "plan_arena",
    "repack",
    "residencies",
]

ALIGN = 8  # every block starts at a multiple of 8 bytes (float64/int64 tensors need it)


@dataclass(frozen=True)
class Residency:
    """Node ``node`` in RAM from step ``start`` (its compute or page_in) to step ``end`` (its free;
    the number of steps if never freed): live over the half-open interval ``[start, end)``."""

    node: int
    start: int
    end: int
    nbytes: int


@dataclass(frozen=True)
class ArenaPlan:
    """Offsets of every residency in one arena of ``arena_bytes``."""

    residencies: tuple[Residency, ...]
    offsets: tuple[int, ...]
    arena_bytes: int
    live_peak_bytes: int  # the most bytes live at once (blocks rounded up): no arena is smaller
    align: int
    order: str  # the placement order that gave the smallest arena
    orders_tried: tuple[tuple[str, int], ...]  # (order, arena bytes) of every order placed

    def offset_at(self, node: int, step: int) -> int:
        """The offset of ``node``'s residency live at ``step``."""
        for r, off in zip(self.residencies, self.offsets):
            if r.node == node and r.start <= step < r.end:
                return off
        raise KeyError(f"node {node} is not in RAM at step {step}")


def _round(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def residencies(schedule: Schedule) -> tuple[Residency, ...]:
    """Every residency of every node, in the order they start."""
    ram = schedule.graph.ram
    live: dict[int, int] = {}
    out: list[Residency] = []
    for t, s in enumerate(schedule.steps):
        if s.op in (Op.COMPUTE, Op.PAGE_IN):
            live[s.node] = t
        elif s.op == Op.FREE:
            out.append(Residency(s.node, live.pop(s.node), t, ram[s.node]))
    end = len(schedule.steps)
    out += [Residency(v, t0, end, ram[v]) for v, t0 in live.items()]
    return tuple(sorted(out, key=lambda r: (r.start, r.node)))


def live_peak(res, align: int = ALIGN) -> int:
    """The most (aligned) bytes live at once: a lower bound on any arena."""
    events: list[tuple[int, int]] = []
    for r in res:
        b = _round(r.nbytes, align)
        events += [(r.start, b), (r.end, -b)]
    cur = best = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # frees before allocations at one step
        cur += d
        best = max(best, cur)
    return best


def place(res, order, align: int = ALIGN, deadline: float | None = None) -> tuple[list[int], int] | None:
    """Offsets when the blocks are placed in ``order`` (indices into ``res``), each at the lowest
    offset clear of the blocks placed before it that are live at the same time; and the arena top.
    None when ``deadline`` (``time.monotonic()``) passes first (checked every 256 blocks)."""
    n = len(res)
    t0 = np.fromiter((r.start for r in res), dtype=np.int64, count=n)
    t1 = np.fromiter((r.end for r in res), dtype=np.int64, count=n)
    size = np.fromiter((_round(r.nbytes, align) for r in res), dtype=np.int64, count=n)
    p_t0, p_t1 = np.empty(n, np.int64), np.empty(n, np.int64)
    p_off, p_end = np.empty(n, np.int64), np.empty(n, np.int64)
    offsets = [0] * n
    top = k = 0
    for j, i in enumerate(order):
        if deadline is not None and j % 256 == 255 and time.monotonic() > deadline:
            return None
        b = int(size[i])
        if b == 0:
            continue
        clash = (p_t0[:k] < t1[i]) & (p_t1[:k] > t0[i])
        off = 0
        if clash.any():
            o, e = p_off[:k][clash], p_end[:k][clash]
            srt = np.argsort(o, kind="stable")
            o, e = o[srt], e[srt]
            before = np.concatenate(([0], np.maximum.accumulate(e)))  # highest end below each block
            gaps = o - before[:-1]
            fits = np.nonzero(gaps >= b)[0]
            off = int(before[fits[0]]) if fits.size else int(before[-1])
        offsets[i] = off
        p_t0[k], p_t1[k], p_off[k], p_end[k] = t0[i], t1[i], off, off + b
        k += 1
        top = max(top, off + b)
    return offsets, top


def first_fit(res, align: int = ALIGN) -> tuple[list[int], int]:
    """Blocks placed as the steps allocate them, each at the lowest gap among the blocks live then
    (a malloc-style first fit): the same packing as :func:`place` in step order, in time linear in
    the blocks times the blocks live at once, so it is the plan of last resort for any size."""
    order = sorted(range(len(res)), key=lambda i: (res[i].start, i))
    live: list[tuple[int, int, int]] = []  # (offset, end, step the block is freed), by offset
    offsets = [0] * len(res)
    top = 0
    for i in order:
        r = res[i]
        live = [x for x in live if x[2] > r.start]
        b = _round(r.nbytes, align)
        if b == 0:
            continue
        off = 0
        for o, e, _ in live:
            if o - off >= b:
                break
            off = max(off, e)
        offsets[i] = off
        bisect.insort(live, (off, off + b, r.end))
        top = max(top, off + b)
    return offsets, top


def _orders(res, align: int):
    """Placement orders, the best-known first (TFLite Micro's: largest first, earlier first on ties)."""
    idx = range(len(res))
    size = [_round(r.nbytes, align) for r in res]
    span = [r.end - r.start for r in res]
    yield "largest first", sorted(idx, key=lambda i: (-size[i], res[i].start))
    yield "largest area first", sorted(idx, key=lambda i: (-size[i] * span[i], -size[i], res[i].start))
    yield "longest lived first", sorted(idx, key=lambda i: (-span[i], -size[i], res[i].start))
    yield "largest first, later ends first", sorted(idx, key=lambda i: (-size[i], -res[i].end, res[i].start))


ORDERS = (
    "in step order",
    "largest first",
    "largest area first",
    "longest lived first",
    "largest first, later ends first",
)


def _improve(res, order, best, peak, align, deadline, max_moves):
    """A seeded search from the best order: move one block (a large one more often) to an earlier
    place in the order, keep the move when the arena does not grow; until the live peak, ``max_moves``
    or the deadline."""
    rnd = random.Random(0)
    order = list(order)
    offs, top, name = best
    n = len(order)
    moves = 0
    while moves < max_moves:
        if top <= peak or (deadline is not None and time.monotonic() > deadline):
            break
        moves += 1
        i = min(rnd.randrange(n), rnd.randrange(n)) if rnd.random() < 0.5 else rnd.randrange(n)
        j = rnd.randrange(n)
        if i == j:
            continue
        cand = order[:]
        cand.insert(j, cand.pop(i))
        got = place(res, cand, align, deadline)
        if got is None:
            break
        c_offs, c_top = got
        if c_top <= top:
            order, offs, top = cand, c_offs, c_top
    return offs, top, f"{name} + {moves} moves"


def _conflicts(res, align: int) -> list[list[int]]:
    """Per block, the blocks live at the same time as it (zero-byte blocks have none)."""
    order = sorted((i for i, r in enumerate(res) if _round(r.nbytes, align)), key=lambda i: res[i].start)
    out: list[list[int]] = [[] for _ in res]
    active: list[int] = []
    for i in order:
        active = [j for j in active if res[j].end > res[i].start]
        for j in active:
            out[i].append(j)
            out[j].append(i)
        active.append(i)
    return out


def repack(res, offsets, target: int, align: int = ALIGN, deadline=None, max_moves=None, conflicts=None):
    """Offsets with every block inside ``[0, target)`` and no two live blocks overlapping, found by
    moving blocks of a placement (``offsets``), or None when the search gives up.

    The blocks that end above ``target`` are taken out; one at a time, a block taken out goes to the
    place among its live neighbours' edges where the blocks it would overlap weigh least (each block's
    weight grows every time it is pushed out, so the search does not cycle), and those blocks are taken
    out in turn, until none is left.  Seeded: the same input gives the same offsets."""
    size = [_round(r.nbytes, align) for r in res]
    nb = conflicts if conflicts is not None else _conflicts(res, align)
    off = list(offsets)
    placed = [True] * len(res)
    out = {i for i in range(len(res)) if size[i] and off[i] + size[i] > target}
    if any(size[i] > target for i in out):
        return None
    for i in out:
        placed[i] = False
    weight = [1.0] * len(res)
    rnd = random.Random(0)
    limit = max_moves if max_moves is not None else 200 * len(res) + 1000
    moves = 0
    while out:
        if moves >= limit or (deadline is not None and moves % 64 == 0 and time.monotonic() > deadline):
            return None
        moves += 1
        i = max(out, key=lambda k: (size[k], -k)) if rnd.random() < 0.5 else rnd.choice(sorted(out))
        b = size[i]
        spots = {0}
        for j in nb[i]:
            if placed[j]:
                spots.add(off[j] + size[j])
                spots.add(off[j] - b)
        best = None
        for p in sorted(spots):
            if p < 0 or p + b > target:
                continue
            hit = [j for j in nb[i] if placed[j] and off[j] < p + b and p < off[j] + size[j]]
            key = (sum(weight[j] * size[j] for j in hit), rnd.random())
            if best is None or key < best[0]:
                best = (key, p, hit)
        _, p, hit = best
        off[i], placed[i] = p, True
        out.discard(i)
        for j in hit:
            placed[j] = False
            out.add(j)
            weight[j] += 0.5
    return off


def _search(res, offs, top, peak, align, deadline):
    """The smallest arena :func:`repack` reaches from a placement of ``top``: the live peak first, then
    halving the gap between what failed and what was reached, while time lasts."""
    nb = _conflicts(res, align)
    lo, best = peak, (offs, top)
    while lo < best[1] and (deadline is None or time.monotonic() < deadline):
        target = lo if lo == peak else _round((lo + best[1]) // 2, align)
        found = repack(res, best[0], target, align, deadline, conflicts=nb)
        if found is None:
            if target >= best[1] - align:
                break
            lo = target + align
        else:
            best = (found, max((o + _round(r.nbytes, align) for o, r in zip(found, res) if r.nbytes), default=0))
    return best


def plan_arena(
    schedule_or_res, *, align: int = ALIGN, time_limit_s: float | None = 30.0, max_moves: int = 200
) -> ArenaPlan:
    """Offsets for a schedule (or its residencies): the best of :data:`ORDERS` (the first, step order,
    is always placed: it takes time linear in the blocks times the blocks live at once), then a search
    that moves blocks of that placement down into a smaller arena (:func:`repack`, aiming at the live
    peak), then a seeded search of order moves (:func:`_improve`); each stops as soon as an arena
    reaches the live peak (no arena is smaller) or the time limit is spent."""
    res = residencies(schedule_or_res) if isinstance(schedule_or_res, Schedule) else tuple(schedule_or_res)
    peak = live_peak(res, align)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    offs, top = first_fit(res, align)  # fast for any size: what is left when time runs out
    best, best_order = (offs, top, "in step order"), sorted(range(len(res)), key=lambda i: (res[i].start, i))
    tried: list[tuple[str, int]] = [("in step order", top)]
    for name, order in _orders(res, align):
        if best[1] <= peak:
            break
        got = place(res, order, align, deadline)
        if got is None:  # out of time within this order
            tried.append((name + " (time limit)", -1))
            break
        tried.append((name, got[1]))
        if got[1] < best[1]:
            best, best_order = (got[0], got[1], name), order
        if deadline is not None and time.monotonic() > deadline:
            break
    if best[1] > peak and len(res) > 1:
        offs, top = _search(res, best[0], best[1], peak, align, deadline)
        tried.append(("placement search from " + best[2], top))
        if top < best[1]:
            best = (offs, top, best[2] + " + placement search")
    if best[1] > peak and len(res) > 1 and "placement search" not in best[2]:
        best = _improve(res, best_order, best, peak, align, deadline, max_moves)
        tried.append(("moves from " + best[2].split(" + ")[0], best[1]))
    offs, top, name = best
    plan = ArenaPlan(res, tuple(offs), top, peak, align, name, tuple(tried))
    check_plan(plan)
    return plan


def first_fit_bytes(schedule_or_res, align: int = ALIGN) -> int:
    """The arena a malloc-style first fit needs, placing blocks as the steps allocate them (for comparison)."""
    res = residencies(schedule_or_res) if isinstance(schedule_or_res, Schedule) else tuple(schedule_or_res)
    return first_fit(res, align)[1]


def check_plan(plan: ArenaPlan) -> None:
    """AssertionError if two blocks live at the same time overlap, or one is misaligned or outside the arena."""
    res, offs, a = plan.residencies, plan.offsets, plan.align
    items = sorted(
        ((r.start, r.end, o, o + _round(r.nbytes, a), r.node) for r, o in zip(res, offs) if r.nbytes),
        key=lambda x: x[0],
    )
    live: list[tuple[int, int, int, int, int]] = []
    for s0, s1, o0, o1, v in items:
        if o0 % a or o1 > plan.arena_bytes:
            raise AssertionError(
                f"node {v}'s block [{o0}, {o1}) is misaligned or outside the arena of {plan.arena_bytes} B"
            )
        live = [x for x in live if x[1] > s0]
        for _, _, p0, p1, w in live:
            if p0 < o1 and o0 < p1:
                raise AssertionError(f"nodes {w} and {v} are live together at step {s0} and overlap in the arena")
        live.append((s0, s1, o0, o1, v))
