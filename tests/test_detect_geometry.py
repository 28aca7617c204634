"""Letterbox/stretch for frames of any size, and the exact inverse mapping of boxes."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from edged.detect.draw import draw_detections
from edged.detect.geometry import Transform, fit, letterbox
from edged.errors import InvalidArgument


def frame(w: int, h: int, channels: int = 3) -> np.ndarray:
    shape = (h, w) if channels == 1 else (h, w, channels)
    return np.random.default_rng(0).integers(0, 100, shape, dtype=np.uint8)


@pytest.mark.parametrize(("w", "h", "new", "pad"), [
    (1920, 1080, (640, 360), (0, 140)),
    (1280, 720, (640, 360), (0, 140)),
    (720, 1280, (360, 640), (140, 0)),
    (640, 640, (640, 640), (0, 0)),
])
def test_letterbox_sizes_and_padding(w: int, h: int, new: tuple[int, int],
                                     pad: tuple[int, int]) -> None:
    out, tf = letterbox(frame(w, h), 640, 640)
    assert out.shape == (640, 640, 3)
    assert (tf.pad_x, tf.pad_y) == pad
    assert (tf.scale_x * w, tf.scale_y * h) == pytest.approx(new)
    if pad != (0, 0):
        assert (out[0, 0] == 114).all() and (out[-1, -1] == 114).all()
    assert out[pad[1] + 5, pad[0] + 5].max() < 100  # image content, not padding


@pytest.mark.parametrize("mode", ["letterbox", "stretch"])
@pytest.mark.parametrize(("w", "h", "channels"), [(1920, 1080, 3), (721, 1283, 1),
                                                  (333, 200, 4), (100, 1000, 3)])
def test_inverse_maps_boxes_back(mode: str, w: int, h: int, channels: int) -> None:
    out, tf = fit(frame(w, h, channels), mode, 416, 320)
    assert out.shape[:2] == (320, 416)
    rng = np.random.default_rng(1)
    xy = np.sort(rng.uniform(0, [w, w], (50, 2)), axis=1)
    yy = np.sort(rng.uniform(0, [h, h], (50, 2)), axis=1)
    boxes = np.column_stack((xy[:, 0], yy[:, 0], xy[:, 1], yy[:, 1]))
    fwd = boxes.copy()
    fwd[:, 0::2] = fwd[:, 0::2] * tf.scale_x + tf.pad_x
    fwd[:, 1::2] = fwd[:, 1::2] * tf.scale_y + tf.pad_y
    np.testing.assert_allclose(tf.to_frame(fwd), boxes, rtol=1e-5, atol=1e-3)


def test_to_frame_clips() -> None:
    tf = Transform.identity(100, 50)
    got = tf.to_frame(np.array([[-10, -5, 120, 60], [10, 10, 20, 20]], np.float32))
    np.testing.assert_array_equal(got, [[0, 0, 100, 50], [10, 10, 20, 20]])


def test_bad_frames() -> None:
    with pytest.raises(InvalidArgument, match="non-empty"):
        fit(np.zeros((0, 10, 3), np.uint8), "letterbox", 64, 64)
    with pytest.raises(ValueError, match="unknown resize mode"):
        fit(frame(10, 10), "crop", 64, 64)


def test_draw_writes_boxes_and_labels(tmp_path: Path) -> None:
    img = np.zeros((200, 300, 3), np.uint8)
    dets = np.array([[50, 60, 150, 160, 0.9, 0], [0, 0, 40, 30, 0.5, 7]], np.float32)
    out = draw_detections(img, dets, ["person"])
    assert (img == 0).all()  # the input is not modified
    assert out[110, 50].any() and out[60, 100].any()  # box edges drawn
    assert not out[110, 100].any()  # box inside left alone
    path = tmp_path / "out.jpg"
    assert cv2.imwrite(str(path), out)
    assert cv2.imread(str(path)).shape == (200, 300, 3)
    assert draw_detections(img[:, :, 0], dets[:0]).shape == (200, 300, 3)


def test_detections_table() -> None:
    from edged.detect.table import detections_table

    dets = np.array([[10, 20, 110.5, 220, 0.91234, 0], [1, 2, 3, 4, 0.3, 5]], np.float32)
    text = detections_table(dets, ["person"]).splitlines()
    assert text[0].split() == ["label", "score", "x1", "y1", "x2", "y2"]
    assert text[1].split() == ["person", "0.912", "10.0", "20.0", "110.5", "220.0"]
    assert text[2].split()[0] == "5"  # no label for class 5: its id
    assert detections_table(dets[:0]) == "no detections"


def test_jpeg_to_model_tensor_through_letterbox_and_preprocessor() -> None:
    """The serving path: decode_image -> Postprocessor.fit -> Preprocessor.from_frame."""
    from edged.config.postprocess import PostprocessConfig
    from edged.config.schema import Table
    from edged.detect.postprocess import Postprocessor
    from edged.preprocess.preprocessor import PreprocessConfig, Preprocessor, decode_image

    img = np.zeros((720, 1280, 3), np.uint8)
    img[200:400, 600:900] = 255  # a white box, x 600..900, y 200..400
    ok, jpeg = cv2.imencode(".jpg", img)
    assert ok
    pre = Preprocessor(PreprocessConfig.from_table(Table({"width": 320, "height": 320}, "p",
                                                         "x.toml")))

    class Spec:
        name, dtype, shape = "o", np.dtype("float32"), (1, 5, 2100)

    cfg = PostprocessConfig.from_table(Table({"kind": "detect", "decoder": "yolov8"}, "q",
                                             "x.toml"))
    assert cfg is not None
    pp = Postprocessor(cfg, [Spec()], (320, 320))
    fitted, tf = pp.fit(decode_image(jpeg.tobytes(), 10_000_000))
    x = pre.from_frame(fitted, source_color="bgr")
    assert x.shape == (1, 3, 320, 320)
    # 1280x720 -> 320x180, 70 px bands: the box sits at x 150..225, y 120..170.
    white = np.argwhere(x[0, 0] > 0.5)
    assert white.min(0).tolist() == pytest.approx([120, 150], abs=1)
    assert white.max(0).tolist() == pytest.approx([169, 224], abs=1)
    assert x[0, :, 0, 0] == pytest.approx([114 / 255] * 3, abs=0.01)  # letterbox band
    np.testing.assert_allclose(tf.to_frame(np.array([[150, 120, 225, 170]], np.float32)),
                               [[600, 200, 900, 400]])
