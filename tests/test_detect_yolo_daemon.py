"""The detector the project trains (models/digits-det, YOLOv8 layout) through the real
daemon: mAP@0.5 on its held-out scenes from replies over ZeroMQ, its INT8 rung within 2
points, and the lower-resolution rung served at its own input size."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from support.configs import config, model_table, variant
from support.daemons import Daemon
from support.paths import ROOT

from edged.client import build_infer

pytest.importorskip("pycocotools", reason="mAP needs pycocotools (the test extra)")
from edged.detect.metrics_map import evaluate_map

DET = ROOT / "models" / "digits-det"
#: as the shipped example: the 128 rung is a deliberately less accurate one (its card), and
#: since the detector trains on photographs it agrees with det-fp32 on ~85 % of the boxes of
#: the golden scenes, under the default 0.90 (loosened for this variant only)
DET128_VERIFY = "[models.variants.verify]\nmin_precision = 0.7\nmin_recall = 0.7\n"
#: the model's own threshold (its model.json): golden checks compare boxes above it
CONF = json.loads((DET / "model.json").read_text())["postprocess"]["conf"]


@pytest.fixture(scope="module")
def det(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("digits-det")
    ladder = [variant(v, DET / f"{v}.onnx", options={})
              for v in ("det-fp32", "det-int8", "det128-fp32")]
    ladder[2] += DET128_VERIFY
    yolo = model_table(
        "digits-det", ladder, max_batch_size=8,
        preprocess={"color": "rgb", "width": 160, "height": 160, "scale": 1 / 255,
                    "layout": "NCHW", "dtype": "float32"},
        postprocess={"kind": "detect", "decoder": "yolov8", "resize": "letterbox",
                     "conf": CONF, "iou": 0.5})
    cfg = config(tmp, models=[yolo], server="drain_timeout_s = 2.0")
    d = Daemon(cfg, tmp)
    yield d
    d.stop()


def held_out() -> tuple[np.ndarray, list[np.ndarray]]:
    with np.load(DET / "val.npz") as z:
        images, boxes = z["images"], z["boxes"]
    truth = [boxes[boxes[:, 0] == i][:, 1:] for i in range(len(images))]
    return images, truth


def daemon_map(d: Daemon, variant: str) -> float:
    r = d.ctl({"op": "swap", "model": "digits-det", "variant": variant})
    assert r["status"] == "OK", r
    images, truth = held_out()
    dets: list[np.ndarray] = [np.zeros((0, 6), np.float32)] * len(images)
    with d.client(timeout_s=60) as c:
        for i, img in enumerate(images):  # pipelined: they batch in the daemon
            c.send(*build_infer("digits-det", img, id=i, conf=0.001, max_det=100))
        for _ in images:
            rep = c.recv()
            assert rep.ok and rep.variant == variant, rep.header
            dets[rep.header["id"]] = rep.detections.rows
    return evaluate_map(dets, truth).map50


def test_trained_detector_reaches_its_map_through_the_daemon(det: Daemon) -> None:
    fp32 = daemon_map(det, "det-fp32")
    # 0.85, was 0.90: the detector trains on photographs too (its card: 86.3 here)
    assert fp32 >= 0.85, fp32
    int8 = daemon_map(det, "det-int8")
    assert int8 >= fp32 - 0.02, (fp32, int8)


def test_lower_resolution_rung_serves_at_its_own_input_size(det: Daemon) -> None:
    m128 = daemon_map(det, "det128-fp32")
    assert m128 >= 0.75, m128  # the card: 81.0 (a cheaper, less accurate rung)
    images, _ = held_out()
    with det.client() as c:
        r = c.infer("digits-det", images[0])
    # boxes still in the pixels of the 160x160 frame sent, not the 128x128 input
    assert len(r.detections) and r.detections.boxes.max() > 128 * 0.8
