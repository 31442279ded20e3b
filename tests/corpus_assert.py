"""What every corpus architecture must satisfy (docs/torch.md lists how each ended)."""

from __future__ import annotations

import pytest
from corpus_run import run_architecture


def check_architecture(name: str):
    out = run_architecture(name)
    # every strategy either plans or stops at its short limit with nothing (no_solution: the solver's
    # time limit, on a loaded machine); at least one plans at each budget, and every plan runs exactly
    assert all(r.status in ("optimal", "feasible", "heuristic", "no_solution") for r in out.runs), out.summary()
    untiled = [r for r in out.runs if not r.tiled]
    assert any(r.peak is not None for r in untiled), out.summary()
    for r in out.runs:
        if r.peak is not None:
            assert r.peak <= r.budget, (r, out.summary())
            assert not r.differs, (r, out.summary())
    if out.refused:
        # tiling cannot go below the untiled minimum: refused at plan time, the op that sets it named
        assert out.refused.startswith("infeasible") and "set by" in out.refused and "aten." in out.refused, out.refused
    else:
        tiled = [r for r in out.runs if r.tiled]
        assert any(r.peak is not None for r in tiled), out.summary()
    return out


def corpus_test(names):
    """The test of a corpus file: :func:`check_architecture` for each of ``names``."""

    @pytest.mark.filterwarnings("ignore")
    @pytest.mark.parametrize("name", names)
    def test(name):
        check_architecture(name)

    return test
