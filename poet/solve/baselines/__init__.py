"""Fixed-rule baselines: plain backprop, Chen et al.'s checkpointing, and a Capuchin-style heuristic."""

from .capuchin import capuchin_plan
from .chen import chain_cut_points, chen_plans, segment_steps
from .keep_all import judged, keep_all_peak, keep_all_steps

__all__ = [
    "capuchin_plan",
    "chain_cut_points",
    "chen_plans",
    "judged",
    "keep_all_peak",
    "keep_all_steps",
    "segment_steps",
]
