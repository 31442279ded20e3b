"""POET: energy-optimal rematerialization and paging for on-device training.

Data flows one way: model -> graph -> costs -> solver -> schedule -> (validate) -> execute / report.
"""

import importlib
import sys as _sys


def interrupted_while_loading(signum, frame):
    print("\npoet: interrupted", file=_sys.stderr)
    raise SystemExit(130)


# Run as the `poet` command (or `python -m poet`), a Ctrl-C while the modules load ends quietly, not with
# an import traceback; poet.cli.main hands Ctrl-C back to Python once they are loaded.  A program that
# imports poet keeps its own handler.
if _sys.argv and (_sys.argv[0] == "-m" or _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1] in ("poet", "poet.exe")):
    import signal as _signal

    try:
        _signal.signal(_signal.SIGINT, interrupted_while_loading)
    except ValueError:  # not the main thread
        pass

from .graph import CostedGraph, Graph, load_graph, save_graph  # noqa: E402 (the Ctrl-C handler first)
from .hardware import list_devices, load_device  # noqa: E402 (the Ctrl-C handler first)
from .schedule import Budget, Schedule, ScheduleError, load_schedule, save_schedule, validate  # noqa: E402 (the Ctrl-C handler first)
from .solve import solve  # noqa: E402 (the Ctrl-C handler first)

__version__ = "0.1.0"


def __getattr__(name):
    # poet.plan / poet.Plan need torch, the strategy table numpy and HiGHS: imported when first used
    if name in ("plan", "plan_program", "Plan"):
        return getattr(importlib.import_module(".planner", __name__), name)
    if name == "STRATEGIES":
        return getattr(importlib.import_module(".solve.strategies", __name__), name)
    raise AttributeError(f"module 'poet' has no attribute {name!r}")


__all__ = [
    "Budget",
    "Plan",
    "plan",
    "plan_program",
    "CostedGraph",
    "Graph",
    "STRATEGIES",
    "Schedule",
    "ScheduleError",
    "list_devices",
    "load_device",
    "load_graph",
    "load_schedule",
    "save_graph",
    "save_schedule",
    "solve",
    "validate",
]
