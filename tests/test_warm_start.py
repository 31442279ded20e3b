"""A stage plan written into the MILP's columns (poet.solve.milp.warm_start) is a complete, feasible start."""

import pytest

from poet.schedule import Budget, validate
from poet.solve.baselines import keep_all_peak
from poet.solve.bounds import lower_bound_energy
from poet.solve.lp import max_violation
from poet.solve.milp import build, plan_to_start
from poet.solve.search.greedy import best_greedy
from poet.solve.stage import emit, plan_costs


def _ram(g, frac):
    lo, hi = g.min_ram_bytes(), keep_all_peak(g)
    return int(lo + frac * (hi - lo))


@pytest.mark.parametrize(
    "model,device", [("linear", "a72"), ("linear", "m4"), ("vgg16_cifar", "m4"), ("resnet18_cifar", "a72")]
)
def test_greedy_plan_is_a_valid_complete_warm_start(model, device):
    from poet.solve.api import costed_graph

    g = costed_graph(model, device)
    for frac, mult in ((0.3, 1.2), (0.0, 2.0)):
        b = Budget(_ram(g, frac), mult * g.plain_runtime_s, "serial")
        plan = best_greedy(g, b)
        if plan is None:
            continue
        t = validate(g, emit(g, plan), b)  # a real schedule within both budgets
        e, _ = plan_costs(g, plan, b.paging_time)
        assert t.energy_j == pytest.approx(e, rel=1e-9)
        assert t.energy_j >= lower_bound_energy(g) * (1 - 1e-12)
        f = build(g, b, tighten=True)
        x, why = plan_to_start(f, g, plan)
        assert x is not None, why
        assert max_violation(f.problem, x) <= 1e-7
        assert float(f.problem.c @ x) * f.energy_unit == pytest.approx(e, rel=1e-9)
