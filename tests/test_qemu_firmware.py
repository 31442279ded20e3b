"""The qemu-m4 target on small hand-written firmwares: startup, semihosting, the RAM cap at link time
and at run time (MPU), fault reports, exit codes and the instruction counter."""

from __future__ import annotations

import shutil

import pytest
from toolchain import build_cache_dir, qemu_m4_ready  # noqa: F401  (fixtures)

from poet.cbackend import icount, qemu_m4

RAM = 64 << 10


pytestmark = pytest.mark.usefixtures("qemu_m4_ready")


def firmware(tmp_path, body: str, *, ram: int = RAM, stack: int = qemu_m4.DEFAULT_STACK_BYTES, top: str = ""):
    """A project whose main() is ``body``, built for ``ram`` bytes."""
    src = f"""
#include <stdint.h>
#include <string.h>
#include "pk_platform.h"
#include "pk_sections.h"
{top}
int main(void) {{
{body}
}}
"""
    (tmp_path / "main.c").write_text(src)
    return qemu_m4.build(tmp_path, ram, stack_bytes=stack)


def test_startup_copies_data_zeroes_bss_and_semihosting_carries_files(tmp_path):
    top = """
float scale[4] = {0.5f, 2.0f, -1.0f, 4.0f};      /* .data: initial values copied from flash */
static uint32_t zeroed[64];                       /* .bss: zero at main */
static float work[256] PK_ARENA;
"""
    body = r"""
    for (int i = 0; i < 64; i++) if (((volatile uint32_t *)zeroed)[i] != 0) return 41;
    int in = pk_file_open("batch.bin", PK_READ);
    if (in < 0 || pk_file_read(in, 0, work, sizeof work) != 0) return 42;
    if (pk_file_read(in, 4 * 256 - 8, zeroed, 16) == 0) return 43;   /* past the end: an error */
    pk_file_close(in);
    for (int i = 0; i < 256; i++) work[i] = work[i] * ((volatile float *)scale)[i & 3] + 1.0f;
    int out = pk_file_open("out.bin", PK_WRITE);
    if (out < 0 || pk_file_write(out, 0, work, sizeof work) != 0) return 44;
    pk_file_close(out);
    if (pk_file_open("no-such-file.bin", PK_READ) >= 0) return 45;
    pk_print("all done");
    return 0;
"""
    import numpy as np

    b = firmware(tmp_path, body, top=top)
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    (tmp_path / "batch.bin").write_bytes(x.tobytes())
    out = qemu_m4.run(b, tmp_path)
    assert out.ok, (out.exit_code, out.text)
    assert "all done" in out.text and "pk-stack" not in out.text
    want = x * np.tile(np.float32([0.5, 2.0, -1.0, 4.0]), 64) + np.float32(1.0)
    assert np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32).tobytes() == want.tobytes()
    assert 0 < out.stack_used <= b.memory.stack
    assert b.memory.arena == 1024 and b.memory.data >= 16 and b.memory.bss >= 256
    assert b.memory.ram <= RAM and b.memory.ram_region == RAM and b.memory.flash > 0
    assert out.marks is None and out.instructions is None


def test_exit_code_is_the_firmwares(tmp_path):
    out = qemu_m4.run(firmware(tmp_path, "return 7;"), tmp_path)
    assert out.exit_code == 7 and not out.ok and out.fault is None
    assert "exited with code 7" in out.problem()


def fitting_firmware(tmp_path, arena_bytes: int, ram: int):
    body = "volatile uint8_t *w = work; w[3] = 1; return w[3] - 1;"
    return firmware(tmp_path, body, ram=ram, top=f"uint8_t work[{arena_bytes}] PK_ARENA;")


def test_ram_region_is_the_budget_exactly(tmp_path):
    # how much RAM does this firmware need?  (link with room to spare, read the sections)
    need = fitting_firmware(tmp_path, 4000, 1 << 20).memory.ram
    arena = 4000 + (-need) % 32  # make the need a multiple of the MPU's 32-byte blocks
    need = fitting_firmware(tmp_path, arena, 1 << 20).memory.ram
    assert need % 32 == 0
    exact = fitting_firmware(tmp_path, arena, need)
    assert exact.memory.ram == need == exact.memory.ram_region
    assert qemu_m4.run(exact, tmp_path).ok
    with pytest.raises(qemu_m4.TargetError) as e:
        fitting_firmware(tmp_path, arena, need - 1)
    msg = str(e.value)
    assert f"needs {need:,} B" in msg and f"RAM region is {need - 1:,} B, 1 B too many" in msg
    assert f"arena {arena:,}" in msg
    # the failed link left the good firmware's outputs alone
    assert qemu_m4.run(exact, tmp_path).ok


VIOLATION = "data access violation"
FAULTS = {
    "write past the RAM region": (
        f"*(volatile uint32_t *)(0x20000000u + {RAM} + 64) = 1; return 0;",
        "MemManage",
        "data access violation",
        0x20000000 + RAM + 64,
    ),
    "write to flash": (
        "uint32_t *volatile p = (uint32_t *)0x100; *p = 1; return 0;",
        "MemManage",
        "data access violation",
        0x100,
    ),
    "read of unmapped memory": (
        "return *(volatile int *)0x21000000;",
        "MemManage",
        "data access violation",
        0x21000000,
    ),
    "execute from RAM": ("return ((int (*)(void))0x20000401u)();", "MemManage", "instruction access violation", None),
    "stack overflow": ("return deep(1 << 20);", "MemManage", "stack overflow", range(0x20000000 - 64, 0x20000000)),
    "integer division by zero": ("return 10 / zero;", "UsageFault", "division by zero", None),
}
DEEP = """
volatile int zero = 0;
__attribute__((noinline)) int deep(int n) {
    volatile char pad[64]; pad[n & 63] = (char)n; return n ? deep(n - 1) + pad[0] : 0;
}
"""


@pytest.mark.parametrize("case", list(FAULTS))
def test_stray_access_faults_and_is_reported(tmp_path, case):
    body, kind, reason, address = FAULTS[case]
    b = firmware(tmp_path, body, top=DEEP)
    out = qemu_m4.run(b, tmp_path, timeout_s=20)
    assert not out.ok and not out.timed_out
    assert out.exit_code == {v: k for k, v in qemu_m4.FAULT_EXITS.items()}[kind]
    assert out.fault is not None, out.text
    assert (out.fault.kind, out.fault.reason) == (kind, reason)
    assert out.fault.address in address if isinstance(address, range) else out.fault.address == address
    if case not in ("stack overflow", "execute from RAM"):
        assert out.fault.where and out.fault.where.startswith("main"), out.fault
    assert kind in out.problem() and reason in out.problem()


def test_the_stack_is_painted_and_measured(tmp_path):
    used = {}
    for size in (1500, 3000):
        top = f"__attribute__((noinline)) int use(int n) {{ volatile uint8_t buf[{size}]; buf[n] = 1; return buf[n]; }}"
        used[size] = qemu_m4.run(firmware(tmp_path, "return use(3) - 1;", top=top), tmp_path).stack_used
    assert 1500 - 16 <= used[3000] - used[1500] <= 1500 + 16


LOOP = """
static void spin(uint32_t n) {  /* exactly 2 instructions per iteration */
    __asm__ volatile("1: subs %0, %0, #1\\n bne 1b\\n" : "+r"(n) : : "cc");
}
"""


def test_instruction_counts_repeat_exactly_and_count_what_ran(tmp_path):
    body = "pk_mark(0); spin(1000); pk_mark(1); pk_mark(2); spin(4000); pk_mark(3); return 0;"
    b = firmware(tmp_path, body, top=LOOP)
    first = qemu_m4.run(b, tmp_path, count=True)
    second = qemu_m4.run(b, tmp_path, count=True)
    assert first.ok and len(first.marks) == 4
    assert (first.marks, first.instructions) == (second.marks, second.instructions)
    spans = icount.InstructionCount(first.instructions, first.marks).between_marks()
    assert spans[2] - spans[0] == 2 * (4000 - 1000)
    assert first.instructions > first.marks[-1]


def test_heap_libm_and_os_calls_are_refused_at_link(tmp_path):
    cases = {
        "#include <stdlib.h>": ("return malloc(8) != 0;", "no heap"),
        "#include <math.h>": ("return (int)expf((float)zero);", "pk_math"),
        "#include <time.h>": ("return (int)time(0);", "no OS calls"),
    }
    for include, (body, says) in cases.items():
        with pytest.raises(qemu_m4.TargetError, match=says):
            firmware(tmp_path, body, top=include + "\nvolatile int zero = 0;")


def test_an_endless_loop_times_out(tmp_path):
    out = qemu_m4.run(firmware(tmp_path, "for (;;) {}"), tmp_path, timeout_s=1)
    assert out.timed_out and not out.ok and "time limit" in out.problem()


def test_external_region_is_outside_the_budget(tmp_path):
    top = "static float grads[3000] PK_EXTERNAL;\nstatic float acts[500] PK_ARENA;"
    body = "for (int i = 0; i < 3000; i++) grads[i] = acts[i % 500] + 1.0f;\nreturn grads[2999] == 1.0f ? 0 : 1;"
    b = firmware(tmp_path, body, top=top, ram=16 << 10)
    assert b.memory.external == 12000 and b.memory.arena == 2000 and b.memory.ram <= 16 << 10
    assert qemu_m4.run(b, tmp_path).ok
    syms = {n: qemu_m4.symbol_address(b.binary, n) for n in ("grads", "acts")}
    assert 0x21000000 <= syms["grads"] < 0x22000000 and 0x20000000 <= syms["acts"] < 0x20000000 + (16 << 10)
    assert ".pk_arena" in b.map_file.read_text()


def test_missing_toolchain_names_the_debian_packages(tmp_path, monkeypatch):
    qemu_m4.missing.cache_clear()
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda t, *a, **k: None if t == qemu_m4.QEMU else real(t, *a, **k))
    try:
        msg = qemu_m4.missing()
        assert "qemu-system-arm not found" in msg
        assert (
            "apt-get install --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm" in msg
        )
        with pytest.raises(qemu_m4.TargetError, match="apt-get install"):
            qemu_m4.build(tmp_path, RAM)
    finally:
        qemu_m4.missing.cache_clear()


@pytest.mark.parametrize("ram, stack", [(100, 4096), (8 << 20, 4096), (4096, 4096), (RAM, 100), (RAM, 1001)])
def test_bad_sizes_are_refused_with_what_would_work(tmp_path, ram, stack):
    with pytest.raises(qemu_m4.TargetError, match="give"):
        qemu_m4.build(tmp_path, ram, stack_bytes=stack)


def test_the_link_map_shows_every_section_in_its_region(tmp_path):
    top = "float grads[300] PK_EXTERNAL;\nfloat acts[500] PK_ARENA;\nfloat init[4] = {1, 2, 3, 4};"
    body = "volatile float *g = grads;\ng[1] = acts[2] + init[3];\nreturn g[1] == 4.0f ? 0 : 1;"
    b = firmware(tmp_path, body, top=top, ram=16 << 10)
    text = "\n".join(b.notes)
    assert (
        "RAM [0x20000000, 0x20004000)" in text
        and ".pk_arena 2,000 B" in text
        and ".stack 4,096 B at 0x20000000" in text
    )
    assert "EXTERNAL [0x21000000, 0x22000000): 1,200 of" in text and "FLASH [0x00000000" in text
    # a section outside its region is refused (here: a RAM region said to be smaller than the link's)
    with pytest.raises(qemu_m4.TargetError, match="outside the RAM region"):
        qemu_m4.link_map_lines(b.binary, 4096)


@pytest.mark.parametrize("ram", [1_198_368, 200_000, 32_768 + 96])
def test_the_mpu_grants_exactly_the_ram_region(tmp_path, ram):
    """Budgets that need many MPU regions (1,198,368 B takes six): the last word of the region is
    writable, the first word past it faults."""
    top = f"#define END (0x20000000u + {ram}u)"
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    inside = firmware(tmp_path / "in", "*(volatile uint32_t *)(END - 4) = 7; return 0;", ram=ram, top=top)
    assert qemu_m4.run(inside, tmp_path / "in").ok
    past = firmware(tmp_path / "out", "*(volatile uint32_t *)END = 7; return 0;", ram=ram, top=top)
    out = qemu_m4.run(past, tmp_path / "out")
    assert out.fault is not None and out.fault.kind == "MemManage" and out.fault.address == 0x20000000 + ram
