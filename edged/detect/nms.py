"""From decoded candidates to the final detections of one image.

Order: class filter, score threshold, a top-k cap (so a model that scores every
anchor at 0.3 stays fast), then OpenCV's NMS (per class with ``NMSBoxesBatched``,
across classes with ``NMSBoxes``), then ``max_det``. OpenCV returns the kept indices
best first, which is the order the reply promises.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Candidates:
    """Decoded boxes of one image before NMS: xyxy in model-input pixels."""

    boxes: np.ndarray  # [M, 4] float32
    scores: np.ndarray  # [M] float32
    classes: np.ndarray  # [M] int64

    @classmethod
    def empty(cls) -> Candidates:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

    def take(self, idx: np.ndarray) -> Candidates:
        return Candidates(self.boxes[idx], self.scores[idx], self.classes[idx])


def select(c: Candidates, *, conf: float, iou: float, max_det: int, agnostic: bool,
           classes: frozenset[int] | None, max_candidates: int, nms: bool = True) -> Candidates:
    """Filter, suppress overlaps and cap; the result is sorted by score, best first."""
    keep = (c.scores > conf) & np.isfinite(c.boxes).all(axis=1) & np.isfinite(c.scores)
    if classes is not None:
        keep &= np.isin(c.classes, np.fromiter(classes, np.int64, len(classes)))
    idx = np.flatnonzero(keep)
    if idx.size > max_candidates:
        top = np.argpartition(c.scores[idx], -max_candidates)[-max_candidates:]
        idx = idx[top]
    if idx.size == 0:
        return Candidates.empty()
    if idx.size < c.scores.shape[0]:
        c = c.take(idx)
    if not nms:
        order = np.argsort(-c.scores, kind="stable")[:max_det]
        return c.take(order)
    return c.take(_greedy_nms(c, conf, iou, max_det, agnostic))


def _greedy_nms(c: Candidates, conf: float, iou: float, max_det: int,
                agnostic: bool) -> np.ndarray:
    """Indices NMS keeps, best first, at most ``max_det``.

    Greedy NMS decides each box only against better-scored kept boxes, so NMS over the
    best ``m`` candidates gives exactly the first kept boxes of NMS over all of them.
    Starting with a prefix a few times ``max_det`` long and growing it only when too
    few survive keeps a flat score distribution (thousands of non-overlapping boxes,
    OpenCV's cost O(candidates x kept)) to about ``max_det`` x prefix comparisons.
    """
    n = c.scores.shape[0]
    m = max(4 * max_det, 256)
    if n < 2 * m:  # a second, larger call would cost more than what the prefix saves
        m = n
    # OpenCV sorts by score itself; only a prefix needs our own order.
    order = np.arange(n) if m == n else np.argsort(-c.scores, kind="stable")
    while True:
        top = order[:m]
        xywh = c.boxes[top].astype(np.float64)  # OpenCV's Rect2d: x, y, w, h
        xywh[:, 2:] -= xywh[:, :2]
        scores = c.scores[top]
        if agnostic:
            kept = cv2.dnn.NMSBoxes(xywh, scores, conf, iou)
        else:
            kept = cv2.dnn.NMSBoxesBatched(xywh, scores, c.classes[top].astype(np.int32),
                                           conf, iou)
        kept = np.asarray(kept, dtype=np.int64).reshape(-1)
        if kept.size >= max_det or m == n:
            return top[kept[:max_det]]
        m = min(n, 4 * m)
