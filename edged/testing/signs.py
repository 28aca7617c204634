"""Held-out digits on signs laid over photographs: the scenes a new user tried (issue 41).

Why these and not ``edged.testing.scenes``' grey wall: a sign is a light (or dark) patch
just larger than its digit, and what lies around it is a photograph, so a crop that reaches
past the sign takes in the photograph's colours, and a detector that has not seen such
backgrounds answers several overlapping boxes of different classes for one digit. The
digits are the held-out set of the first classifier (``models/digits/validation.npz``,
28x28, light on black: never used to train the detector or the reader); the photographs are
scikit-image's (a test dependency, imported only when a photograph is asked for).
Deterministic; numpy and OpenCV.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "models" / "digits" / "validation.npz"


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    with np.load(DIGITS) as z:
        return z["x"], z["y"]


def held_out_digit(label: int, k: int = 0) -> np.ndarray:
    """The ``k``-th held-out 28x28 digit of ``label`` (uint8, light strokes on black)."""
    x, y = _digits()
    return x[np.flatnonzero(y == label)[k]]


@cache
def photo(name: str, width: int, height: int) -> np.ndarray:
    """scikit-image's photograph ``name`` as a BGR ``width`` x ``height`` frame."""
    import skimage.data

    img = getattr(skimage.data, name)()
    img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR) if img.ndim == 2 else img[:, :, 2::-1]
    return cv2.resize(np.ascontiguousarray(img), (width, height), interpolation=cv2.INTER_AREA)


def sign(digit: np.ndarray, height: int, paper: tuple[int, int, int] = (225, 225, 225),
         ink: tuple[int, int, int] = (30, 30, 30), margin: float = 0.12) -> np.ndarray:
    """A BGR sign: the digit's strokes in ``ink`` on ``paper``, its strokes ``height``
    pixels tall, the paper ``margin`` x that wider than the strokes on each side."""
    ys, xs = np.nonzero(digit > 40)
    tight = digit[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    scale = height / tight.shape[0]
    strokes = cv2.resize(tight, (max(1, round(tight.shape[1] * scale)), height),
                         interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255
    m = round(margin * height)
    a = np.zeros((height + 2 * m, strokes.shape[1] + 2 * m), np.float32)
    a[m:m + height, m:m + strokes.shape[1]] = strokes
    out = (np.asarray(paper, np.float32) * (1 - a[:, :, None])
           + np.asarray(ink, np.float32) * a[:, :, None])
    return np.rint(out).astype(np.uint8)


def on_photo(background: np.ndarray, patch: np.ndarray, x: int, y: int) -> np.ndarray:
    """``background`` with ``patch`` laid over it, its top left at (x, y), clipped."""
    out = background.copy()
    h, w = out.shape[:2]
    x2, y2 = min(x + patch.shape[1], w), min(y + patch.shape[0], h)
    out[y:y2, x:x2] = patch[:y2 - y, :x2 - x]
    return out


def sign_clip(frames: int = 30, label: int = 4, name: str = "coffee", width: int = 640,
              height: int = 360, side: int = 110, dx: int = 6
              ) -> tuple[list[np.ndarray], np.ndarray]:
    """``frames`` frames of one held-out digit on a sign moving ``dx`` pixels a frame to
    the right across photograph ``name``, and the sign's box ``[frames, 4]`` (x1, y1, x2,
    y2) in each."""
    board = sign(held_out_digit(label), side)
    y = (height - board.shape[0]) // 2
    bg = photo(name, width, height)
    xs = [40 + dx * f for f in range(frames)]
    boxes = np.array([[x, y, x + board.shape[1], y + board.shape[0]] for x in xs], np.float32)
    return [on_photo(bg, board, x, y) for x in xs], boxes
