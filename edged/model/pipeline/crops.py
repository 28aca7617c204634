"""Which boxes a stage crops, and the crops themselves (numpy and OpenCV, no serving code).

Why apart from the pipeline: selecting boxes (classes, minimum score, the best K) and
cutting them out of the client's frame (padding, a square around the centre, the
``contrast`` option) is pure work on arrays, the same in the daemon, the accuracy script
and the tests. What the stage model needs next (colour, size, scale, layout) is its own
``[models.preprocess]``, applied by the model; nothing here resizes.
"""

from __future__ import annotations

import cv2
import numpy as np

from edged.config.pipelines import StageConfig


def select(dets: np.ndarray, stage: StageConfig) -> np.ndarray:
    """Row indices of ``dets`` (``[K, 6+]``, best first) the stage crops: of its classes,
    scoring at least ``min_score``, at most ``max_crops`` of them (the best)."""
    keep = dets[:, 4] >= stage.min_score
    if stage.classes is not None:
        keep &= np.isin(dets[:, 5].astype(np.int64), np.asarray(stage.classes, np.int64))
    rows = np.flatnonzero(keep)
    if rows.size > stage.max_crops:
        # dets come best first from the detector; sort anyway (a stable order by score)
        rows = rows[np.argsort(-dets[rows, 4], kind="stable")[:stage.max_crops]]
    return rows


def crop_window(box: np.ndarray, stage: StageConfig, width: int,
                height: int) -> tuple[int, int, int, int]:
    """The integer window (x1, y1, x2, y2) cut for ``box``: padded, squared if asked,
    clipped to the frame and at least one pixel each way."""
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    w, h = x2 - x1, y2 - y1
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    if stage.square:
        w = h = max(w, h)
    w *= 1 + 2 * stage.padding
    h *= 1 + 2 * stage.padding
    a = min(max(int(np.floor(cx - w / 2)), 0), width - 1)
    b = min(max(int(np.floor(cy - h / 2)), 0), height - 1)
    c = max(min(int(np.ceil(cx + w / 2)), width), a + 1)
    d = max(min(int(np.ceil(cy + h / 2)), height), b + 1)
    return a, b, c, d


def cut(frame: np.ndarray, box: np.ndarray, stage: StageConfig,
        fit: tuple[int, int] | None = None) -> np.ndarray:
    """The crop of ``box`` from ``frame`` (uint8 HxW or HxWxC), as the stage asks.

    ``fit``: the stage model's input (width, height). A crop more than twice that size
    each way is first shrunk (area interpolation, aspect kept) to twice it: the model's
    own resize then starts from an image without aliasing, and ``contrast`` works on a
    few thousand pixels instead of a camera crop's tens of thousands."""
    h, w = frame.shape[:2]
    a, b, c, d = crop_window(box, stage, w, h)
    crop = frame[b:d, a:c]
    if fit is not None:
        scale = max(2 * fit[0] / crop.shape[1], 2 * fit[1] / crop.shape[0])
        if scale < 1:
            size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
            crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
    if stage.contrast == "border":
        return border_contrast(crop)
    return np.ascontiguousarray(crop)


def border_contrast(crop: np.ndarray) -> np.ndarray:
    """One grey uint8 channel: each pixel's colour distance from the crop's border colour
    (the median of its edge pixels), scaled so the farthest is 255.

    Why: a glyph reader trained on light strokes on black (the shipped digits classifier)
    reads a dark digit on a light wall, or a red one on green, the same way once the
    background is what is near the border colour and the strokes are what is far from it.
    """
    f = crop.astype(np.float32)
    if f.ndim == 2:
        f = f[:, :, None]
    edge = np.concatenate([f[0], f[-1], f[:, 0], f[:, -1]])
    bg = np.median(edge, axis=0)
    dist = np.sqrt(((f - bg) ** 2).sum(axis=2))
    top = float(dist.max())
    if top <= 0:
        return np.zeros(dist.shape, np.uint8)
    return np.ascontiguousarray(np.rint(dist * (255.0 / top)).astype(np.uint8))


def read_scores(out: np.ndarray, activation: str) -> tuple[np.ndarray, np.ndarray]:
    """A stage model's output rows -> (class per row, its score), after ``activation``."""
    x = out.reshape(out.shape[0], -1).astype(np.float32)
    if activation == "softmax":
        x = np.exp(x - x.max(axis=1, keepdims=True))
        x /= x.sum(axis=1, keepdims=True)
    elif activation == "sigmoid":
        x = 1.0 / (1.0 + np.exp(-x))
    cls = x.argmax(axis=1)
    return cls, x[np.arange(x.shape[0]), cls]
