"""Bad device profiles (issue 23): the TOML key at fault is named, booleans are not numbers, and a NaN
speed is blamed on the profile, not on "node 0"."""

import pytest

from poet.cli import main
from poet.hardware.device import DEVICE_DIR, DeviceError, load_device

BASE = (DEVICE_DIR / "m4.toml").read_text()


def profile(tmp_path, old: str, new: str):
    assert old in BASE
    p = tmp_path / "dev.toml"
    p.write_text(BASE.replace(old, new))
    return p


@pytest.mark.parametrize(
    "raw,says",
    [
        ('"256KB"', "must be a number"),
        ("inf", "must be a finite number"),
        ("nan", "must be a finite number"),
        ("{a = 1}", "must be a number"),
        ("-1", ">= 0"),
        ("1.5", "whole number of bytes"),
        ("true", "must be a number"),
        ("1" + "0" * 30, "at most"),
    ],
)
def test_a_bad_ram_bytes_names_the_key(tmp_path, raw, says):
    p = profile(tmp_path, "ram_bytes = 262144", f"ram_bytes = {raw}")
    with pytest.raises(DeviceError) as e:
        load_device(p)
    assert f"{p}: ram_bytes" in str(e.value) and says in str(e.value)


@pytest.mark.parametrize(
    "key,line",
    [
        ("flops_per_s", "flops_per_s = 6369910.145 "),
        ("read_bytes_per_s", "read_bytes_per_s = 4616510.0"),
        ("read_latency_s", "read_latency_s = 0.000109"),
        ("power_w", "power_w = 0.0109824"),
    ],
)
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "true", '"1"', "{a = 1}", "-1"])
def test_a_bad_rate_or_power_names_the_toml_key_not_a_node(capsys, tmp_path, key, line, raw):
    p = profile(tmp_path, line, f"{key} = {raw}")
    with pytest.raises(DeviceError) as e:
        load_device(p)
    assert f"] {key} must be" in str(e.value) and "node" not in str(e.value)
    assert main(["solve", "--model", "linear", "--device", str(p), "--memory", "80%", "--quiet", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert key in err and "node 0" not in err and "Traceback" not in err


def test_power_true_is_not_one_watt(tmp_path):
    p = profile(tmp_path, "power_w = 0.0109824", "power_w = true")
    with pytest.raises(DeviceError, match=r"\[compute\] power_w must be a number, got True"):
        load_device(p)


def test_a_zero_speed_is_refused_but_a_zero_latency_is_fine(tmp_path):
    with pytest.raises(DeviceError, match="flops_per_s must be a number above 0"):
        load_device(profile(tmp_path, "flops_per_s = 6369910.145 ", "flops_per_s = 0 "))
    assert load_device(profile(tmp_path, "read_latency_s = 0.000109", "read_latency_s = 0")).read_latency_s == 0


@pytest.mark.parametrize(
    "content,says",
    [
        (BASE.replace("nRF52840", "nRF52840 \u00e9").encode("latin-1"), "not UTF-8"),
        (BASE.encode("utf-16"), "UTF-16"),
        (b"x = = y", "not valid TOML"),
    ],
)
def test_an_unreadable_profile_names_the_file(tmp_path, content, says):
    p = tmp_path / "dev.toml"
    p.write_bytes(content)
    with pytest.raises(DeviceError) as e:
        load_device(p)
    assert says in str(e.value) and str(p) in str(e.value)


def test_a_speed_so_small_that_costs_overflow_is_blamed_on_the_profile(capsys, tmp_path):
    p = profile(tmp_path, "flops_per_s = 6369910.145 ", "flops_per_s = 1e-320 ")
    assert main(["solve", "--model", "linear", "--device", str(p), "--memory", "80%", "--quiet", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "its rates make a cost that is not finite" in err and "Traceback" not in err
