"""``poet validate``: a saved schedule replayed by the independent validator against its budgets."""

from __future__ import annotations

from ..units import fmt_energy


def cmd_validate(a) -> int:
    from ..schedule.io import load_schedule
    from ..units import fmt_bytes, fmt_seconds

    s = load_schedule(a.schedule)  # parsing re-validates; raises with the step at fault
    t = s.totals
    if t is None:
        print(f"{a.schedule}: no steps (status {s.status})")
        return 2
    print(
        f"{a.schedule}: valid. {len(s.steps)} steps, energy {fmt_energy(t.energy_j)}, runtime "
        f"{fmt_seconds(t.runtime_s)}, peak RAM {fmt_bytes(t.peak_ram_bytes)} <= budget "
        f"{fmt_bytes(s.budget.ram_bytes)}"
    )
    return 0


def register(subparsers) -> None:
    v = subparsers.add_parser("validate", help="replay a saved schedule and check it against its budgets")
    v.add_argument("schedule")
    v.set_defaults(func=cmd_validate)
