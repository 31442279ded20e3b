"""The ``poet`` command line: one module per command, registered here in the order ``poet --help``
lists them.

=================  =============================================================
command            module (``poet/cli/``)
=================  =============================================================
``solve``          ``solve.py``: a zoo network or a graph file, through ``plan_and_solve``
``models``         ``models.py``: the built-in networks
``devices``        ``devices.py``: the built-in device profiles
``export-graph``   ``export_graph.py``: a costed graph as ``poet-graph/1``
``validate``       ``validate.py``: replay a saved schedule
``sweep``          ``sweep.py``: a grid of budgets (and studies of several)
``report``         ``report.py``: tables and plots of a sweep or a schedule
``plan``           ``plan.py``: trace a PyTorch model and schedule its training step
``train``          ``train.py`` (``train_target.py`` for ``--target``): train with the schedule
``profile``        ``profile.py``: measure a machine into a device profile
``compile``        ``compile.py``: a schedule of a traced model compiled to C
=================  =============================================================

Shared option sets: ``model_options.py`` (``--model``, ``--batch-size``, ...) and
``poet.graph.tile_option.add_tile_option`` (``--tile``).
"""

from __future__ import annotations

import argparse
import sys

from ..console import OutputPathError, Progress, check_out_path, ctrl_c_stops_the_solve, warn_uncached
from ..graph.core import GraphError
from ..hardware.device import DeviceError
from ..schedule.validate import ScheduleError
from ..units import BudgetError
from . import compile as compile_command
from . import devices, export_graph, models, plan, profile, report, solve, sweep, train, validate
from .solve import EXAMPLE

__all__ = [
    "COMMANDS",
    "OutputPathError",
    "Progress",
    "USER_ERRORS",
    "build_parser",
    "check_out_path",
    "ctrl_c_stops_the_solve",
    "main",
    "warn_uncached",
]


# OSError: a file that could not be read or written (disk full, no such directory)
USER_ERRORS = (BudgetError, GraphError, DeviceError, ScheduleError, OutputPathError, OSError)

# the command modules, in the order `poet --help` lists them; each has register(subparsers)
COMMANDS = (solve, models, devices, export_graph, validate, sweep, report, plan, train, profile, compile_command)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="poet",
        description="Energy-optimal rematerialization + paging schedules for on-device training.",
        epilog=f"Example: {EXAMPLE}",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return p


def _default_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt again (poet/__init__ quiets it while the modules load)."""
    import signal
    import threading

    from .. import interrupted_while_loading

    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is interrupted_while_loading
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv=None) -> int:
    try:
        # a Ctrl-C while the modules load ends quietly (poet/__init__), as any other
        p = build_parser()
        try:
            a = p.parse_args(argv)
        except SystemExit as e:  # --help, or argparse's error (already printed, naming the option)
            return e.code if isinstance(e.code, int) else 2
    except KeyboardInterrupt:
        print("\npoet: interrupted", file=sys.stderr)
        return 130
    finally:
        _default_ctrl_c()
    if not getattr(a, "func", None):
        p.print_help()
        return 1
    try:
        return a.func(a)
    except USER_ERRORS as e:
        print(f"poet: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\npoet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
