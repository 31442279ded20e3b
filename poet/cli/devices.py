"""``poet devices``: the built-in device profiles."""

from __future__ import annotations


def cmd_devices(a) -> int:
    from ..hardware.device import list_devices, load_device
    from ..units import fmt_bytes

    print(f"{'device':<12}{'RAM':>10}{'GFLOP/s':>10}{'nJ/FLOP':>10}{'read MB/s':>11}{'write MB/s':>11}  part")
    for name in list_devices():
        d = load_device(name)
        print(
            f"{name:<12}{fmt_bytes(d.ram_bytes):>10}{d.flops_per_s / 1e9:>10.4g}{d.joules_per_flop * 1e9:>10.3g}"
            f"{d.read_bytes_per_s / 1e6:>11.4g}{d.write_bytes_per_s / 1e6:>11.4g}  {d.part}"
        )
    print("Profiles are TOML files; pass --device PATH.toml for your own (see docs/devices.md).")
    return 0


def register(subparsers) -> None:
    subparsers.add_parser("devices", help="list the built-in device profiles").set_defaults(func=cmd_devices)
