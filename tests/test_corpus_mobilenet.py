"""Whole-model corpus, MobileNetV2 from ``transformers`` (depthwise convolutions, BatchNorm,
ReLU6, TensorFlow-style padding).

See :mod:`corpus_run` for what is planned and checked; the corpus is split over the test_corpus_*.py
files so that none runs much over two minutes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from corpus_assert import corpus_test  # noqa: E402

test_architecture_plans_and_runs_exactly = corpus_test(["mobilenet_v2"])
