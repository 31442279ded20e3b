"""The flags every target builds the kernels with keep a GCC 12 wrong-code case away.

GCC 12.2 at -O2 (x86-64 and arm-none-eabi alike) hoists the read of ``e.off[0]`` out of the loop
below, as if ``step`` (not inlined) left the array alone: the sum comes out as 7 * x[0].  The
kernels walk views with exactly this pattern (an odometer struct advanced by a helper), so
``hostlib.CFLAGS`` turns the pass responsible off (``-fno-ipa-modref``).
"""

from __future__ import annotations

import subprocess

import pytest

from poet.cbackend import hostlib

CASE = r"""
#include <stdint.h>
#include <stdio.h>
typedef struct { int k, nv; int32_t size[8], idx[8]; int32_t stride[4][8]; int64_t off[4]; } walk;
__attribute__((noinline)) static void step(walk *w) {
    for (int d = w->k - 1; d >= 0; d--) {
        if (++w->idx[d] < w->size[d]) {
            for (int i = 0; i < w->nv; i++) w->off[i] += w->stride[i][d];
            return;
        }
        for (int i = 0; i < w->nv; i++) w->off[i] -= (int64_t)w->stride[i][d] * (w->size[d] - 1);
        w->idx[d] = 0;
    }
}
__attribute__((noinline)) static float sum(const float *x, int n) {
    walk e;
    e.k = 1, e.nv = 4, e.size[0] = n, e.idx[0] = 0;
    for (int i = 0; i < 4; i++) e.stride[i][0] = 1, e.off[i] = 0;
    float s = 0.0f;
    for (int j = 0; j < n; j++, step(&e)) s += x[e.off[0]];
    return s;
}
int main(void) {
    const float x[7] = {1, 2, 3, 4, 5, 6, 7};
    printf("%g\n", (double)sum(x, 7));
    return 0;
}
"""


def test_the_build_flags_compile_the_odometer_case_right(tmp_path):
    try:
        cc = hostlib.compiler()
    except hostlib.KernelError as e:
        pytest.skip(str(e))
    src, exe = tmp_path / "case.c", tmp_path / "case"
    src.write_text(CASE)
    subprocess.run([cc, *hostlib.CFLAGS, str(src), "-o", str(exe)], check=True, capture_output=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip() == "28"
