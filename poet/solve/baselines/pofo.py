"""POFO (Beaumont, Eyraud-Dubois, Shilova, NeurIPS 2021): the dynamic program for chains.

POFO combines rematerialization and offloading on a chain of layers.  Its outer program walks
the layers forward; at layer ``i``, with the layer's input ``x_{i-1}`` in RAM and ``m`` bytes
free, it chooses

* ``F_all``: compute ``f_i`` and keep its output for the backward pass; the input ``x_{i-1}`` is
  kept, offloaded (paged out now, paged in before the backward needs it) or, when no backward
  reads it, freed; go on at layer ``i+1``, then run ``b_i``;
* ``F_ck`` up to ``j``: keep ``x_{i-1}`` as a checkpoint (in RAM, or offloaded), compute
  ``f_i .. f_j`` keeping only ``x_j``; go on at ``j+1``; then bring the checkpoint back and run
  the backward of layers ``i..j`` with the *rotor* program (Beaumont et al. 2019: persistent
  rematerialization inside a segment, no offloading there).

Both tables are over the free memory, discretised into slots (sizes rounded up, the budget down,
so a schedule the tables accept always fits); with the graph's sizes all multiples of one slot
(their gcd) the program is exact.  The paper models offloads that overlap compute on a separate
link (its ``df``/``db`` state); POET's paging models count paging time ``serial`` (added),
``hidden`` (free), or ``overlap`` (per stage).  Here the objective weighs every operation by its
time in the budget's model (``overlap`` is optimised as ``serial``, an upper bound the validator
then prices per stage), or by its energy; ties go to the other.  The tables are numpy arrays over
the memory axis, O(N^3 S) work for N layers and S slots.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from ...graph.core import CostedGraph
from ...schedule.core import PAGING_HIDDEN, Op, Step
from .chain import Chain, read_chain

INF = math.inf
MAX_SLOTS = 1000  # memory resolution of the tables (at most; POFO's experiments used a few hundred)
MAX_CELLS = 150_000_000  # table entries kept (8 bytes each): long chains get fewer slots, not gigabytes
MIN_SLOTS = 16


class PofoStopped(Exception):
    """The tables were not finished: the time limit passed or a stop was asked for."""


@dataclass(frozen=True)
class PofoPlan:
    """The program's answer: its instruction list (empty when nothing fits) and what it assumed."""

    steps: tuple[Step, ...]
    objective: float  # the program's own value of the schedule (inf: no schedule)
    slot_bytes: int
    slots: int
    exact: bool  # every size a multiple of the slot: the tables saw the bytes as they are


class _Tables:
    """The rotor and POFO tables of one chain at one budget, and the schedule they encode."""

    def __init__(self, g: CostedGraph, chain: Chain, free_bytes: int, weights, max_slots: int, halt):
        self.g, self.c = g, chain
        L = chain.layers
        sizes = [g.nodes[v].ram_bytes for v in (*chain.fwd, *chain.bwd)]
        unit = 0
        for b in sizes:
            unit = math.gcd(unit, b)
        unit = max(unit, 1)
        if free_bytes // unit > max_slots:
            unit = max(unit, -(-free_bytes // max_slots))
        self.unit = unit
        self.exact = all(b % unit == 0 for b in sizes)
        self.S = max(free_bytes, 0) // unit
        up = lambda b: -(-b // unit)  # noqa: E731
        self.x = [up(g.nodes[v].ram_bytes) for v in chain.fwd] + [0]  # x[-1] == 0: the data
        self.d = [up(g.nodes[v].ram_bytes) for v in chain.bwd] + [0]  # d[L]: no gradient enters b_{L-1}
        w = weights
        self.cf = [w(v, Op.COMPUTE) for v in chain.fwd]
        self.cb = [w(v, Op.COMPUTE) for v in chain.bwd]
        self.po = [w(v, Op.PAGE_OUT) for v in chain.fwd]
        self.pi = [w(v, Op.PAGE_IN) for v in chain.fwd]
        self.rin, self.rout = chain.reads_input, chain.reads_output
        self.m = np.arange(self.S + 1)
        self.memo: dict = {}
        self.cf_prefix = [0.0]
        for c in self.cf:
            self.cf_prefix.append(self.cf_prefix[-1] + c)
        self.cb_prefix = [0.0]
        for c in self.cb:
            self.cb_prefix.append(self.cb_prefix[-1] + c)
        self.rot: dict[tuple[int, int, int], np.ndarray] = {}
        self.rot_stored: dict[tuple[int, int, int], np.ndarray] = {}  # the same, x_{s-1} on storage only
        for t in range(L):
            for s in range(t, -1, -1):
                halt()
                for kt in (0, 1) if self.rout[t] else (0,):
                    self.rot[s, t, kt] = np.min([o[1] for o in self.rot_options(s, t, kt, self.m)], axis=0)
                for kt in (0, 1) if self.rout[t] and s > 0 else (0,) if s > 0 else ():
                    self.rot_stored[s, t, kt] = np.min([o[1] for o in self.stored_options(s, t, kt, self.m)], axis=0)
        self.top: list[np.ndarray] = [np.zeros(self.S + 1)] * (L + 1)
        for i in range(L - 1, -1, -1):
            self.top[i] = np.min([o[1] for o in self.top_options(i, self.m)], axis=0)

    # -- helpers over the memory axis -------------------------------------------------------
    def at(self, table: np.ndarray, m):
        """table[m], inf where m < 0; m above the budget reads the budget (no better, so safe)."""
        m = np.asarray(m)
        return np.where(m < 0, INF, table[np.clip(m, 0, self.S)])

    def fwd_peak(self, a: int, b: int) -> int:
        """Free slots that computing f_a .. f_b in a row needs (x_{a-1} already counted)."""
        key = (a, b)
        if key not in self.memo:
            x = self.x
            self.memo[key] = max(self.fwd_peak(a, b - 1), x[b - 1] + x[b]) if b > a else x[a]
        return self.memo[key]

    def fsum(self, a: int, b: int) -> float:
        """Weight of f_a .. f_{b-1}."""
        return self.cf_prefix[b] - self.cf_prefix[a]

    def bsum(self, a: int, b: int) -> float:
        """Weight of b_a .. b_{b-1}."""
        return self.cb_prefix[b] - self.cb_prefix[a]

    # -- rotor: backward of layers s..t, x_{s-1} and g_{t+1} in RAM, x_t in RAM iff kt ----------
    def rot_options(self, s: int, t: int, kt: int, m):
        x, d, cf, cb, rout = self.x, self.d, self.cf, self.cb, self.rout
        ops = []
        if kt:  # free x_t now; it is recomputed when b_t needs it
            ops.append(("drop", self.at(self.rot[s, t, 0], m + x[t])))
        if s == t:
            if rout[s] and not kt:
                ok = (m >= x[s]) & (m - x[s] >= d[s])
                ops.append(("single", np.where(ok, cf[s] + cb[s], INF)))
            else:
                ops.append(("single", np.where(m >= d[s], cb[s], INF)))
            return ops
        for k in range(s + 1, t + 1):
            need = self.tail_needs(k, t, kt)
            if need is not None:  # b_t .. b_k read nothing but what is in RAM: run them first
                m_end = m + d[t + 1] + kt * x[t] - d[k]
                rest = self.at(self.rot[s, k - 1, 0], m_end)
                ops.append((("tail", k), np.where(m >= need, self.bsum(k, t + 1) + rest, INF)))
        for k in range(s + 1, t + 1):
            child = self.at(self.rot[k, t, kt], m - x[k - 1])
            keep = 1 if rout[k - 1] else 0
            m3 = m + d[t + 1] + kt * x[t] - d[k] - keep * x[k - 1]
            rest = self.at(self.rot[s, k - 1, keep], m3)
            cost = self.fsum(s, k) + child + rest
            ops.append((("split", k), np.where(m >= self.fwd_peak(s, k - 1), cost, INF)))
            need = self.tail_needs(s, k - 1, keep) if s > 0 and not rout[s - 1] else None
            if need is not None:  # x_{s-1} dies after f_s: the rest of the segment is a tail
                child = self.at(self.rot[k, t, kt], m - x[k - 1] + x[s - 1])
                ok = (m >= x[s]) & (m + x[s - 1] >= self.fwd_peak(s, k - 1)) & (m3 + x[s - 1] >= need)
                cost = self.fsum(s, k) + child + self.bsum(s, k)
                ops.append((("split-free", k), np.where(ok, cost, INF)))
        return ops

    # -- the same with x_{s-1} on storage, not in RAM (an offloaded checkpoint) ------------------
    def stored_options(self, s: int, t: int, kt: int, m):
        x, d = self.x, self.d
        ops = [("page_in", np.where(m >= x[s - 1], self.pi[s - 1] + self.at(self.rot[s, t, kt], m - x[s - 1]), INF))]
        if kt:
            ops.append(("drop", self.at(self.rot_stored[s, t, 0], m + x[t])))
        for k in range(s if not self.rout[s - 1] else s + 1, t + 1):  # the tail that needs no input first
            need = self.tail_needs(k, t, kt)
            if need is not None:
                m_end = m + d[t + 1] + kt * x[t] - d[k]
                rest = self.at(self.rot_stored[s, k - 1, 0], m_end) if k > s else 0.0
                ops.append((("tail", k), np.where(m >= need, self.bsum(k, t + 1) + rest, INF)))
        return ops

    def tail_needs(self, k: int, t: int, kt: int):
        """Free slots that running b_t .. b_k at once needs, or None when one of them reads a forward
        tensor that is not in RAM (only x_t, when kt, is)."""
        key = ("tail", k, t, kt)
        if key not in self.memo:
            self.memo[key] = self._tail_needs(k, t, kt)
        return self.memo[key]

    def _tail_needs(self, k: int, t: int, kt: int):
        if any(self.rin[j] for j in range(k, t + 1)) or any(self.rout[j] for j in range(k, t)):
            return None
        if self.rout[t] and not kt:
            return None
        need, freed = 0, 0  # free slots at b_j = m + freed - (what b_t..b_{j+1} left)
        x, d = self.x, self.d
        for j in range(t, k - 1, -1):
            need = max(need, d[j] - freed)
            freed += (d[j + 1] + (kt * x[t] if j == t else 0)) - d[j]
        return need

    # -- POFO's outer program: layers i.. with x_{i-1} in RAM and m slots free -----------------
    def top_options(self, i: int, m):
        x, d, cf, cb, po, pi = self.x, self.d, self.cf, self.cb, self.po, self.pi
        L = self.c.layers
        ops = []
        need_prev = i > 0 and (self.rin[i] or self.rout[i - 1])
        # F_all: x_i kept for the backward
        for how in ("keep", "offload") if need_prev else ("free",):
            after_f = m - x[i] + (x[i - 1] if how != "keep" and i > 0 else 0)
            child = self.at(self.top[i + 1], after_f)
            before_b = after_f + (0 if self.rout[i] else x[i]) - d[i + 1]
            ok = (m >= x[i]) & (before_b >= d[i])
            cost = cf[i] + child + cb[i]
            if how == "offload":
                if self.rin[i]:  # paged in before b_i
                    ok &= before_b - x[i - 1] >= d[i]
                else:  # after b_i and its frees
                    ok &= after_f + x[i] - d[i] >= x[i - 1]
                cost = cost + po[i - 1] + pi[i - 1]
            ops.append((("all", how), np.where(ok, cost, INF)))
        # F_ck up to j: x_{i-1} the checkpoint, f_i..f_j computed, x_j kept
        for j in range(i + 1, L):
            for how in ("keep", "offload") if i > 0 else ("keep",):
                off = x[i - 1] if how == "offload" else 0
                after_f = m + off - x[j]
                child = self.at(self.top[j + 1], after_f)
                before = after_f + (0 if self.rout[j] else x[j]) - d[j + 1]
                kt = 1 if self.rout[j] else 0
                rot = self.at(self.rot_stored[i, j, kt], before) if off else self.at(self.rot[i, j, kt], before)
                ok = (m >= x[i]) & (m + off >= self.fwd_peak(i, j))
                cost = self.fsum(i, j + 1) + child + rot + (po[i - 1] if off else 0.0)
                ops.append((("ck", j, how), np.where(ok, cost, INF)))
        return ops

    # -- the schedule the tables encode ------------------------------------------------------
    def schedule(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        self._top(0, self.S, out)
        return out

    def _choice(self, options, value: float):
        for name, arr in options:
            v = float(arr[0])
            if v <= value * (1 + 1e-12) + 1e-300:
                return name
        raise AssertionError("no option attains the table's value")

    def _fwd(self, a: int, b: int, out, first_input: int | None = None):
        """Compute f_a .. f_b, freeing each intermediate once the next exists (x_{a-1} too when it
        is ``first_input``, a tensor of the segment's own)."""
        fwd = self.c.fwd
        for k in range(a, b + 1):
            out.append((Op.COMPUTE, fwd[k]))
            if k > a or first_input == k - 1:
                out.append((Op.FREE, fwd[k - 1]))

    def _top(self, i: int, m: int, out):
        c = self.c
        if i == c.layers:  # after the last forward: its output stays only if b_{L-1} reads it
            if not self.rout[i - 1]:
                out.append((Op.FREE, c.fwd[i - 1]))
            return
        fwd, bwd = c.fwd, c.bwd
        how = None
        name = self._choice(self.top_options(i, np.array([m])), float(self.top[i][m]))
        if name[0] == "all":
            how = name[1]
            out.append((Op.COMPUTE, fwd[i]))
            if how == "offload":
                out += [(Op.PAGE_OUT, fwd[i - 1]), (Op.FREE, fwd[i - 1])]
            elif how == "free" and i > 0:
                out.append((Op.FREE, fwd[i - 1]))
            after_f = m - self.x[i] + (self.x[i - 1] if how != "keep" and i > 0 else 0)
            self._top(i + 1, after_f, out)
            if how == "offload" and self.rin[i]:
                out.append((Op.PAGE_IN, fwd[i - 1]))
            out.append((Op.COMPUTE, bwd[i]))
            self._after_backward(i, out)
            if how == "offload" and not self.rin[i]:
                out.append((Op.PAGE_IN, fwd[i - 1]))
        else:
            _, j, how = name
            off = self.x[i - 1] if how == "offload" else 0
            out.append((Op.COMPUTE, fwd[i]))
            if off:
                out += [(Op.PAGE_OUT, fwd[i - 1]), (Op.FREE, fwd[i - 1])]
            for k in range(i + 1, j + 1):
                out += [(Op.COMPUTE, fwd[k]), (Op.FREE, fwd[k - 1])]
            after_f = m + off - self.x[j]
            self._top(j + 1, after_f, out)
            before = after_f + (0 if self.rout[j] else self.x[j]) - self.d[j + 1]
            (self._rot_stored if off else self._rot)(i, j, 1 if self.rout[j] else 0, before, out)
        if i > 0 and not self.rout[i - 1] and name[0] == "all" and how != "free":  # no backward left reads x_{i-1}
            out.append((Op.FREE, fwd[i - 1]))

    def _after_backward(self, i: int, out):
        """After b_i: its incoming gradient and x_i are dead."""
        if i + 1 < self.c.layers:
            out.append((Op.FREE, self.c.bwd[i + 1]))
        if self.rout[i]:
            out.append((Op.FREE, self.c.fwd[i]))

    def _rot_stored(self, s: int, t: int, kt: int, m: int, out):
        c = self.c
        m = min(m, self.S)
        name = self._choice(self.stored_options(s, t, kt, np.array([m])), float(self.rot_stored[s, t, kt][m]))
        if name == "page_in":
            out.append((Op.PAGE_IN, c.fwd[s - 1]))
            return self._rot(s, t, kt, m - self.x[s - 1], out)
        if name == "drop":
            out.append((Op.FREE, c.fwd[t]))
            return self._rot_stored(s, t, 0, m + self.x[t], out)
        k = name[1]
        self._tail(k, t, out)
        if k == s:
            return
        return self._rot_stored(s, k - 1, 0, m + self.d[t + 1] + kt * self.x[t] - self.d[k], out)

    def _tail(self, k: int, t: int, out):
        for j in range(t, k - 1, -1):
            out.append((Op.COMPUTE, self.c.bwd[j]))
            self._after_backward(j, out)

    def _rot(self, s: int, t: int, kt: int, m: int, out):
        c = self.c
        m = min(m, self.S)
        name = self._choice(self.rot_options(s, t, kt, np.array([m])), float(self.rot[s, t, kt][m]))
        if name == "drop":
            out.append((Op.FREE, c.fwd[t]))
            return self._rot(s, t, 0, m + self.x[t], out)
        if name == "single":
            if self.rout[s] and not kt:
                out.append((Op.COMPUTE, c.fwd[s]))
            out.append((Op.COMPUTE, c.bwd[s]))
            self._after_backward(s, out)
            if s > 0 and not self.rout[s - 1]:
                out.append((Op.FREE, c.fwd[s - 1]))
            return
        k = name[1]
        if name[0] == "tail":
            self._tail(k, t, out)
            return self._rot(s, k - 1, 0, m + self.d[t + 1] + kt * self.x[t] - self.d[k], out)
        keep = 1 if self.rout[k - 1] else 0
        if name[0] == "split-free":
            out.append((Op.COMPUTE, c.fwd[s]))
            out.append((Op.FREE, c.fwd[s - 1]))
            self._fwd(s + 1, k - 1, out, first_input=s)
            self._rot(k, t, kt, m - self.x[k - 1] + self.x[s - 1], out)
            return self._tail(s, k - 1, out)
        self._fwd(s, k - 1, out)
        self._rot(k, t, kt, m - self.x[k - 1], out)
        m3 = m + self.d[t + 1] + kt * self.x[t] - self.d[k] - keep * self.x[k - 1]
        self._rot(s, k - 1, keep, m3, out)


def op_weights(g: CostedGraph, objective: str, paging_time: str):
    """weight(node, op) of one instruction: its time in the paging model, or its energy."""
    nodes = g.nodes
    if objective == "energy":
        fields = {Op.COMPUTE: "compute_energy_j", Op.PAGE_IN: "pagein_energy_j", Op.PAGE_OUT: "pageout_energy_j"}
        return lambda v, op: getattr(nodes[v], fields[op])
    fields = {Op.COMPUTE: "compute_time_s", Op.PAGE_IN: "pagein_time_s", Op.PAGE_OUT: "pageout_time_s"}
    hidden = paging_time == PAGING_HIDDEN
    return lambda v, op: 0.0 if hidden and op != Op.COMPUTE else getattr(nodes[v], fields[op])


def staged(ops: list[tuple[str, int]]) -> tuple[Step, ...]:
    """Steps with their stage: the last node whose first computation has begun (first computes
    come in id order on a chain, so stages never decrease)."""
    seen: set[int] = set()
    stage = 0
    steps = []
    for op, v in ops:
        if op == Op.COMPUTE and v not in seen:
            seen.add(v)
            stage = v
        steps.append(Step(op, v, stage))
    return tuple(steps)


def pofo_plan(
    g: CostedGraph,
    ram_bytes: int,
    *,
    objective: str = "time",
    paging_time: str = "serial",
    max_slots: int = MAX_SLOTS,
    time_limit: float | None = None,
    stop=None,
) -> PofoPlan:
    """POFO's schedule of chain ``g`` within ``ram_bytes`` (:class:`.chain.NotAChain` otherwise).

    ``objective``: ``"time"`` (as published: the fastest schedule, energy breaking ties) or
    ``"energy"`` (time breaking ties).  Past ``time_limit`` seconds, or once ``stop()`` is true,
    it raises :class:`PofoStopped` (the tables take O(N^3 S): 2 s on vgg16's 40 layers).
    """
    t0 = time.perf_counter()

    def halt():
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            raise PofoStopped(f"time limit ({time_limit:.3g} s)")
        if stop is not None and stop():
            raise PofoStopped("stop request")

    chain = read_chain(g)
    main = op_weights(g, objective, paging_time)
    other = op_weights(g, "energy" if objective == "time" else "time", paging_time)
    total_main = sum(main(v, Op.COMPUTE) for v in range(len(g.nodes))) or 1.0
    total_other = sum(other(v, Op.COMPUTE) for v in range(len(g.nodes))) or 1.0
    eps = 1e-9 * total_main / total_other  # a tie-break far below any difference that matters

    def weights(v, op):
        return main(v, op) + eps * other(v, op)

    free = ram_bytes - g.fixed_ram_bytes
    if free < 0:
        return PofoPlan((), INF, 1, 0, True)
    arrays = 2 * chain.layers * (chain.layers + 1)  # rotor tables, in RAM and stored, x_t kept or not
    room = MAX_CELLS // max(arrays, 1) - 1
    if room < MIN_SLOTS:
        raise PofoStopped(
            f"table size: a chain of {chain.layers} layers needs {arrays:,} tables, too many to keep "
            f"{MIN_SLOTS} memory slots each in {MAX_CELLS * 8 / 1e9:.1f} GB"
        )
    tables = _Tables(g, chain, free, weights, min(max_slots, room), halt)
    value = float(tables.top[0][tables.S])
    if not math.isfinite(value):
        return PofoPlan((), INF, tables.unit, tables.S, tables.exact)
    # the schedule is read back recursively, one level per layer at most
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * chain.layers + 1000))
    try:
        steps = staged(tables.schedule())
    finally:
        sys.setrecursionlimit(old)
    return PofoPlan(steps, value, tables.unit, tables.S, tables.exact)
