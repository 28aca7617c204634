"""OpenVINO's (and Caffe's) ``DetectionOutput`` layout: one output ``[1, 1, N, 7]``.

Why a layout of its own: an SSD from OpenVINO's model zoo (Frigate's own SSDLite for its
OpenVINO detector, ``model_type: ssd``) ends in the ``DetectionOutput`` op, which leaves
one row per kept box, ``image_id, label, conf, x_min, y_min, x_max, y_max``, boxes
normalised to 0..1 and NMS already done. The rows of a whole batch share the one tensor
(the batch is *not* axis 0, it is ``image_id``), and the first row whose ``image_id`` is
-1 ends the list (the rows after it are padding). Labels are the TF Object Detection API
COCO ids (0 = background, 1 = person), as in the 4-tensor SSD layout, so the model's
``label_offset`` applies to them alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edged.detect.decoders.support import DecodeParams
from edged.detect.nms import Candidates

NAME = "detection-output"
WIDTH = 7


def is_layout(specs: Sequence[Any]) -> bool:
    """One rank-4 output ending in 7 values (``[B, 1, N, 7]``): this layout, not TF's."""
    if len(specs) != 1 or len(specs[0].shape) != 4:
        return False
    d1, last = specs[0].shape[1], specs[0].shape[3]
    return last == WIDTH and (d1 is None or d1 in (1, -1))


def _rows(out: np.ndarray) -> np.ndarray:
    """The valid rows of the whole tensor: those before the first ``image_id`` of -1."""
    rows = np.asarray(out).reshape(-1, WIDTH)
    end = np.flatnonzero(rows[:, 0] < 0)
    return rows[: end[0]] if end.size else rows


def split_batch(out: np.ndarray, n: int) -> list[np.ndarray]:
    """Per image of a batch of ``n``: its rows, ``[K, 7]`` (by ``image_id``)."""
    rows = _rows(out)
    ids = np.rint(rows[:, 0]).astype(np.int64)
    return [rows[ids == i] for i in range(n)]


def decode_detection_output(outs: Sequence[np.ndarray], conf: float,
                            p: DecodeParams) -> Candidates:
    """One image's rows ``[K, 7]`` (from :func:`split_batch`) -> candidates.

    Boxes are x_min, y_min, x_max, y_max whatever ``box_order`` says (the op fixes it);
    normalised unless ``box_format`` is ``pixels``. A label below ``label_offset``
    (background) is no detection."""
    rows = np.asarray(outs[0]).reshape(-1, WIDTH)
    sub = rows[rows[:, 2] > conf]
    boxes = np.ascontiguousarray(sub[:, 3:7], dtype=np.float32)
    if p.box_format == "normalized":
        boxes = boxes * np.array([p.input_w, p.input_h, p.input_w, p.input_h], np.float32)
    classes = np.rint(sub[:, 1]).astype(np.int64) - p.label_offset
    ok = classes >= 0
    return Candidates(boxes[ok], sub[ok, 2].astype(np.float32), classes[ok])
