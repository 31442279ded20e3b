"""What a RAM region holds besides the arena: the stack bound read from machine code (frames, calls,
tail calls, the interpreter's indirect calls, refusals), the placement search that brings an arena down
to the live peak, and the fit that asks for what an arena limit leaves at once."""

from __future__ import annotations

import random
import subprocess

import pytest

from poet.cbackend import m4_stack
from poet.cbackend.arena import Residency, check_plan, live_peak, place, plan_arena, repack
from poet.cbackend.target_types import TargetError
from poet.graph.core import CostedGraph, CostedNode
from poet.schedule.core import Budget, Schedule, Step
from poet.schedule.validate import validate

# ---------------------------------------------------------------- the stack bound

DIS = """
firmware.elf:     file format elf32-littlearm

Disassembly of section .text:

00000100 <main>:
 100:\tpush\t{r4, r5, r6, lr}
 102:\tsub\tsp, #24
 104:\tbl\t200 <pkr_run_schedule>
 108:\tbl\t300 <helper>
 10c:\tpop\t{r4, r5, r6, pc}

00000200 <pkr_run_schedule>:
 200:\tstmdb\tsp!, {r4, r5, r6, r7, r8, lr}
 204:\tvpush\t{d8-d9}
 208:\tsub.w\tsp, sp, #1000\t@ 0x3e8
 20c:\tblx\tr6
 20e:\tb.w\t300 <helper>

00000300 <helper>:
 300:\tstr.w\tlr, [sp, #-8]!
 304:\tb.n\t3f8 <__adddf3+0x8>

000003f0 <__adddf3>:
 3f0:\tpush\t{r4, r5}
 3f4:\tpop\t{r4, r5}
 3f8:\tbx\tlr

00000400 <pk_k1>:
 400:\tpush\t{r4, lr}
 402:\tsub\tsp, #40\t@ 0x28
 404:\tpop\t{r4, pc}

00000500 <pk_k2>:
 500:\tpush\t{r4, r5, r6, r7, lr}
 502:\tbl\t300 <helper>

00000600 <pk_reset>:
 600:\tmov\tsp, r0
 602:\tb.w\t700 <pk_start>

00000700 <pk_start>:
 700:\tpush\t{r3, lr}
 702:\tbl\t100 <main>

00000800 <fault_common>:
 800:\tldr\tr2, [pc, #4]
 802:\tmov\tsp, r2
 804:\tb.w\t900 <pk_fault_report>

00000900 <pk_fault_report>:
 900:\tsub\tsp, #200
 902:\tbl\t300 <helper>
"""


def _with(monkeypatch, text):
    monkeypatch.setattr(
        m4_stack, "run_tool", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=text, stderr="")
    )


def test_the_stack_bound_follows_frames_calls_tail_calls_and_the_kernel_table(monkeypatch):
    _with(monkeypatch, DIS)
    b = m4_stack.stack_bound("firmware.elf", ["pk_k1", "pk_k2"])
    # pk_reset 0 > pk_start 8 > main 16+24 > run_schedule 24+16+1000 > the deeper kernel: pk_k1 8+40
    # (pk_k2 20 > helper 8 > __adddf3 8, entered in its middle, is 36)
    assert b.chain == (("pk_reset", 0), ("pk_start", 8), ("main", 40), ("pkr_run_schedule", 1040), ("pk_k1", 48))
    assert b.bytes == 1136 + m4_stack.EXCEPTION_FRAME_BYTES
    # the fault handler's chain (from the top again: 200 + 8 + 8) and pk_k2's are shallower
    _with(monkeypatch, DIS.replace(" 900:\tsub\tsp, #200", " 900:\tsub\tsp, #2000"))
    deep = m4_stack.stack_bound("firmware.elf", ["pk_k1", "pk_k2"])
    assert deep.bytes == 2016 and deep.chain[0] == ("fault_common", 0)


def test_a_stack_without_a_bound_is_refused_naming_why(monkeypatch):
    _with(monkeypatch, DIS)
    with pytest.raises(TargetError, match="calls through a pointer"):
        m4_stack.stack_bound("firmware.elf", [])
    with pytest.raises(TargetError, match="not in the firmware"):
        m4_stack.stack_bound("firmware.elf", ["pk_absent"])
    _with(monkeypatch, DIS.replace(" 502:\tbl\t300 <helper>", " 502:\tbl\t200 <pkr_run_schedule>"))
    with pytest.raises(TargetError, match="recursion"):
        m4_stack.stack_bound("firmware.elf", ["pk_k1", "pk_k2"])
    _with(monkeypatch, DIS.replace(" 402:\tsub\tsp, #40\t@ 0x28", " 402:\tsub\tsp, sp, r3"))
    with pytest.raises(TargetError, match="pk_k1 has no stack bound"):
        m4_stack.stack_bound("firmware.elf", ["pk_k1", "pk_k2"])


# ---------------------------------------------------------------- the placement search


def _streaming(rnd, n, sizes=(512, 1024, 4096, 8192)):
    """Blocks allocated and freed in the order tiles stream: short lives, a few sizes, all at once."""
    out, t = [], 0
    for v in range(n):
        t += rnd.randint(0, 1)
        out.append(Residency(v, t, t + rnd.randint(1, 12), rnd.choice(sizes)))
    return out


def test_the_placement_search_reaches_the_live_peak_where_largest_first_does_not():
    rnd = random.Random(5)
    above = 0
    for _ in range(20):
        res = _streaming(rnd, 300)
        peak = live_peak(res)
        lf = place(res, sorted(range(len(res)), key=lambda i: (-res[i].nbytes, res[i].start)))[1]
        plan = plan_arena(res, time_limit_s=20)
        check_plan(plan)
        assert peak <= plan.arena_bytes <= lf
        above += lf > peak
        assert plan.arena_bytes == peak, plan.orders_tried
    assert above >= 5  # measured: largest first alone is above the peak in 6 of the 20


def test_repack_keeps_every_block_inside_the_target_or_says_it_cannot():
    res = [Residency(0, 0, 2, 16), Residency(1, 1, 3, 16), Residency(2, 2, 4, 16)]
    offs = repack(res, [0, 16, 32], 32)
    assert offs is not None and max(o + 16 for o in offs) <= 32
    assert offs[0] != offs[1] and offs[1] != offs[2]
    assert repack(res, [0, 16, 32], 16) is None  # two blocks live at once never fit 16 B


# ---------------------------------------------------------------- the fit with an arena limit


def _chain(sizes):
    nodes = tuple(CostedNode(f"n{i}", "forward", b, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1) for i, b in enumerate(sizes))
    return CostedGraph("chain", nodes, tuple((i, i + 1) for i in range(len(sizes) - 1)), 0)


def test_with_an_arena_limit_the_first_re_solve_asks_for_what_the_limit_leaves():
    from poet.cbackend.fit import fit_arena

    g = _chain([40, 8, 48, 8])
    keep = [Step("compute", v) for v in range(4)] + [Step("free", v) for v in range(4)]
    early = [Step("compute", 0), Step("compute", 1), Step("free", 0), Step("compute", 2), Step("free", 1)]
    early += [Step("compute", 3), Step("free", 2), Step("free", 3)]
    first = Schedule(g, Budget(200), tuple(keep), "feasible", "poet", validate(g, keep, Budget(200)))
    asked = []

    def solver(s, ram, left):
        asked.append(ram)
        return Schedule(g, Budget(ram), tuple(early), "feasible", "poet", validate(g, early, Budget(ram)))

    fit = fit_arena(first, solver=solver, arena_limit=64)  # the budget leaves 200, the region 64
    assert asked == [64] and fit.fits and fit.available == 64
    assert fit.plan.arena_bytes <= 64 and fit.schedule.budget == first.budget
    # without a limit the first schedule fits its budget as it is
    assert len(fit_arena(first, solver=solver).attempts) == 1
