"""The shipped person detector's test material: photos, where the person is, and the
preprocessing its config documents.

Photos come from packages (matplotlib, scikit-image), never from the repository; a test
whose package is missing is skipped, not failed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edged.config.schema import Table
from edged.preprocess.preprocessor import PreprocessConfig, Preprocessor

# The person in each photo, x1, y1, x2, y2 in the photo's pixels, read once off the
# photo drawn over a 50-pixel grid (hair/cap top to the bottom edge, outermost
# shoulder or arm on each side).
TRUE_BOX = {
    "grace_hopper": (12, 22, 512, 600),  # 512x600; the jacket runs off right and bottom
    "astronaut": (20, 15, 365, 512),  # 512x512; right edge is her shoulder, not the helmet
}

# [models.preprocess] as the config that serves this model says it.
PREPROCESS = {"color": "rgb", "width": 300, "height": 300, "interpolation": "linear",
              "layout": "NHWC", "dtype": "uint8"}


def preprocessor() -> Preprocessor:
    """edged's own preprocessing with :data:`PREPROCESS`."""
    problems: list[str] = []
    cfg = PreprocessConfig.from_table(
        Table(dict(PREPROCESS), "models[1].preprocess", "config.toml", problems)
    )
    assert problems == []
    return Preprocessor(cfg)


def photo(name: str) -> tuple[np.ndarray, bytes | None]:
    """(BGR frame, encoded file bytes or None); skips when the package is missing."""
    import cv2

    if name == "grace_hopper":
        cbook = pytest.importorskip(
            "matplotlib.cbook", reason="matplotlib (the test extra) ships grace_hopper.jpg"
        )
        data = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).read_bytes()
        return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), data
    skdata = pytest.importorskip(
        "skimage.data", reason="scikit-image (the test extra) ships the astronaut photo"
    )
    return cv2.cvtColor(skdata.astronaut(), cv2.COLOR_RGB2BGR), None


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two x1, y1, x2, y2 boxes."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
    return inter / (area - inter)
