"""Whole-model corpus, causal text transformers from ``transformers``: GPT-2 and a LLaMA-style model.

See :mod:`corpus_run` for what is planned and checked; the other architectures are in
test_corpus_encoders.py and test_corpus_cnns.py (split so that no file runs much over two minutes).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from corpus_assert import corpus_test  # noqa: E402

test_architecture_plans_and_runs_exactly = corpus_test(["gpt2", "llama"])
