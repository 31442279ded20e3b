"""The window arithmetic of a row-tiled sliding window (convolution, pooling), defined once for both
tiling stacks: the zoo graph rewrite (:mod:`poet.graph.tiling_ranges`, costing tiled nodes) and the
tiling of traced programs (:mod:`poet.execute.tiled_spatial`, slicing real tensors).

Rows are half-open ranges ``[lo, hi)`` along the tiled axis; output row ``o`` of a window of
``kernel`` taps spaced ``dilation`` apart, moved by ``stride`` over an input padded by ``pad``,
reads input rows ``o * stride - pad`` to ``o * stride - pad + dilation * (kernel - 1)``.  Both
functions return the unclipped range: a caller clips it to the tensor it slices or costs.
"""

from __future__ import annotations

__all__ = ["reach_span", "window_span"]


def window_span(lo: int, hi: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> tuple[int, int]:
    """Input rows that output rows ``[lo, hi)`` read (padding rows included: may leave the input)."""
    return lo * stride - pad, (hi - 1) * stride - pad + dilation * (kernel - 1) + 1


def reach_span(lo: int, hi: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> tuple[int, int]:
    """Output rows whose windows reach input rows ``[lo, hi)`` (what a gradient of the input needs);
    may start below 0 or end past the output."""
    first = -((dilation * (kernel - 1) - lo - pad) // stride)  # ceil((lo + pad - dilation * (kernel - 1)) / stride)
    return first, (hi - 1 + pad) // stride + 1
