"""YOLO-NAS's flat export ``[N, 7]``: batch index, box, score, class (NMS in the graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, corner_boxes, with_classes
from edged.detect.nms import Candidates


def decode_yolonas(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 7]``: batch index, x1, y1, x2, y2, score, class (super-gradients' "flat"
    export, NMS in the graph); one image's rows (edged serves it one image a batch)."""
    x = outs[0]
    sub = x[x[:, 5] > conf]
    return with_classes(corner_boxes(sub[:, 1:5], p), sub[:, 5], sub[:, 6], p)
