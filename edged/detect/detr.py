"""Set-prediction detectors (no NMS): D-FINE and RF-DETR, as Frigate's types of the names.

Why apart from the YOLO decoders: these emit a fixed set of queries (300) with their
own box conventions and score heads, already free of duplicates, so decoding is a
score threshold and a sort (the caller skips NMS for them).

- ``dfine``: outputs ``labels [300]``, ``boxes [300, 4]`` (x1, y1, x2, y2 in pixels of
  the ``orig_target_sizes`` fed, which edged sets to the model input), ``scores [300]``
  (sigmoid and top-k done in the graph); labels are COCO-80 ids.
- ``rfdetr``: outputs ``dets [300, 4]`` (cx, cy, w, h normalised) and ``labels
  [300, 91]`` raw logits; RF-DETR is trained with a sigmoid focal loss, so scores are
  sigmoids (Frigate's own decoder applies a softmax instead); column 0 is COCO's unused
  id 0 and is dropped, so class = column - 1, Frigate's 91-class labelmap (0 = person).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from edged.detect.nms import Candidates

if TYPE_CHECKING:
    from edged.detect.decoders import DecodeParams


def decode_dfine(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``labels [N]``, ``boxes [N, 4]`` xyxy pixels, ``scores [N]``."""
    labels, boxes, scores = outs
    scores = np.asarray(scores, np.float32).reshape(-1)
    keep = np.flatnonzero(scores > conf)
    return Candidates(np.ascontiguousarray(boxes.reshape(-1, 4)[keep], np.float32),
                      scores[keep], np.rint(labels.reshape(-1)[keep]).astype(np.int64))


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
