"""YOLOv5/YOLOv7 ``[N, 5+C]``: one row per candidate, objectness x class score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, cxcywh_to_xyxy, objectness_rows, to_pixels
from edged.detect.nms import Candidates


def decode_yolov5(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]``: cx, cy, w, h, objectness, class scores (score = obj x class)."""
    _, sub, scores, classes = objectness_rows(outs[0], conf)
    if sub.shape[0] == 0:
        return Candidates.empty()
    return Candidates(to_pixels(cxcywh_to_xyxy(sub[:, :4]), p), scores, classes)
