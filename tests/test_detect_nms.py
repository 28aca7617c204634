"""NMS over a growing prefix of the best candidates equals OpenCV's NMS over all of them."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from edged.detect.nms import Candidates, select


def candidates(seed: int, n: int, spread: float) -> Candidates:
    rng = np.random.default_rng(seed)
    tl = rng.uniform(0, spread, (n, 2))
    boxes = np.hstack((tl, tl + rng.uniform(10, 80, (n, 2)))).astype(np.float32)
    return Candidates(boxes, rng.uniform(0, 1, n).astype(np.float32),
                      rng.integers(0, 3, n).astype(np.int64))


def reference(c: Candidates, conf: float, iou: float, max_det: int, agnostic: bool) -> np.ndarray:
    xywh = c.boxes.astype(np.float64)
    xywh[:, 2:] -= xywh[:, :2]
    if agnostic:
        kept = cv2.dnn.NMSBoxes(xywh, c.scores, conf, iou)
    else:
        kept = cv2.dnn.NMSBoxesBatched(xywh, c.scores, c.classes.astype(np.int32), conf, iou)
    return np.asarray(kept, np.int64).reshape(-1)[:max_det]


@pytest.mark.parametrize("agnostic", [False, True])
@pytest.mark.parametrize(("seed", "n", "spread", "max_det"), [
    (0, 3000, 5000, 100),  # flat: almost nothing overlaps, the first prefix is enough
    (1, 2000, 300, 100),  # dense: few survive, the prefix grows to all candidates
    (2, 1500, 1200, 50),
    (3, 40, 100, 5),
])
def test_prefix_nms_matches_full_nms(agnostic: bool, seed: int, n: int, spread: float,
                                     max_det: int) -> None:
    c = candidates(seed, n, spread)
    got = select(c, conf=0.2, iou=0.5, max_det=max_det, agnostic=agnostic, classes=None,
                 max_candidates=n)
    want = c.take(reference(c, 0.2, 0.5, max_det, agnostic))
    np.testing.assert_array_equal(got.boxes, want.boxes)
    np.testing.assert_array_equal(got.classes, want.classes)
    assert np.all(np.diff(got.scores) <= 0)


def test_non_finite_candidates_are_dropped() -> None:
    c = Candidates(np.array([[0, 0, 10, 10], [0, 0, np.inf, 10], [50, 50, 60, 60]], np.float32),
                   np.array([0.9, 0.95, np.nan], np.float32), np.zeros(3, np.int64))
    got = select(c, conf=0.25, iou=0.45, max_det=10, agnostic=False, classes=None,
                 max_candidates=10)
    np.testing.assert_array_equal(got.boxes, [[0, 0, 10, 10]])


def test_top_k_cap_keeps_the_best_candidates() -> None:
    c = candidates(4, 500, 5000)
    got = select(c, conf=0.0, iou=0.5, max_det=1000, agnostic=True, classes=None,
                 max_candidates=20)
    assert len(got.scores) <= 20
    assert got.scores.min() >= np.sort(c.scores)[-20]
