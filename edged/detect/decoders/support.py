"""What the decoders share: the constants of one variant (``DecodeParams``) and the box
conversions several layouts need (centre to corners, 0..1 to pixels, row filters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edged.detect.nms import Candidates


@dataclass(frozen=True)
class DecodeParams:
    """Constants of one model variant, fixed at load."""

    input_w: int
    input_h: int
    box_format: str = "pixels"  # or "normalized"
    box_order: str = "xyxy"  # end2end / ssd only
    label_offset: int = 0
    max_candidates: int = 3000  # yolov8: gather at most this many columns (best first)
    grid: np.ndarray | None = None  # yolox: [N, 2] cell x, y
    strides: np.ndarray | None = None  # yolox: [N] stride of each cell


def cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty((b.shape[0], 4), np.float32)
    half = b[:, 2:4] * 0.5
    out[:, :2] = b[:, :2] - half
    out[:, 2:] = b[:, :2] + half
    return out


def to_pixels(boxes: np.ndarray, p: DecodeParams) -> np.ndarray:
    """Never in place: ``boxes`` may be a view of the model's output."""
    if p.box_format == "normalized":
        return boxes * np.array([p.input_w, p.input_h, p.input_w, p.input_h], np.float32)
    return boxes


def objectness_rows(x: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray, np.ndarray]:
    """YOLOv5/YOLOX rows ``[5+C]``: keep rows whose obj x best class score beats ``conf``."""
    rows = np.flatnonzero(x[:, 4] > conf)  # obj <= conf cannot give obj * cls > conf
    sub = x[rows]
    classes = sub[:, 5:].argmax(axis=1)
    scores = sub[:, 4] * sub[np.arange(sub.shape[0]), 5 + classes]
    good = scores > conf
    return rows[good], sub[good], scores[good].astype(np.float32), classes[good].astype(np.int64)


def corner_boxes(b: np.ndarray, p: DecodeParams) -> np.ndarray:
    boxes = np.ascontiguousarray(b[:, [1, 0, 3, 2]] if p.box_order == "yxyx" else b[:, :4],
                                 dtype=np.float32)
    return to_pixels(boxes, p)


def with_classes(boxes: np.ndarray, scores: np.ndarray, raw_classes: np.ndarray,
                  p: DecodeParams) -> Candidates:
    classes = np.rint(raw_classes).astype(np.int64) - p.label_offset
    scores = scores.astype(np.float32, copy=False)
    ok = classes >= 0  # a background class below the offset is not a detection
    if ok.all():
        return Candidates(boxes, scores, classes)
    return Candidates(boxes[ok], scores[ok], classes[ok])
