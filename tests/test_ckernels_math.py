"""pk_math (the deterministic math library every kernel uses) against torch/numpy over dense sweeps."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from poet.cbackend import hostlib, mathcheck  # noqa: E402

# the bounds pk_math.h documents (measured maxima over these sweeps: bench/pk_math_accuracy.py)
FLOAT_BOUND_ULP = 2.0
DOUBLE_BOUND_ULP = 1.0  # against numpy's double functions, themselves within 1 ulp of exact


@pytest.mark.parametrize("name", sorted(mathcheck.FLOAT_FUNCTIONS))
def test_float_functions_within_two_ulp(name):
    acc = mathcheck.measure(name, points=1 << 20)
    bound = 0.5 if name == "sqrt" else FLOAT_BOUND_ULP  # sqrt is correctly rounded
    assert acc.max_ulp <= bound, acc
    assert acc.exact_fraction > 0.9, acc  # most results are the correctly rounded value


@pytest.mark.parametrize("name", sorted(mathcheck.DOUBLE_FUNCTIONS))
def test_double_functions_within_one_ulp_of_numpy(name):
    acc = mathcheck.measure(name, points=1 << 18, dtype="float64")
    assert acc.max_ulp <= DOUBLE_BOUND_ULP, acc
    assert acc.exact_fraction == 1.0 or name != "sqrt", acc  # sqrt: bitwise numpy's (IEEE) sqrt


def _eval(fn: str, values, dtype=torch.float32):
    x = torch.tensor(values, dtype=dtype)
    y = torch.empty_like(x)
    table = mathcheck.FLOAT_FUNCTIONS if dtype == torch.float32 else mathcheck.DOUBLE_FUNCTIONS
    hostlib.call("math_eval", [x], [y], [table[fn][0]])
    return y


def test_sqrt_is_bitwise_ieee_on_random_bit_patterns():
    g = np.random.default_rng(0)
    bits = g.integers(0, 0x7F800000, size=1 << 20, dtype=np.uint32)  # every positive finite float
    x = torch.from_numpy(bits.view(np.float32).copy())
    y = torch.empty_like(x)
    hostlib.call("math_eval", [x], [y], [0])
    assert np.array_equal(y.numpy().view(np.uint32), np.sqrt(x.numpy()).view(np.uint32))
    b64 = g.integers(0, 0x7FF0000000000000, size=1 << 16, dtype=np.uint64)
    x = torch.from_numpy(b64.view(np.float64).copy())
    y = torch.empty_like(x)
    hostlib.call("math_eval", [x], [y], [0])
    assert np.array_equal(y.numpy().view(np.uint64), np.sqrt(x.numpy()).view(np.uint64))


def test_special_values_follow_c99():
    inf, nan = float("inf"), float("nan")
    y = _eval("exp", [inf, -inf, nan, 0.0, 100.0, -200.0])
    assert y[0] == inf and y[1] == 0 and torch.isnan(y[2]) and y[3] == 1 and y[4] == inf and y[5] == 0
    y = _eval("log", [0.0, -1.0, inf, 1.0, nan])
    assert y[0] == -inf and torch.isnan(y[1]) and y[2] == inf and y[3] == 0 and torch.isnan(y[4])
    y = _eval("log1p", [-1.0, -2.0, 0.0, 1e-30, inf])
    assert y[0] == -inf and torch.isnan(y[1]) and y[2] == 0 and y[3] == np.float32(1e-30) and y[4] == inf
    y = _eval("expm1", [-inf, inf, -0.0, 1e-30])
    assert y[0] == -1 and y[1] == inf and y[2] == 0 and torch.signbit(y[2]) and y[3] == np.float32(1e-30)
    y = _eval("tanh", [inf, -inf, 30.0, -0.0, nan])
    assert y[0] == 1 and y[1] == -1 and y[2] == 1 and torch.signbit(y[3]) and torch.isnan(y[4])
    y = _eval("erf", [inf, -inf, 10.0, -0.0, nan])
    assert y[0] == 1 and y[1] == -1 and y[2] == 1 and torch.signbit(y[3]) and torch.isnan(y[4])
    y = _eval("sigmoid", [inf, -inf, 0.0, nan])
    assert y[0] == 1 and y[1] == 0 and y[2] == 0.5 and torch.isnan(y[3])
    y = _eval("sqrt", [-1.0, -0.0, inf, nan])
    assert torch.isnan(y[0]) and y[1] == 0 and torch.signbit(y[1]) and y[2] == inf and torch.isnan(y[3])
    y = _eval("exp", [inf, -inf, 1000.0, -1000.0, nan], torch.float64)
    assert y[0] == inf and y[1] == 0 and y[2] == inf and y[3] == 0 and torch.isnan(y[4])
    y = _eval("log", [0.0, -1.0, inf, 5e-324], torch.float64)
    assert y[0] == -inf and torch.isnan(y[1]) and y[2] == inf and abs(float(y[3]) - np.log(5e-324)) < 1e-12


def test_sweep_covers_every_binade_and_both_ends():
    x = mathcheck.float_sweep(-5.0, 5.0, 1 << 12)
    assert x[0] == np.float32(-5.0) and x[-1] == np.float32(5.0) and np.all(np.diff(x) > 0)
    assert (np.abs(x[(x != 0)]) < 1e-30).any()  # tiny magnitudes are sampled, not skipped


def test_ulp_errors_are_measured_in_the_reference_binade():
    ref = torch.tensor([1.0, 1.0, 2.0**-149], dtype=torch.float64)
    y = torch.tensor([1.0 + 2.0**-23, 1.0 - 2.0**-24, 0.0], dtype=torch.float64)
    err = mathcheck.ulp_errors(y, ref, 24, -149)
    assert err.tolist() == [1.0, 0.5, 1.0]
    inf = torch.tensor([float("inf"), 1e39, float("nan")], dtype=torch.float64)
    assert mathcheck.ulp_errors(torch.tensor([float("inf")] * 2 + [float("nan")]), inf, 24, -149).tolist() == [0, 0, 0]


def _external_symbols(cc: str, nm: str, flags, tmp_path) -> set[str]:
    """The symbols the kernel library needs from outside itself, compiled with ``cc`` and ``flags``."""
    objs = []
    for src in hostlib.kernel_sources():
        objs.append(tmp_path / (src.stem + ".o"))
        cmd = [cc, *hostlib.CFLAGS, *flags, "-I", str(hostlib.RUNTIME), "-c", str(src), "-o", str(objs[-1])]
        subprocess.run(cmd, check=True)

    def names(*opts):
        out = subprocess.run([nm, *opts, *map(str, objs)], capture_output=True, text=True, check=True).stdout
        return {ln.split()[-1] for ln in out.splitlines() if ln.strip() and not ln.endswith(":")}

    return names("-u") - names("--defined-only")


def test_kernels_call_no_libm_on_the_host(tmp_path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not installed")
    used = _external_symbols(hostlib.compiler(), nm, [], tmp_path)
    assert used <= {"memcpy", "memset", "memmove"}, used


def test_kernels_build_for_cortex_m4_without_libm(tmp_path):
    """The kernels compile for the M4F with the target's flags and need nothing but libgcc's soft-double
    helpers (__aeabi_*) and string.h: no libm, no libc."""
    gcc, nm = shutil.which("arm-none-eabi-gcc"), shutil.which("arm-none-eabi-nm")
    if gcc is None or nm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("arm-none-eabi-gcc missing in CI (apt-get install gcc-arm-none-eabi)")
        pytest.skip("arm-none-eabi-gcc not installed (apt-get install gcc-arm-none-eabi)")
    m4 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
    used = _external_symbols(gcc, nm, m4, tmp_path)
    extra = {s for s in used if not s.startswith("__aeabi_")} - {"memcpy", "memset", "memmove"}
    assert not extra, extra
