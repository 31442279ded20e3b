"""The targets by name: ``get_target("host")``, ``get_target("qemu-m4")`` (see :mod:`poet.cbackend.targets`)."""

from __future__ import annotations

from .targets import HOST, TARGETS, Target, TargetError

__all__ = ["TARGETS", "get_target"]


def get_target(name: str) -> Target:
    """The target called ``name`` (``host`` or ``qemu-m4``)."""
    if name == "host":
        return HOST
    if name == "qemu-m4":
        from . import qemu_m4

        return qemu_m4.TARGET
    raise TargetError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
