"""Whole-model corpus, CNNs from ``transformers``: ResNet (BatchNorm), MobileNetV2 (depthwise),
ConvNeXt (depthwise 7x7, channels-last LayerNorm).

See :mod:`corpus_run` for what is planned and checked; the other architectures are in
test_corpus_gpt_llama.py and test_corpus_encoders.py (split so that no file runs much over two minutes).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from corpus_assert import corpus_test  # noqa: E402

test_architecture_plans_and_runs_exactly = corpus_test(["resnet", "mobilenet_v2", "convnext"])
