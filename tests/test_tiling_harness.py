"""The tiled executor against eager, one aten op at a time, on drawn shapes, tile counts and layouts.

Every op of every rule table has a case (:mod:`tiling_cases`); the coverage test fails when a rule
has none.  Elementwise ops, views and data movement must match bit for bit; reductions, contractions
and normalisations within the bound of docs/torch.md ("Tiling numerics"), measured per output
(:func:`numerics.tiled_error`, float64 where float32 autograd is itself inexact).  A rule may leave
a draw whole only where its case says it may, and must then say why.  Examples per op:
``POET_HARNESS_EXAMPLES`` (default 3, CI size; ``bench/tiling_harness.py`` runs more and prints
the measured errors).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, Phase, given, reject, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tiling_cases import RULE_TABLES, cases  # noqa: E402
from tiling_harness import Case, EagerFailed, run_case, values  # noqa: E402

from poet.execute.tiled import RULES  # noqa: E402
from poet.execute.tiled_attention import STREAMED_BACKWARD_OP, STREAMED_OP  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
aten = torch.ops.aten
CASES = cases()
EXAMPLES = int(os.environ.get("POET_HARNESS_EXAMPLES", "3"))
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)  # no shrinking: each example traces and tiles a graph


def check(case: Case, count: int):
    try:
        out = run_case(case, count)
    except EagerFailed:
        reject()  # eager PyTorch cannot run these inputs either
    if not out.tiled:
        assert case.may_decline, f"{case.op} was left whole: {out.reason or 'no reason given'}"
        assert out.reason, f"{case.op} was left whole without a reason in the tiling report"
    if case.exact:
        assert out.bitwise, f"{case.op}: not bit for bit (error {out.error:.3g} x the bound)"
    assert out.error <= 1, f"{case.op}: error {out.error:.3g} x the bound"
    return out


@pytest.mark.parametrize("op", sorted(CASES, key=str), ids=str)
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, phases=PHASES
)
@given(data=st.data())
def test_tiled_op_matches_eager(op, data):
    check(CASES[op](data.draw), data.draw(st.integers(2, 4)))


def test_every_rule_has_a_harness_case():
    missing = [f"{table}: {op}" for table, rules in RULE_TABLES.items() for op in rules if op not in CASES]
    missing += [str(op) for op in RULES if op not in CASES]
    assert not missing, "rules without a harness case: " + ", ".join(missing)


def _attention(causal: bool, scale: float):
    def fn(q, k, v, go):
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            s = torch.bmm(q, k.transpose(1, 2)) * scale
            if causal:
                t = s.shape[-1]
                s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            o = torch.bmm(torch.softmax(s, -1), v)
            return (o,) + torch.autograd.grad(o, (q, k, v), go)

    return fn


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, phases=PHASES
)
@given(data=st.data())
def test_streamed_attention_matches_eager(data):
    # tiled_attention.py rewrites a whole pattern (bmm, scale, causal mask, softmax, bmm and their
    # backward ops), not one op: its case is the pattern, traced with autograd as the joint graph holds it
    bh, t, d = data.draw(st.integers(1, 3)), data.draw(st.integers(4, 12)), data.draw(st.integers(1, 4))
    ins = tuple(values(data.draw, (bh, t, d)) for _ in range(4))
    case = Case(aten.bmm.default, _attention(data.draw(st.booleans()), 0.5), ins, (True, False, False, False))
    out = check(case, data.draw(st.integers(2, 4)))
    ops = {op for op, _, _ in out.report.tiled.values()}
    if bh == 1:  # one sequence: query tiles, keys and values streamed (several: tiles of whole sequences)
        assert STREAMED_OP in ops and STREAMED_BACKWARD_OP in ops, ops
