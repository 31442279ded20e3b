"""Every strategy, in one table: name -> function(graph, budget, options) -> Schedule.

A strategy is one small module here with a ``DESCRIPTION`` and a solve function; it is listed
below, explicitly (nothing registers itself on import).  :func:`register` adds one at run time.
"""

from __future__ import annotations

from collections.abc import Callable

from . import capuchin, capuchin_paper, chen, keep_all, paging, poet, pofo, remat

# name -> callable(graph, budget, options) -> Schedule (steps not yet validated)
STRATEGIES: dict[str, Callable] = {
    "poet": poet.solve_poet,
    "remat": remat.solve_remat,
    "paging": paging.solve_paging,
    "keep-all": keep_all.solve_keep_all,
    "chen": chen.solve_chen,
    "capuchin": capuchin.solve_capuchin,
    "capuchin-paper": capuchin_paper.solve_capuchin_paper,
    "pofo": pofo.solve_pofo,
}
DESCRIPTIONS: dict[str, str] = {
    "poet": poet.DESCRIPTION,
    "remat": remat.DESCRIPTION,
    "paging": paging.DESCRIPTION,
    "keep-all": keep_all.DESCRIPTION,
    "chen": chen.DESCRIPTION,
    "capuchin": capuchin.DESCRIPTION,
    "capuchin-paper": capuchin_paper.DESCRIPTION,
    "pofo": pofo.DESCRIPTION,
}


def register(name: str, description: str):
    """Add a strategy (a decorator): ``@register("mine", "what it does") def solve_mine(g, budget, opts)``."""

    def deco(fn):
        STRATEGIES[name] = fn
        DESCRIPTIONS[name] = description
        return fn

    return deco
