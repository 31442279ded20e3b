"""The demo models moved to :mod:`poet.demo_models` (they are models, not execution); this name is
kept for scripts that import ``poet.execute.models``: it is that module."""

from __future__ import annotations

import sys

from .. import demo_models

sys.modules[__name__] = demo_models
