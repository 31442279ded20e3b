"""Searches for stage plans: the greedy rules, the guide search, the interval search, the worker pool.

None of them proves anything; every plan they return has been replayed by the validator.
"""
