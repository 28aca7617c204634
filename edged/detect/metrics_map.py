"""mAP of detections against ground-truth boxes, with pycocotools (the reference code).

Why pycocotools: detector variants are accepted or rejected on an mAP drop, and
numbers that match what users see from COCO tooling leave nothing to argue about.
It lives in the ``compile`` extra, so it is imported only when mAP is computed.
COCO's rules apply: 101-point interpolated precision, classes without ground truth
are left out of the mean, at most ``max_det`` detections per image count.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MapResult:
    map50: float  # mAP at IoU 0.5, 0..1
    map50_95: float  # mean over IoU 0.50:0.05:0.95
    images: int
    ground_truth: int
    detections: int


def _to_coco(boxes: np.ndarray) -> list[list[float]]:
    b = np.asarray(boxes, np.float64)[:, :4].copy()
    b[:, 2:] -= b[:, :2]  # x, y, w, h
    return b.tolist()


def evaluate_map(detections: Sequence[np.ndarray], ground_truth: Sequence[np.ndarray],
                 max_det: int = 100) -> MapResult:
    """``detections[i]``: ``[K, 6]`` x1,y1,x2,y2,score,class; ``ground_truth[i]``: ``[G, 5]``
    x1,y1,x2,y2,class, both in the same pixels of image ``i``."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("mAP needs pycocotools: pip install 'edged[compile]'") from e
    if len(detections) != len(ground_truth):
        raise ValueError(f"{len(detections)} detection sets for {len(ground_truth)} images")
    images, annotations, results, classes = [], [], [], set()
    for i, (det, gt) in enumerate(zip(detections, ground_truth, strict=True)):
        gt = np.asarray(gt, np.float64).reshape(-1, 5)
        det = np.asarray(det, np.float64).reshape(-1, 6)
        images.append({"id": i})
        for box, cls in zip(_to_coco(gt), gt[:, 4], strict=True):
            annotations.append({"id": len(annotations) + 1, "image_id": i,
                                "category_id": int(cls), "bbox": box, "iscrowd": 0,
                                "area": box[2] * box[3]})
            classes.add(int(cls))
        for box, score, cls in zip(_to_coco(det), det[:, 4], det[:, 5], strict=True):
            results.append({"image_id": i, "category_id": int(cls), "bbox": box,
                            "score": float(score)})
            classes.add(int(cls))
    if not annotations:
        raise ValueError("mAP needs at least one ground-truth box")
    if not results:
        return MapResult(0.0, 0.0, len(images), len(annotations), 0)
    dataset: dict[str, Any] = {"images": images, "annotations": annotations,
                               "categories": [{"id": c} for c in sorted(classes)]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt_api = COCO()
        gt_api.dataset = dataset
        gt_api.createIndex()
        dt_api = gt_api.loadRes(results)
        ev = COCOeval(gt_api, dt_api, "bbox")
        ev.params.maxDets = [max_det]
        ev.params.areaRng = [[0.0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"][:, :, :, 0, 0]  # [iou, recall, class]
    return MapResult(map50=_mean_valid(precision[0]), map50_95=_mean_valid(precision),
                     images=len(images), ground_truth=len(annotations), detections=len(results))


def _mean_valid(p: np.ndarray) -> float:
    """COCO marks classes without ground truth with -1; they are not part of the mean."""
    valid = p[p > -1]
    return float(valid.mean()) if valid.size else 0.0
