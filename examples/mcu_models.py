"""Two networks for training on the emulated Cortex-M4, given to POET as user modules.

``--model examples.mcu_models:depthwise`` (run from the repository root) is a MobileNetV2-style
residual network with depthwise convolutions on 16x16 images; ``--model
examples.mcu_models:transformer`` a small causal transformer language model on 32-token sequences.
Each function returns ``(model, loss_fn, data)`` with ``data.batch() -> (inputs, targets)``, as
``poet train`` and ``poet compile`` take a user's model:

    poet train --model examples.mcu_models:depthwise --device m4 --memory 100% --target qemu-m4 --steps 5 --check
    poet train --model examples.mcu_models:depthwise --device m4 --memory 80KB --target qemu-m4 --steps 5 --check
    poet train --model examples.mcu_models:transformer --device m4 --memory 100% --target qemu-m4 --steps 5 --check
    poet train --model examples.mcu_models:transformer --device m4 --memory 120KB --target qemu-m4 --steps 5 --check

The second of each pair is below the network's untiled minimum, so the step is tiled
(docs/cbackend.md gives the numbers measured with these commands).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from poet.demo_models import DepthwiseResNet, ImageData, NextTokenData, TinyGPT, lm_loss


def depthwise():
    torch.manual_seed(0)
    model = DepthwiseResNet(channels=8, blocks=2, num_classes=10)
    return model, nn.CrossEntropyLoss(), ImageData(batch_size=4, size=16, seed=1)


def transformer():
    torch.manual_seed(0)
    model = TinyGPT(vocab=32, d=16, heads=2, layers=2, max_len=32)
    return model, lm_loss, NextTokenData(batch_size=1, seq_len=32, vocab=32, seed=1)
