"""mAP (pycocotools) on cases computed by hand, with COCO's 101-point interpolation."""

from __future__ import annotations

import numpy as np
import pytest

from edged.detect.metrics_map import evaluate_map

GT = np.array([[0, 0, 10, 10, 0], [20, 20, 40, 40, 0]], float)


def test_perfect_detections() -> None:
    det = np.column_stack((GT[:, :4], [0.9, 0.8], GT[:, 4]))
    r = evaluate_map([det, det], [GT, GT])
    assert r.map50 == pytest.approx(1.0) and r.map50_95 == pytest.approx(1.0)
    assert (r.images, r.ground_truth, r.detections) == (2, 4, 4)


def test_false_positive_ranked_between_two_hits() -> None:
    # Ranked: hit (P=1, R=.5), miss (P=.5, R=.5), hit (P=2/3, R=1). Interpolated precision
    # is 1 for the 51 recall points 0..0.50 and 2/3 for the 50 points 0.51..1.00.
    det = np.array([[0, 0, 10, 10, 0.9, 0], [50, 50, 60, 60, 0.8, 0],
                    [20, 20, 40, 40, 0.7, 0]])
    r = evaluate_map([det], [GT])
    assert r.map50 == pytest.approx((51 * 1.0 + 50 * 2 / 3) / 101)


def test_iou_between_thresholds() -> None:
    # IoU 0.67 matches at 0.50, 0.55, 0.60, 0.65 but not from 0.70: 4 of 10 thresholds.
    gt = np.array([[0, 0, 10, 10, 0]], float)
    det = np.array([[0, 0, 10, 6.7, 0.9, 0]])
    r = evaluate_map([det], [gt])
    assert r.map50 == pytest.approx(1.0)
    assert r.map50_95 == pytest.approx(0.4)


def test_missed_class_counts_and_class_without_ground_truth_does_not() -> None:
    gt = np.array([[0, 0, 10, 10, 0], [20, 20, 40, 40, 1]], float)
    det = np.array([[0, 0, 10, 10, 0.9, 0], [60, 60, 70, 70, 0.9, 5]])  # class 1 missed
    r = evaluate_map([det], [gt])
    assert r.map50 == pytest.approx(0.5)


def test_wrong_class_is_not_a_hit() -> None:
    det = np.column_stack((GT[:, :4], [0.9, 0.8], [1, 1]))
    assert evaluate_map([det], [GT]).map50 == pytest.approx(0.0)


def test_no_detections_and_bad_input() -> None:
    assert evaluate_map([np.zeros((0, 6))], [GT]).map50 == 0.0
    with pytest.raises(ValueError, match="2 detection sets for 1 images"):
        evaluate_map([np.zeros((0, 6))] * 2, [GT])
    with pytest.raises(ValueError, match="at least one ground-truth box"):
        evaluate_map([np.zeros((0, 6))], [np.zeros((0, 5))])
