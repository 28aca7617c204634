"""Which boxes a stage crops, and the crops themselves (numpy and OpenCV, no serving code).

Why apart from the pipeline: selecting boxes (classes, minimum score, the best K) and
cutting them out of the client's frame (the box's own pixels, widened to a square and
padded with the box's border colour, the ``contrast`` option) is pure work on arrays, the
same in the daemon, the accuracy script and the tests. What the stage model needs next
(colour, size, scale, layout) is its own ``[models.preprocess]``, applied by the model;
here a crop is only shrunk when it is over twice that size.
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


def box_region(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The box's own pixels (x1, y1, x2, y2): its corners rounded outwards, clipped to the
    frame, at least one pixel each way."""
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    a = min(max(int(np.floor(x1)), 0), width - 1)
    b = min(max(int(np.floor(y1)), 0), height - 1)
    c = max(min(int(np.ceil(x2)), width), a + 1)
    d = max(min(int(np.ceil(y2)), height), b + 1)
    return a, b, c, d


def crop_window(box: np.ndarray, stage: StageConfig) -> tuple[int, int, int, int]:
    """The integer window (x1, y1, x2, y2) a crop of ``box`` covers: squared around the
    box's centre if asked, then padded by ``padding`` of its width and height each side.
    Not clipped: what lies beyond the box (or the frame) is filled, never read."""
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    w, h = x2 - x1, y2 - y1
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    if stage.square:
        w = h = max(w, h)
    w *= 1 + 2 * stage.padding
    h *= 1 + 2 * stage.padding
    return (int(np.floor(cx - w / 2)), int(np.floor(cy - h / 2)),
            int(np.ceil(cx + w / 2)), int(np.ceil(cy + h / 2)))


def cut(frame: np.ndarray, box: np.ndarray, stage: StageConfig,
        fit: tuple[int, int] | None = None) -> np.ndarray:
    """The crop of ``box`` from ``frame`` (uint8 HxW or HxWxC), as the stage asks.

    Only the box's own pixels are read. Squaring and padding widen the crop with the
    box's **border colour** (the median of the box's edge pixels), never with what lies
    around the box in the frame: a digit on a small sign over a photograph must not
    become a digit on a photograph (issue 41: with the photograph in the crop, ``contrast
    = "border"`` took the photograph's colour for the background and the sign's own area
    read as ink). ``fit``: the stage model's input (width, height); a crop more than twice
    that size each way is shrunk first (area interpolation, aspect kept) to twice it, so
    the model's own resize starts from an image without aliasing and ``contrast`` works on
    a few thousand pixels instead of a camera crop's tens of thousands. The rules and a
    picture: docs/pipelines.md, "How a crop is cut"."""
    h, w = frame.shape[:2]
    a, b, c, d = box_region(box, w, h)
    region = frame[b:d, a:c]
    colour = edge_colour(region)
    wa, wb, wc, wd = crop_window(box, stage)
    pads = np.array([max(0, b - wb), max(0, wd - d), max(0, a - wa), max(0, wc - c)],
                    np.float64)  # top, bottom, left, right
    if fit is not None:
        win_w, win_h = (c - a) + pads[2] + pads[3], (d - b) + pads[0] + pads[1]
        scale = max(2 * fit[0] / win_w, 2 * fit[1] / win_h)
        if scale < 1:
            size = (max(1, round((c - a) * scale)), max(1, round((d - b) * scale)))
            region = cv2.resize(region, size, interpolation=cv2.INTER_AREA)
            pads *= scale
    top, bottom, left, right = (round(float(p)) for p in pads)
    crop = region
    if top or bottom or left or right:
        value = [float(v) for v in np.rint(colour)] + [0.0] * (4 - colour.size)
        crop = cv2.copyMakeBorder(np.ascontiguousarray(region), top, bottom, left, right,
                                  cv2.BORDER_CONSTANT, value=value)
        if crop.ndim < region.ndim:  # OpenCV drops a single channel's axis
            crop = crop[:, :, None]
    if stage.contrast == "border":
        return border_contrast(crop, colour)
    return np.ascontiguousarray(crop)


def edge_colour(image: np.ndarray) -> np.ndarray:
    """The median colour (one value per channel) of ``image``'s edge pixels: its first and
    last rows and columns."""
    f = image if image.ndim == 3 else image[:, :, None]
    edge = np.concatenate([f[0], f[-1], f[:, 0], f[:, -1]])
    return np.median(edge.astype(np.float32), axis=0)


def border_contrast(crop: np.ndarray, colour: np.ndarray | None = None) -> np.ndarray:
    """One grey uint8 channel: each pixel's colour distance from the border colour
    (``colour``: the box's own, from ``cut``; else the median of the crop's edge pixels),
    scaled so the farthest is 255.

    Why: a glyph reader trained on light strokes on black (the shipped digits classifier)
    reads a dark digit on a light wall, or a red one on green, the same way once the
    background is what is near the border colour and the strokes are what is far from it.
    """
    f = crop.astype(np.float32)
    if f.ndim == 2:
        f = f[:, :, None]
    bg = edge_colour(crop) if colour is None else np.asarray(colour, np.float32)
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
