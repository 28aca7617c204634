"""End-to-end YOLO exports ``[N, 6]``: x1, y1, x2, y2, score, class (NMS in the graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, corner_boxes, with_classes
from edged.detect.nms import Candidates


def decode_end2end(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 6]``: x1, y1, x2, y2, score, class (NMS already done by the graph)."""
    x = outs[0]
    sub = x[x[:, 4] > conf]
    return with_classes(corner_boxes(sub[:, :4], p), sub[:, 4], sub[:, 5], p)
