"""Fit a frame of any size to the model input, and map boxes back to the frame.

Why keep the transform: clients draw on the frame they sent (1920x1080, portrait,
whatever the camera gives), so every box must leave the daemon in that frame's
pixels. Letterbox keeps the aspect ratio and pads (what YOLO models are trained
with); stretch resizes each axis independently (what TF OD API SSDs expect).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from edged.errors import InvalidArgument


@dataclass(frozen=True)
class Transform:
    """model-input pixel = frame pixel * scale + pad, per axis."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    frame_w: int
    frame_h: int

    @classmethod
    def identity(cls, width: int, height: int) -> Transform:
        """For a tensor the client already sized for the model: boxes stay as they are."""
        return cls(1.0, 1.0, 0.0, 0.0, width, height)

    def to_frame(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes [K,4] in model-input pixels -> frame pixels, clipped to the frame."""
        pad = np.array((self.pad_x, self.pad_y, self.pad_x, self.pad_y), np.float32)
        scale = np.array((self.scale_x, self.scale_y, self.scale_x, self.scale_y), np.float32)
        out = np.subtract(boxes, pad, dtype=np.float32)
        out /= scale
        limit = np.array((self.frame_w, self.frame_h, self.frame_w, self.frame_h), np.float32)
        return np.clip(out, 0.0, limit, out=out)

def letterbox(img: np.ndarray, width: int, height: int, pad_value: int = 114,
              interpolation: int = cv2.INTER_LINEAR) -> tuple[np.ndarray, Transform]:
    """Resize keeping the aspect ratio, centre, pad with ``pad_value`` (Ultralytics' rule)."""
    h, w = img.shape[:2]
    r = min(width / w, height / h)
    new_w, new_h = max(1, round(w * r)), max(1, round(h * r))
    if (new_w, new_h) != (w, h):
        img = cv2.resize(img, (new_w, new_h), interpolation=interpolation)
    dw, dh = (width - new_w) / 2, (height - new_h) / 2
    top, left = round(dh - 0.1), round(dw - 0.1)
    bottom, right = height - new_h - top, width - new_w - left
    if top or bottom or left or right:
        channels = 1 if img.ndim == 2 else img.shape[2]
        img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT,
                                 value=(pad_value,) * channels)
    # The scale each axis really got (after rounding), so the inverse is exact.
    return img, Transform(new_w / w, new_h / h, float(left), float(top), w, h)


def stretch(img: np.ndarray, width: int, height: int,
            interpolation: int = cv2.INTER_LINEAR) -> tuple[np.ndarray, Transform]:
    """Resize each axis to the model input independently."""
    h, w = img.shape[:2]
    if (w, h) != (width, height):
        img = cv2.resize(img, (width, height), interpolation=interpolation)
    return img, Transform(width / w, height / h, 0.0, 0.0, w, h)


def fit(img: np.ndarray, mode: str, width: int, height: int, pad_value: int = 114,
        interpolation: int = cv2.INTER_LINEAR) -> tuple[np.ndarray, Transform]:
    """``letterbox`` or ``stretch`` (``PostprocessConfig.resize``) a uint8 HxW[xC] frame."""
    if img.ndim not in (2, 3) or img.shape[0] == 0 or img.shape[1] == 0:
        raise InvalidArgument(f"a frame must be a non-empty HxW or HxWxC array; got "
                              f"{list(img.shape)}")
    if mode == "letterbox":
        return letterbox(img, width, height, pad_value, interpolation)
    if mode == "stretch":
        return stretch(img, width, height, interpolation)
    raise ValueError(f"unknown resize mode {mode!r}; expected 'letterbox' or 'stretch'")
