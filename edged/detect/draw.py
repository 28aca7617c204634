"""Draw detections on a BGR image, for ``edged infer --draw out.jpg`` and model cards."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

# Distinct, readable BGR colours; class id picks one (cycling).
PALETTE = ((56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207),
           (10, 249, 72), (23, 204, 146), (134, 219, 61), (52, 147, 26), (187, 212, 0),
           (168, 153, 44), (255, 194, 0), (147, 69, 52), (255, 115, 100), (236, 24, 0),
           (255, 56, 132), (133, 0, 82), (255, 56, 203), (200, 149, 255), (199, 55, 255))


def label_text(class_id: int, score: float, labels: Sequence[str]) -> str:
    name = labels[class_id] if 0 <= class_id < len(labels) else str(class_id)
    return f"{name} {score:.2f}"


def draw_detections(image: np.ndarray, detections: np.ndarray,
                    labels: Sequence[str] = ()) -> np.ndarray:
    """A copy of ``image`` (uint8 BGR, or grey) with each ``[K, 6]`` row boxed and labelled."""
    out = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR) if image.ndim == 2 else image.copy()
    thick = max(1, round(sum(out.shape[:2]) / 600))
    scale = max(0.4, thick / 3)
    for x1, y1, x2, y2, score, cls in detections:
        colour = PALETTE[int(cls) % len(PALETTE)]
        p1, p2 = (round(x1), round(y1)), (round(x2), round(y2))
        cv2.rectangle(out, p1, p2, colour, thick, cv2.LINE_AA)
        text = label_text(int(cls), float(score), labels)
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
        top = p1[1] - th - base if p1[1] - th - base >= 0 else p1[1]  # inside when at the top
        cv2.rectangle(out, (p1[0], top), (p1[0] + tw, top + th + base), colour, cv2.FILLED)
        cv2.putText(out, text, (p1[0], top + th), cv2.FONT_HERSHEY_SIMPLEX, scale,
                    (255, 255, 255), thick, cv2.LINE_AA)
    return out
