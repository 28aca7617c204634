"""The TF Object Detection API's SSD: num, boxes, scores, classes (NMS in the graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, corner_boxes, with_classes
from edged.detect.nms import Candidates


def decode_ssd(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """num ``[]``/``[1]``, boxes ``[N, 4]``, scores ``[N]``, classes ``[N]`` (TF OD API)."""
    num, boxes, scores, classes = outs
    n = int(np.clip(np.nan_to_num(np.asarray(num, np.float64).reshape(-1)[0]), 0,
                    boxes.shape[0]))
    scores = scores.reshape(-1)[:n]
    keep = np.flatnonzero(scores > conf)
    return with_classes(corner_boxes(boxes[keep], p), scores[keep],
                         classes.reshape(-1)[:n][keep], p)
