"""One decoder per output layout: raw outputs of one image -> candidate boxes.

Why per layout: detectors disagree on everything (transposed or not, objectness or
not, centre or corner boxes, pixels or 0..1, NMS inside the graph or not). Each
decoder turns its layout into the same :class:`Candidates` (xyxy in model-input
pixels), vectorised over candidates. ``outputs.check_outputs`` makes sure at load
that the model's outputs have the layout its decoder reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edged.detect.anchors import decode_yolo_anchors
from edged.detect.detection_output import decode_detection_output
from edged.detect.detr import decode_dfine, decode_rfdetr
from edged.detect.nms import Candidates

YOLOX_STRIDES = (8, 16, 32)


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


def yolox_grid(input_w: int, input_h: int,
               strides: Sequence[int] = YOLOX_STRIDES) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets and strides in YOLOX's output order (stride 8 first, row-major)."""
    grids, per_cell = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(input_h // s), np.arange(input_w // s), indexing="ij")
        grids.append(np.stack((xs, ys), axis=-1).reshape(-1, 2))
        per_cell.append(np.full(grids[-1].shape[0], s))
    return (np.concatenate(grids).astype(np.float32),
            np.concatenate(per_cell).astype(np.float32))


def _cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty((b.shape[0], 4), np.float32)
    half = b[:, 2:4] * 0.5
    out[:, :2] = b[:, :2] - half
    out[:, 2:] = b[:, :2] + half
    return out


def _to_pixels(boxes: np.ndarray, p: DecodeParams) -> np.ndarray:
    """Never in place: ``boxes`` may be a view of the model's output."""
    if p.box_format == "normalized":
        return boxes * np.array([p.input_w, p.input_h, p.input_w, p.input_h], np.float32)
    return boxes


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
    boxes = _to_pixels(_cxcywh_to_xyxy(sub[:4].T), p)
    return Candidates(boxes, best[keep].astype(np.float32), classes)


def _objectness_rows(x: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray, np.ndarray]:
    """YOLOv5/YOLOX rows ``[5+C]``: keep rows whose obj x best class score beats ``conf``."""
    rows = np.flatnonzero(x[:, 4] > conf)  # obj <= conf cannot give obj * cls > conf
    sub = x[rows]
    classes = sub[:, 5:].argmax(axis=1)
    scores = sub[:, 4] * sub[np.arange(sub.shape[0]), 5 + classes]
    good = scores > conf
    return rows[good], sub[good], scores[good].astype(np.float32), classes[good].astype(np.int64)


def decode_yolov5(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]``: cx, cy, w, h, objectness, class scores (score = obj x class)."""
    _, sub, scores, classes = _objectness_rows(outs[0], conf)
    if sub.shape[0] == 0:
        return Candidates.empty()
    return Candidates(_to_pixels(_cxcywh_to_xyxy(sub[:, :4]), p), scores, classes)


def decode_yolox(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]`` raw head: xy = (out + cell) * stride, wh = exp(out) * stride."""
    x = outs[0]
    if p.grid is None or p.strides is None:
        raise ValueError("decode_yolox needs DecodeParams.grid/strides (see yolox_grid)")
    if x.shape[0] != p.grid.shape[0]:
        raise ValueError(f"decoder 'yolox': the output has {x.shape[0]} rows but a "
                             f"{p.input_w}x{p.input_h} input has {p.grid.shape[0]} cells "
                             f"at strides {YOLOX_STRIDES}")
    rows, sub, scores, classes = _objectness_rows(x, conf)
    if rows.size == 0:
        return Candidates.empty()
    stride = p.strides[rows, None]
    cxcywh = np.empty((rows.size, 4), np.float32)
    cxcywh[:, :2] = (sub[:, :2] + p.grid[rows]) * stride
    with np.errstate(over="ignore"):  # a huge logit gives inf, dropped as non-finite later
        cxcywh[:, 2:] = np.exp(sub[:, 2:4]) * stride
    return Candidates(_cxcywh_to_xyxy(cxcywh), scores, classes)


def _corner_boxes(b: np.ndarray, p: DecodeParams) -> np.ndarray:
    boxes = np.ascontiguousarray(b[:, [1, 0, 3, 2]] if p.box_order == "yxyx" else b[:, :4],
                                 dtype=np.float32)
    return _to_pixels(boxes, p)


def _with_classes(boxes: np.ndarray, scores: np.ndarray, raw_classes: np.ndarray,
                  p: DecodeParams) -> Candidates:
    classes = np.rint(raw_classes).astype(np.int64) - p.label_offset
    scores = scores.astype(np.float32, copy=False)
    ok = classes >= 0  # a background class below the offset is not a detection
    if ok.all():
        return Candidates(boxes, scores, classes)
    return Candidates(boxes[ok], scores[ok], classes[ok])


def decode_end2end(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 6]``: x1, y1, x2, y2, score, class (NMS already done by the graph)."""
    x = outs[0]
    sub = x[x[:, 4] > conf]
    return _with_classes(_corner_boxes(sub[:, :4], p), sub[:, 4], sub[:, 5], p)


def decode_ssd(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """num ``[]``/``[1]``, boxes ``[N, 4]``, scores ``[N]``, classes ``[N]`` (TF OD API)."""
    num, boxes, scores, classes = outs
    n = int(np.clip(np.nan_to_num(np.asarray(num, np.float64).reshape(-1)[0]), 0,
                    boxes.shape[0]))
    scores = scores.reshape(-1)[:n]
    keep = np.flatnonzero(scores > conf)
    return _with_classes(_corner_boxes(boxes[keep], p), scores[keep],
                         classes.reshape(-1)[:n][keep], p)


def decode_yolonas(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 7]``: batch index, x1, y1, x2, y2, score, class (super-gradients' "flat"
    export, NMS in the graph); one image's rows (edged serves it one image a batch)."""
    x = outs[0]
    sub = x[x[:, 5] > conf]
    return _with_classes(_corner_boxes(sub[:, 1:5], p), sub[:, 5], sub[:, 6], p)


Decoder = Callable[[Sequence[np.ndarray], float, DecodeParams], Candidates]
DECODE: dict[str, Decoder] = {
    "yolov8": decode_yolov8,
    "yolov5": decode_yolov5,
    "yolox": decode_yolox,
    "end2end": decode_end2end,
    "ssd": decode_ssd,
    "yolonas": decode_yolonas,
    "yolo-anchors": decode_yolo_anchors,
    "dfine": decode_dfine,
    "rfdetr": decode_rfdetr,
    "detection-output": decode_detection_output,
}

