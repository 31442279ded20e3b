"""Searches for schedules: the one-pass paging schedule, the idle-gap plan, the greedy rules (one run in
``greedy_run``), the guide search, the interval search, the worker pool.

None of them proves anything; every schedule they produce is replayed by the validator before a solve
returns it.
"""
