"""Budget sweeps: many (strategy, RAM budget, runtime budget) points of one model on one device,
and studies of several models x devices, solved in a local process pool or on a Ray cluster.

A sweep directory holds

* ``sweep.json`` -- ``poet-sweep/1``: the sweep's identity (model, device,
  paging model, batch size), reference numbers of the graph, and every point
  finished so far; it is rewritten atomically after each point, so an
  interrupted sweep resumes from it (finished points are skipped);
* ``sweep.csv`` -- the same points as a flat table (:data:`COLUMNS`);
* ``schedules/`` -- the ``poet-schedule/1`` file of every feasible point;
* the plots written by :mod:`poet.report.plots`.

Before a point is solved, finished points are searched for a result that is *provably* also the
answer here (see :func:`reusable`): then the point is filled in without solving and its
``reused_from`` column names the source point.

Modules: :mod:`.grid` (the request), :mod:`.points` (one point and its row), :mod:`.reuse`,
:mod:`.io` (the directory), :mod:`.runner` (the loop), :mod:`.local` and :mod:`.ray_backend` (where
points are solved), :mod:`.study` (several sweeps and their summary).
"""

from .grid import (
    COLUMNS,
    DEFAULT_STRATEGIES,
    MAX_POINTS,
    MILP_STRATEGIES,
    SWEEP_FORMAT,
    SweepError,
    SweepSpec,
    parse_list,
    parse_memory_range,
    point_key,
)
from .io import load_sweep, rows_to_csv
from .points import solve_point
from .reuse import best_single, reusable
from .runner import SweepRun, make_backend, run_sweep
from .study import (
    StudySweep,
    load_study,
    run_study,
    study_from_lists,
    write_study_summary,
)


def describe(doc: dict) -> str:
    from ..units import fmt_bytes, fmt_energy

    c = doc["context"]
    return (
        f"{doc['identity']['model']} on {doc['identity']['device']}: plain pass {fmt_energy(c['plain_energy_j'])}, "
        f"keep-all peak {fmt_bytes(c['keep_all_peak_bytes'])}, lower bound {fmt_bytes(c['min_ram_bytes'])}"
    )


__all__ = [
    "COLUMNS",
    "DEFAULT_STRATEGIES",
    "MAX_POINTS",
    "MILP_STRATEGIES",
    "SWEEP_FORMAT",
    "StudySweep",
    "SweepError",
    "SweepRun",
    "SweepSpec",
    "best_single",
    "describe",
    "load_study",
    "load_sweep",
    "make_backend",
    "parse_list",
    "parse_memory_range",
    "point_key",
    "reusable",
    "rows_to_csv",
    "run_study",
    "run_sweep",
    "solve_point",
    "study_from_lists",
    "write_study_summary",
]
