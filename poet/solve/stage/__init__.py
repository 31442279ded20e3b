"""The stage form shared by every solver of it: the plan, its costs, and the one emitter.

``plan``: :class:`Plan`, :class:`GuideKind`, :func:`plan_costs`, :func:`ram_cap`.  ``emit``: the free rule
(:func:`freed_at_start`, :func:`freed_after`, :func:`last_readers`) and :func:`emit`.
"""

from .emit import emit, freed_after, freed_at_start, last_readers, replays, without_deadline
from .plan import RAM_MARGIN, GuideKind, Plan, drop_unread_pageouts, plan_costs, ram_cap

__all__ = [
    "RAM_MARGIN",
    "GuideKind",
    "Plan",
    "drop_unread_pageouts",
    "emit",
    "freed_after",
    "freed_at_start",
    "last_readers",
    "plan_costs",
    "ram_cap",
    "replays",
    "without_deadline",
]
