"""The whole-model corpus as a table: how each third-party architecture ended (docs/torch.md, "Model corpus").

For every architecture of ``tests/corpus_models.py`` (``transformers`` at tiny configs, random
weights), as ``tests/corpus_run.py`` does it: traced once, planned with poet, paging and remat at an
untiled and a tiled budget, every feasible plan run and compared with eager ``loss.backward()``.
Printed per architecture: nodes, untiled and tiled minimum RAM, then per plan the status, the
measured peak against the budget, and the comparison (untiled: bit for bit or the outputs that
differ; tiled: the worst error in units of the bound and whose it is).

    PYTHONPATH=. python bench/model_corpus.py [gpt2 bert ...]
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import corpus_models  # noqa: E402
from corpus_run import run_architecture  # noqa: E402


def main(names) -> None:
    warnings.filterwarnings("ignore")
    for name in names or list(corpus_models.CASES):
        t0 = time.time()
        out = run_architecture(name)
        print(
            f"{name} ({corpus_models.CASES[name].family}): {out.nodes} nodes, fixed {out.fixed} B, "
            f"minimum {out.untiled_min} B untiled, {out.tiled_min} B tiled; eager difference of the "
            f"trace {out.eager_difference:.2g}"
        )
        for r in out.runs:
            kind = "tiled" if r.tiled else "untiled"
            if r.peak is None:
                print(f"  {r.strategy:7} {kind:8} budget {r.budget} B: {r.status}")
                continue
            if r.tiled:
                verdict = f"worst error {r.error:.3g} x the bound ({r.worst})"
            else:
                verdict = "bit for bit" if not r.differs else "differs: " + ", ".join(r.differs[:3])
            print(f"  {r.strategy:7} {kind:8} budget {r.budget} B: {r.status}, peak {r.peak} B, {verdict}")
        if out.refused:
            print(f"  below the untiled minimum: {out.refused}")
        print(f"  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
