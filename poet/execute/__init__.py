"""Executing schedules on real tensors (PyTorch): executor, paging store, reference schedules.

Everything here needs torch, which is imported only when one of these names is first used
(``poet.cli.plan`` and ``poet.cli.train``, the ``plan`` and ``train`` commands, import it only when they run).
"""

from __future__ import annotations

import importlib

__all__ = [
    "ExecutionError",
    "Executor",
    "PagingError",
    "PagingStore",
    "RunResult",
    "reference_schedule",
    "run_schedule",
]

_WHERE = {
    "Executor": "executor",
    "ExecutionError": "executor",
    "RunResult": "run_result",
    "run_schedule": "executor",
    "InstructionRecord": "run_result",
    "reference_schedule": "reference",
    "reference_steps": "reference",
    "PagingError": "store",
    "PagingStore": "store",
}


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
