"""Executing schedules on real tensors (PyTorch): executor, paging store, reference schedules."""
from .store import PagingError, PagingStore

__all__ = ["ExecutionError", "Executor", "PagingError", "PagingStore", "RunResult", "reference_schedule",
           "run_schedule"]


def __getattr__(name):  # torch is imported only when the executor is used
    if name in ("Executor", "ExecutionError", "RunResult", "run_schedule", "InstructionRecord"):
        from . import executor
        return getattr(executor, name)
    if name in ("reference_schedule", "reference_steps"):
        from . import reference
        return getattr(reference, name)
    raise AttributeError(name)
