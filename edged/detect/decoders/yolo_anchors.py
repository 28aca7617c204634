"""YOLOv3/v4/v7 three-head exports: ``[1, 3*(5+C), ny, nx]`` at strides 8, 16, 32.

Why its own decoder: these heads carry anchors, which the one-output layouts do not.
The decode is YOLOv5's (the exports apply the sigmoid in the graph): xy =
(2*t - 0.5 + cell) * stride, wh = (2*t)^2 * anchor, score = objectness x class, as
Frigate's own ``yolo-generic`` multi-output branch reads them (frigate/util/model.py),
with the YOLOv4/v7 anchors it uses. Vectorised over all cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams
from edged.detect.nms import Candidates

STRIDES = (8, 16, 32)
#: (w, h) in input pixels, three per stride, smallest stride first (YOLOv4 / YOLOv7)
ANCHORS = (((12, 16), (19, 36), (40, 28)),
           ((36, 75), (76, 55), (72, 146)),
           ((142, 110), (192, 243), (459, 401)))


def decode_yolo_anchors(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """Three heads ``[3*(5+C), ny, nx]`` (one image), finest first -> candidates."""
    boxes, scores, classes = [], [], []
    for head, stride, anchors in zip(outs, STRIDES, ANCHORS, strict=True):
        a = len(anchors)
        _, ny, nx = head.shape
        x = head.reshape(a, -1, ny, nx)  # [A, 5+C, ny, nx]
        obj = x[:, 4]
        cls = x[:, 5:]
        best = cls.max(axis=1)
        score = obj * best
        keep = np.argwhere(score > conf)  # rows of (anchor, y, x)
        if keep.size == 0:
            continue
        ai, yi, xi = keep[:, 0], keep[:, 1], keep[:, 2]
        t = x[ai, :4, yi, xi].astype(np.float32)  # [K, 4]
        wh = np.asarray(anchors, np.float32)[ai]
        cx = (t[:, 0] * 2.0 - 0.5 + xi) * stride
        cy = (t[:, 1] * 2.0 - 0.5 + yi) * stride
        w = (t[:, 2] * 2.0) ** 2 * wh[:, 0]
        h = (t[:, 3] * 2.0) ** 2 * wh[:, 1]
        boxes.append(np.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), axis=1))
        scores.append(score[ai, yi, xi])
        classes.append(cls[ai, :, yi, xi].argmax(axis=1))
    if not boxes:
        return Candidates.empty()
    return Candidates(np.concatenate(boxes).astype(np.float32),
                      np.concatenate(scores).astype(np.float32),
                      np.concatenate(classes).astype(np.int64))
