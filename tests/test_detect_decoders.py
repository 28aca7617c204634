"""Each decoder on tensors crafted in its exact layout: known boxes in, the same boxes out.

The boxes are chosen in the pixels of the client's frame, mapped into the model input
with the real letterbox/stretch transform, written into the layout, and must come back
after decode, NMS and the inverse mapping.
"""

from __future__ import annotations

import numpy as np
import pytest

from edged.config.postprocess import PostprocessConfig
from edged.config.schema import Table
from edged.detect.decoders.yolox import yolox_grid
from edged.detect.geometry import Transform, fit
from edged.detect.postprocess import Postprocessor

W = H = 640
C = 3
RNG = np.random.default_rng(7)


class Spec:
    def __init__(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.name, self.dtype, self.shape = name, np.dtype(dtype), shape


def config(**kw: object) -> PostprocessConfig:
    t = Table({"kind": "detect", **kw}, "models[0].postprocess", "edged.toml")
    cfg = PostprocessConfig.from_table(t)
    assert not t.problems, t.problems
    assert cfg is not None
    return cfg


def transform(frame_w: int, frame_h: int, mode: str = "letterbox") -> Transform:
    return fit(np.zeros((frame_h, frame_w, 3), np.uint8), mode, W, H)[1]


def to_input(frame_boxes: np.ndarray, tf: Transform) -> np.ndarray:
    b = np.asarray(frame_boxes, np.float64).copy()
    b[:, 0::2] = b[:, 0::2] * tf.scale_x + tf.pad_x
    b[:, 1::2] = b[:, 1::2] * tf.scale_y + tf.pad_y
    return b


def cxcywh(b: np.ndarray) -> np.ndarray:
    return np.column_stack(((b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2,
                            b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]))


# Three objects in a 1920x1080 frame and two in a portrait 720x1280 frame; each gets a
# twin shifted by 2% of its size with a lower score, which NMS must remove.
LANDSCAPE = (1920, 1080, np.array([[100, 200, 400, 700], [1000, 100, 1300, 400],
                                   [1500, 600, 1900, 1000]], float), [0.9, 0.8, 0.7], [0, 2, 1])
PORTRAIT = (720, 1280, np.array([[50, 60, 300, 500], [400, 700, 700, 1200]], float),
            [0.95, 0.6], [1, 1])


def with_twins(boxes: np.ndarray, scores: list[float], classes: list[int]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shift = (boxes[:, 2:] - boxes[:, :2]) * 0.02
    twins = boxes + np.hstack((shift, shift))
    s = np.array(scores)
    return (np.vstack((boxes, twins)), np.concatenate((s, s - 0.2)),
            np.array(classes + classes))


def yolov8_tensor(n: int, input_boxes: np.ndarray, scores: np.ndarray,
                  classes: np.ndarray) -> np.ndarray:
    x = np.zeros((4 + C, n), np.float32)
    x[:4] = RNG.uniform(0, 600, (4, n))
    x[4:] = RNG.uniform(0, 0.05, (C, n))  # background: near-zero class scores
    cols = RNG.choice(n, len(scores), replace=False)
    x[:4, cols] = cxcywh(input_boxes).T
    x[4:, cols] = 0.0
    x[4 + classes, cols] = scores
    return x


def expect(dets: np.ndarray, boxes: np.ndarray, scores: list[float], classes: list[int]) -> None:
    order = np.argsort(-np.array(scores), kind="stable")
    assert dets.dtype == np.float32 and dets.shape == (len(scores), 6)
    np.testing.assert_allclose(dets[:, :4], boxes[order], atol=0.05)
    np.testing.assert_allclose(dets[:, 4], np.array(scores)[order], atol=1e-6)
    np.testing.assert_array_equal(dets[:, 5], np.array(classes)[order])


def test_yolov8_batch_of_landscape_and_portrait_frames() -> None:
    cfg = config(decoder="yolov8")
    pp = Postprocessor(cfg, [Spec("output0", "float32", (-1, 4 + C, 300))], (W, H))
    frames = [LANDSCAPE, PORTRAIT]
    tfs = [transform(fw, fh) for fw, fh, *_ in frames]
    images = []
    for (_, _, b, s, c), tf in zip(frames, tfs, strict=True):
        boxes, scores, classes = with_twins(b, s, c)
        images.append(yolov8_tensor(300, to_input(boxes, tf), scores, classes))
    batch = np.stack(images)
    dets = pp.run({"output0": batch}, tfs)
    for d, (_, _, b, s, c) in zip(dets, frames, strict=True):
        expect(d, b, s, c)


def test_yolov8_normalized_boxes_and_stretch() -> None:
    cfg = config(decoder="yolov8", resize="stretch", box_format="normalized")
    pp = Postprocessor(cfg, [Spec("out", "float32", (1, 4 + C, 50))], (W, H))
    fw, fh, b, s, c = LANDSCAPE
    tf = transform(fw, fh, "stretch")
    x = yolov8_tensor(50, to_input(b, tf) / W, np.array(s), np.array(c))
    expect(pp.run({"out": x[None]}, [tf])[0], b, s, c)


def test_yolov8_float16_outputs_are_read() -> None:
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float16", (1, 4 + C, 40))], (W, H))
    fw, fh, b, s, c = PORTRAIT
    tf = transform(fw, fh)
    x = yolov8_tensor(40, to_input(b, tf), np.array(s), np.array(c)).astype(np.float16)
    d = pp.run({"o": x[None]}, [tf])[0]
    np.testing.assert_allclose(d[:, :4], b, atol=2.0)  # fp16 keeps ~3 significant digits


def yolov5_rows(input_boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                n: int) -> np.ndarray:
    x = np.zeros((n, 5 + C), np.float32)
    x[:, :4] = RNG.uniform(0, 600, (n, 4))
    x[:, 4] = RNG.uniform(0, 0.1, n)
    x[:, 5:] = RNG.uniform(0, 1, (n, C))
    rows = RNG.choice(n, len(scores), replace=False)
    x[rows, :4] = cxcywh(input_boxes)
    x[rows, 4] = np.sqrt(scores)  # obj x cls = score
    x[rows, 5:] = 0.0
    x[rows, 5 + classes] = np.sqrt(scores)
    return x


def test_yolov5_objectness_times_class() -> None:
    pp = Postprocessor(config(decoder="yolov7"), [Spec("output", "float32", (2, 500, 5 + C))],
                       (W, H))
    tfs = [transform(1280, 720), transform(720, 1280)]
    frames = [(np.array([[10, 20, 300, 400.0]]), [0.81], [2]),
              (np.array([[100, 100, 600, 1200.0]]), [0.64], [0])]
    rows = []
    for (b, s, c), tf in zip(frames, tfs, strict=True):
        boxes, scores, classes = with_twins(b, s, c)
        rows.append(yolov5_rows(to_input(boxes, tf), scores, classes, 500))
    batch = np.stack(rows)
    for d, (b, s, c) in zip(pp.run({"output": batch}, tfs), frames, strict=True):
        expect(d, b, s, c)


def test_yolox_grid_decode() -> None:
    w, h = 416, 256
    grid, strides = yolox_grid(w, h)
    assert grid.shape[0] == (52 * 32) + (26 * 16) + (13 * 8)
    pp = Postprocessor(config(decoder="yolox"), [Spec("output", "float32", (1, grid.shape[0],
                                                                             5 + C))], (w, h))
    fw, fh = 1920, 1080
    tf = fit(np.zeros((fh, fw, 3), np.uint8), "letterbox", w, h)[1]
    boxes = np.array([[300, 300, 900, 800.0], [1200, 100, 1500, 400]])
    inp = cxcywh(to_input(boxes, tf))
    x = np.zeros((grid.shape[0], 5 + C), np.float32)
    x[:, 2:4] = -3.0
    cells = np.array([5, grid.shape[0] - 7])  # one stride-8 cell, one stride-32 cell
    s = strides[cells, None]
    x[cells, :2] = inp[:, :2] / s - grid[cells]
    x[cells, 2:4] = np.log(inp[:, 2:] / s)
    x[cells, 4] = 1.0
    x[cells, 5 + np.array([1, 0])] = [0.9, 0.5]
    expect(pp.run({"output": x[None]}, [tf])[0], boxes, [0.9, 0.5], [1, 0])


def test_end2end_top_k_without_nms() -> None:
    pp = Postprocessor(config(decoder="yolo-end2end", max_det=2),
                       [Spec("output0", "float32", (1, 300, 6))], (W, H))
    fw, fh, b, s, c = LANDSCAPE
    tf = transform(fw, fh)
    x = np.zeros((300, 6), np.float32)
    x[:3, :4] = to_input(b, tf)
    x[:3, 4] = s
    x[:3, 5] = c
    d = pp.run({"output0": x[None]}, [tf])[0]
    expect(d, b[:2], s[:2], c[:2])


def ssd_outputs(frame_boxes: np.ndarray, scores: list[float], classes: list[int],
                tf: Transform, n: int = 100) -> list[np.ndarray]:
    inp = to_input(frame_boxes, tf) / [W, H, W, H]
    boxes = np.zeros((n, 4), np.float32)
    boxes[: len(scores)] = inp[:, [1, 0, 3, 2]]  # ymin, xmin, ymax, xmax
    sc = np.zeros(n, np.float32)
    sc[: len(scores)] = scores
    cl = np.zeros(n, np.float32)
    cl[: len(scores)] = np.array(classes) + 1  # TF OD API counts classes from 1
    return [np.array(len(scores), np.float32), boxes, sc, cl]


SSD_SPECS = [Spec("num_detections:0", "float32", (-1,)),
             Spec("detection_boxes:0", "float32", (-1, 100, 4)),
             Spec("detection_scores:0", "float32", (-1, 100)),
             Spec("detection_classes:0", "float32", (-1, 100))]


def test_ssd_tf_object_detection_api_batch() -> None:
    cfg = config(decoder="ssd", resize="stretch", label_offset=1, labels=["person", "car", "dog"])
    pp = Postprocessor(cfg, SSD_SPECS, (W, H))
    assert pp.output_names == tuple(s.name for s in SSD_SPECS)
    assert pp.labels_json() == {"0": "person", "1": "car", "2": "dog"}
    assert pp.detections_header(np.zeros((2, 6), np.float32)) == {
        "count": 2, "columns": ["x1", "y1", "x2", "y2", "score", "class"],
        "labels": {"0": "person", "1": "car", "2": "dog"}}
    frames = [LANDSCAPE, PORTRAIT]
    tfs = [transform(fw, fh, "stretch") for fw, fh, *_ in frames]
    parts = [ssd_outputs(b, s, c, tf) for (_, _, b, s, c), tf in zip(frames, tfs, strict=True)]
    outs = {spec.name: np.stack([p[i] for p in parts]) for i, spec in enumerate(SSD_SPECS)}
    for d, (_, _, b, s, c) in zip(pp.run(outs, tfs), frames, strict=True):
        expect(d, b, s, c)


def test_zero_detections_give_an_empty_array() -> None:
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float32", (1, 4 + C, 100))], (W, H))
    x = np.full((2, 4 + C, 100), 0.01, np.float32)
    dets = pp.run({"o": x}, [transform(1920, 1080)] * 2)
    assert [d.shape for d in dets] == [(0, 6), (0, 6)]
    ssd = Postprocessor(config(decoder="ssd"), SSD_SPECS, (W, H))
    outs = ssd_outputs(np.zeros((0, 4)), [], [], transform(300, 300, "stretch"))
    assert ssd.run({s.name: o[None] for s, o in zip(SSD_SPECS, outs, strict=True)},
                   [transform(300, 300, "stretch")])[0].shape == (0, 6)


def test_all_overlapping_boxes_collapse_to_the_best() -> None:
    n = 400
    base = np.array([[200.0, 200, 400, 400]])
    jitter = RNG.uniform(-3, 3, (n, 4))
    boxes = base + jitter
    scores = RNG.uniform(0.3, 0.8, n).astype(np.float32)
    scores[123] = 0.99
    x = np.zeros((4 + C, n), np.float32)
    x[:4] = cxcywh(boxes).T
    x[4 + 1] = scores
    tf = Transform.identity(W, H)
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float32", (1, 4 + C, n))], (W, H))
    d = pp.run({"o": x[None]}, [tf])[0]
    assert d.shape == (1, 6)
    np.testing.assert_allclose(d[0, :4], boxes[123], atol=1e-3)
    # Per class, a second class on the same spot survives; agnostic NMS removes it.
    x[4 + 2, 7] = 0.95
    x[4 + 1, 7] = 0.0
    assert len(pp.run({"o": x[None]}, [tf])[0]) == 2
    agn = Postprocessor(config(decoder="yolov8", agnostic=True),
                        [Spec("o", "float32", (1, 4 + C, n))], (W, H))
    assert len(agn.run({"o": x[None]}, [tf])[0]) == 1


def test_boxes_past_the_frame_edge_are_clipped() -> None:
    fw, fh = 1280, 720
    tf = transform(fw, fh)
    # Partly outside the frame: left of it, and into the letterbox padding below it.
    inside = np.array([[-50, 100, 200, 300.0], [1000, 600, 1400, 900]])
    x = yolov8_tensor(60, to_input(inside, tf), np.array([0.9, 0.8]), np.array([0, 1]))
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float32", (1, 4 + C, 60))], (W, H))
    d = pp.run({"o": x[None]}, [tf])[0]
    np.testing.assert_allclose(d[:, :4], [[0, 100, 200, 300], [1000, 600, 1280, 720]], atol=0.05)
    # A box wholly inside the letterbox band below the frame is no detection at all.
    band = np.array([[100, 500, 200, 630.0]])  # model-input y 500..630 > 140 + 360
    x = yolov8_tensor(60, band, np.array([0.9]), np.array([0]))
    assert pp.run({"o": x[None]}, [tf])[0].shape == (0, 6)


def test_request_options_override_defaults_per_image() -> None:
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float32", (-1, 4 + C, 300))], (W, H))
    fw, fh, b, s, c = LANDSCAPE
    tf = transform(fw, fh)
    x = yolov8_tensor(300, to_input(b, tf), np.array(s), np.array(c))
    batch = np.stack([x, x, x])
    opts = [pp.parse_options({}), pp.parse_options({"conf": 0.75}),
            pp.parse_options({"classes": [1, 2], "max_det": 1})]
    d = pp.run({"o": batch}, [tf] * 3, opts)
    assert [len(x) for x in d] == [3, 2, 1]
    assert d[2][0, 5] == 2  # best of classes 1 and 2 is the 0.8 box of class 2


def test_batch_padding_rows_are_ignored() -> None:
    pp = Postprocessor(config(decoder="yolov8"), [Spec("o", "float32", (4, 4 + C, 50))], (W, H))
    x = np.zeros((4, 4 + C, 50), np.float32)
    assert len(pp.run({"o": x}, [transform(W, H)])) == 1
    with pytest.raises(ValueError, match="batch"):
        pp.run({"o": x[:1]}, [transform(W, H)] * 2)


@pytest.mark.parametrize("decoder", ["end2end", "yolov5", "yolov8"])
def test_outputs_are_not_modified(decoder: str) -> None:
    shape = {"end2end": (1, 1, 6), "yolov5": (1, 1, 5 + C), "yolov8": (1, 4 + C, 1)}[decoder]
    spec = tuple(-1 if d == 1 else d for d in shape)  # N dynamic: the shape check cannot tell
    pp = Postprocessor(config(decoder=decoder, box_format="normalized"),
                       [Spec("o", "float32", spec)], (W, H))
    x = np.full(shape, 0.6, np.float32)
    if decoder == "end2end":
        x[..., :2] = 0.3  # x1, y1 below x2, y2
    before = x.copy()
    d = pp.run({"o": x}, [Transform.identity(W, H)])[0]
    assert len(d) == 1
    np.testing.assert_array_equal(x, before)


DO_SPEC = [Spec("detection_out", "float32", (1, 1, 200, 7))]


def detection_output(frames: list[tuple], tfs: list[Transform], n: int = 200) -> np.ndarray:
    """OpenVINO's DetectionOutput ``[1, 1, N, 7]`` for a batch: each image's rows tagged
    with its image_id, a background row, the -1 row that ends the list, then junk."""
    rows = []
    for i, ((_, _, b, s, c), tf) in enumerate(zip(frames, tfs, strict=True)):
        inp = to_input(b, tf) / [W, H, W, H]
        for box, score, cls in zip(inp, s, c, strict=True):
            rows.append([i, cls + 1, score, *box])  # TF COCO ids: 1 = the first class
        rows.append([i, 0, 0.99, 0.1, 0.1, 0.2, 0.2])  # label 0 is the background
    out = np.full((n, 7), 0.77, np.float32)  # after the terminator: never read
    out[: len(rows)] = rows
    out[len(rows)] = [-1, 0, 0, 0, 0, 0, 0]
    return out[None, None]


def test_openvino_detection_output_by_image_id_for_a_batch() -> None:
    cfg = config(decoder="ssd", resize="stretch", label_offset=1)
    pp = Postprocessor(cfg, DO_SPEC, (W, H))
    assert pp.decoder == "detection-output" and pp.output_names == ("detection_out",)
    frames = [LANDSCAPE, PORTRAIT]
    tfs = [transform(fw, fh, "stretch") for fw, fh, *_ in frames]
    out = detection_output(frames, tfs)
    before = out.copy()
    for d, (_, _, b, s, c) in zip(pp.run({"detection_out": out}, tfs), frames, strict=True):
        expect(d, b, s, c)
    np.testing.assert_array_equal(out, before)
    # the same layout named explicitly decodes the same; a batch of one reads image 0 only
    named = Postprocessor(config(decoder="detection-output", resize="stretch", label_offset=1),
                          DO_SPEC, (W, H))
    (one,) = named.run({"detection_out": out}, tfs[:1])
    expect(one, LANDSCAPE[2], LANDSCAPE[3], LANDSCAPE[4])


def test_detection_output_with_no_rows_and_with_the_wrong_shape() -> None:
    pp = Postprocessor(config(decoder="ssd"), DO_SPEC, (W, H))
    empty = np.zeros((1, 1, 200, 7), np.float32)
    empty[0, 0, 0, 0] = -1
    assert pp.run({"detection_out": empty}, [transform(W, H)])[0].shape == (0, 6)
    from edged.detect.outputs import OutputMismatch

    with pytest.raises(OutputMismatch, match=r"\[1, 1, N, 7\]"):
        Postprocessor(config(decoder="detection-output"),
                      [Spec("o", "float32", (1, 2, 200, 7))], (W, H))
    # four outputs stay the TF Object Detection API's layout
    assert Postprocessor(config(decoder="ssd"), SSD_SPECS, (W, H)).decoder == "ssd"
