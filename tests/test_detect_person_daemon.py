"""Detection through the whole stack: the shipped person detector served by the
real daemon from config.toml's own model block, boxes in the pixels of the frame sent."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from support.configs import person_config
from support.daemons import Daemon, metrics
from support.governor import one_step_warm
from support.paths import ROOT
from support.person import TRUE_BOX, iou, photo
from support.waits import wait_until

from edged.client import InvalidArgument


@pytest.fixture(scope="module")
def det(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("det")
    d = Daemon(person_config(tmp), tmp, metrics=True)
    yield d
    d.stop()


def best_box(r: Any) -> tuple[float, ...]:
    assert r.detections is not None and len(r.detections) >= 1, r.header
    assert r.detections.label(0) == "person"
    return tuple(float(v) for v in r.detections.boxes[0])


def test_jpeg_of_grace_hopper_gets_her_box(det: Daemon) -> None:
    _, jpeg = photo("grace_hopper")
    assert jpeg is not None
    with det.client() as c:
        r = c.infer("person", ("jpeg", jpeg))
    assert r.header["detections"]["columns"] == ["x1", "y1", "x2", "y2", "score", "class"]
    assert r.detections.scores[0] > 0.9
    assert iou(best_box(r), TRUE_BOX["grace_hopper"]) >= 0.5
    assert np.all(np.diff(r.detections.scores) <= 0)  # best first


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720), (480, 854)])
def test_raw_bgr_frame_of_another_size_gets_boxes_in_its_pixels(det: Daemon,
                                                                size: tuple[int, int]) -> None:
    frame, _ = photo("astronaut")  # 512x512
    w, h = size
    big = cv2.resize(frame, (w, h))
    sx, sy = w / frame.shape[1], h / frame.shape[0]
    x1, y1, x2, y2 = TRUE_BOX["astronaut"]
    want = (x1 * sx, y1 * sy, x2 * sx, y2 * sy)
    with det.client() as c:
        r = c.infer("person", big)
    got = best_box(r)
    assert iou(got, want) >= 0.5, (got, want)
    assert 0 <= got[0] <= got[2] <= w and 0 <= got[1] <= got[3] <= h


def test_frames_of_several_cameras_batch_and_each_gets_its_own_boxes(det: Daemon) -> None:
    grace, _ = photo("grace_hopper")
    astro, _ = photo("astronaut")
    frames = [grace, astro, cv2.resize(grace, (1024, 1200)), astro]
    from edged.client import build_infer

    with det.client(timeout_s=60) as c:
        for k, f in enumerate(frames * 3):
            c.send(*build_infer("person", f, id=k))
        replies = {r.header["id"]: r for r in (c.recv() for _ in range(len(frames) * 3))}
    assert max(r.header["timing"]["batch"] for r in replies.values()) > 1
    for k, r in replies.items():
        f = (frames * 3)[k]
        name = "grace_hopper" if f.shape[:2] in ((600, 512), (1200, 1024)) else "astronaut"
        s = f.shape[1] / 512
        want = tuple(v * s for v in TRUE_BOX[name])
        assert iou(best_box(r), want) >= 0.5, (k, name, best_box(r), want)


def test_request_options_filter_and_bad_options_are_invalid(det: Daemon) -> None:
    _, jpeg = photo("grace_hopper")
    with det.client() as c:
        assert len(c.infer("person", ("jpeg", jpeg), conf=0.999).detections) == 0
        assert len(c.infer("person", ("jpeg", jpeg), conf=0.01, max_det=3).detections) == 3
        assert len(c.infer("person", ("jpeg", jpeg), classes=[5]).detections) == 0
        r = c.infer("person", ("jpeg", jpeg), raw=True)
        assert r.outputs["detection_boxes:0"].shape == (1, 100, 4) and len(r.detections) >= 1
        for bad, field in (({"conf": 1.5}, "conf"), ({"iou": -0.1}, "iou"),
                           ({"max_det": 0}, "max_det"), ({"classes": "person"}, "classes"),
                           ({"raw": "yes"}, "raw")):
            with pytest.raises(InvalidArgument, match=field):
                c.infer("person", ("jpeg", jpeg), **bad)
        assert c.infer("person", ("jpeg", jpeg)).ok  # and the daemon serves on


def test_metrics_count_postprocessing_and_detections(det: Daemon) -> None:
    _, jpeg = photo("grace_hopper")
    with det.client() as c:
        c.infer("person", ("jpeg", jpeg))
    text = metrics(det)
    m = re.search(r'^edged_postprocess_duration_seconds_count\{model="person"\} (\S+)', text,
                  re.M)
    assert m and float(m.group(1)) >= 1
    assert 'edged_detections_per_frame_bucket{le="1.0",model="person"}' in text


def test_models_op_describes_the_detector(det: Daemon) -> None:
    with det.client() as c:
        m = c.models().header["models"][0]
    assert m["detections"]["decoder"] == "ssd" and m["detections"]["labels"] == {"0": "person"}


def test_edged_infer_prints_a_table_and_draws(det: Daemon, tmp_path: Path) -> None:
    frame, _ = photo("grace_hopper")
    img = tmp_path / "photo.jpg"
    cv2.imwrite(str(img), frame)
    out = tmp_path / "drawn.jpg"
    p = subprocess.run([sys.executable, "-m", "edged", "infer", "person", str(img),
                        "--endpoint", det.tcp, "--draw", str(out)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert re.search(r"^person\s+0\.9\d", p.stdout, re.M), p.stdout
    drawn = cv2.imread(str(out))
    assert drawn.shape == frame.shape and not np.array_equal(drawn, frame)


def test_detection_options_on_a_classifier_are_invalid(daemon: Daemon) -> None:
    with daemon.client() as c, pytest.raises(InvalidArgument, match="not a detection model"):
        c.infer("digits", np.zeros((1, 1, 28, 28), np.float32), conf=0.5)


def test_a_decoder_that_does_not_fit_the_outputs_fails_the_load_clearly(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "check",
                        str(person_config(tmp_path, decoder="yolov8"))],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode != 0
    assert "ssdlite-fp32.onnx" in p.stdout + p.stderr
    assert "yolov8" in p.stdout + p.stderr


def test_shipped_config_serves_both_models() -> None:
    cfg = tomllib.loads((ROOT / "config.toml").read_text())
    names = [m["name"] for m in cfg["models"]]
    assert names == ["digits", "person"]


def test_the_governor_steps_the_detector_down_its_ladder(make_daemon: Any,
                                                         tmp_path: Path) -> None:
    root = tmp_path / "sysfs"
    root.mkdir()
    cfg = person_config(tmp_path)
    cfg.write_text(cfg.read_text() + one_step_warm(root))
    d = make_daemon(cfg)
    _, jpeg = photo("grace_hopper")
    assert d.ctl({"op": "level", "level": "warm"})["status"] == "OK"
    with d.client() as c:
        wait_until(lambda: c.infer("person", ("jpeg", jpeg)).variant == "ssdlite-int8", 30,
                   "the swap to the int8 rung", interval=0.1)
        r = c.infer("person", ("jpeg", jpeg))
    assert iou(best_box(r), TRUE_BOX["grace_hopper"]) >= 0.5  # the lighter rung still finds her
