"""RF-DETR (set prediction, no NMS): ``dets [N, 4]`` (cx, cy, w, h normalised) and ``labels
[N, 1+C]`` raw logits. RF-DETR is trained with a sigmoid focal loss, so scores are
sigmoids (Frigate's own decoder applies a softmax instead); column 0 is COCO's unused id 0
and is dropped, so class = column - 1, Frigate's 91-class labelmap (0 = person).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams
from edged.detect.nms import Candidates


def decode_rfdetr(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``dets [N, 4]`` normalised cx, cy, w, h and ``labels [N, 1+C]`` logits."""
    dets, logits = outs
    z = logits[:, 1:].astype(np.float32)
    best = z.max(axis=1)
    # sigmoid is monotonic: threshold the logit, take the sigmoid of the survivors only
    with np.errstate(divide="ignore"):
        limit = np.log(conf / (1.0 - conf)) if 0.0 < conf < 1.0 else (-np.inf if conf <= 0
                                                                        else np.inf)
    keep = np.flatnonzero(best > limit)
    if keep.size == 0:
        return Candidates.empty()
    scores = (1.0 / (1.0 + np.exp(-best[keep]))).astype(np.float32)
    classes = z[keep].argmax(axis=1).astype(np.int64)
    b = dets[keep].astype(np.float32) * np.array([p.input_w, p.input_h] * 2, np.float32)
    half = b[:, 2:] * 0.5
    boxes = np.concatenate((b[:, :2] - half, b[:, :2] + half), axis=1)
    return Candidates(boxes, scores, classes)
