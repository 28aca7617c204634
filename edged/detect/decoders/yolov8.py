"""YOLOv8/YOLO11 (Ultralytics) ``[4+C, N]``: one column per candidate, no objectness.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, cxcywh_to_xyxy, to_pixels
from edged.detect.nms import Candidates


def decode_yolov8(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[4+C, N]``: cx, cy, w, h then one score per class, one column per candidate."""
    x = outs[0]
    best = x[4:].max(axis=0)  # a max over rows is fast; argmax only on the survivors
    keep = np.flatnonzero(best > conf)
    if keep.size == 0:
        return Candidates.empty()
    if keep.size > p.max_candidates:  # cap before the column gather, the costly part
        keep = keep[np.argpartition(best[keep], -p.max_candidates)[-p.max_candidates:]]
    sub = x[:, keep]
    classes = sub[4:].argmax(axis=0).astype(np.int64)
    boxes = to_pixels(cxcywh_to_xyxy(sub[:4].T), p)
    return Candidates(boxes, best[keep].astype(np.float32), classes)
