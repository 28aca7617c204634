"""The trained digit detector (models/digits-det/) is what its README and model.json say.

Why: the detection path (YOLOv8 decoder, INT8 calibration, mAP validation, the
governor's ladder) is tested against this model; a rebuilt or hand-edited file
that changed its I/O, its output layout or lost accuracy would break those tests
in confusing ways. This checks it at the source, in process: real ONNX Runtime
sessions on the committed held-out set, OpenCV NMS, pycocotools mAP; no torch.

The decode and mAP helpers below are local until ``edged/detect/`` (decoders,
NMS, mAP) lands; then they should be replaced by its functions.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from support.ort import ort_session

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "digits-det"
VARIANTS = {"det-fp32": 160, "det-int8": 160, "det128-fp32": 128}  # ladder order
STRIDES = (8, 16)
NUM_CLASSES = 10
# 0.85, was 0.90: the detector now trains on photographs for half of each batch and lost
# ~4 points on these synthetic scenes (models/digits-det/README.md, "Accuracy").
MIN_MAP = 0.85
MAX_INT8_DROP = 0.02
SCENE = 160  # val.npz scenes are 160x160 RGB


@cache
def meta() -> dict:
    return json.loads((MODEL_DIR / "model.json").read_text())


def session(variant: str) -> ort.InferenceSession:
    return ort_session(MODEL_DIR / f"{variant}.onnx")


@cache
def val() -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Held-out scenes as RGB, and per scene its boxes [K,4] x1y1x2y2 and classes [K].

    On disk (the ``edged compile --postprocess --val`` format): ``images`` uint8 BGR,
    ``boxes`` [G,6] rows of image index, x1, y1, x2, y2, class.
    """
    with np.load(MODEL_DIR / "val.npz") as z:  # allow_pickle stays False
        bgr, rows = z["images"], z["boxes"]
    assert bgr.dtype == np.uint8 and rows.ndim == 2 and rows.shape[1] == 6
    index = rows[:, 0].astype(np.int64)
    return (
        np.ascontiguousarray(bgr[..., ::-1]),
        [rows[index == i, 1:5] for i in range(len(bgr))],
        [rows[index == i, 5].astype(np.int64) for i in range(len(bgr))],
    )


def preprocess(images_rgb: np.ndarray, size: int) -> np.ndarray:
    """model.json's preprocessing: RGB, stretch to size, x/255, NCHW float32."""
    pp = meta()["preprocess"]
    assert (pp["color"], pp["layout"], pp["dtype"]) == ("rgb", "NCHW", "float32")
    resized = np.stack(
        [cv2.resize(im, (size, size), interpolation=cv2.INTER_LINEAR) for im in images_rgb]
    ) if images_rgb.shape[1] != size else images_rgb  # fmt: skip
    return resized.transpose(0, 3, 1, 2).astype(np.float32) * np.float32(pp["scale"])


def decode_yolov8(out: np.ndarray, size: int, conf: float, iou: float,
                  max_det: int) -> list[np.ndarray]:
    """The model's ``[B, 14, N]`` output through edged's own YOLOv8 decoder and NMS."""
    from edged.backends.base import TensorSpec
    from edged.config.postprocess import PostprocessConfig
    from edged.config.schema import Table
    from edged.detect.geometry import Transform
    from edged.detect.postprocess import Postprocessor

    problems: list[str] = []
    cfg = PostprocessConfig.from_table(Table(
        {"kind": "detect", "decoder": "yolov8", "conf": conf, "iou": iou, "max_det": max_det},
        "postprocess", "test", problems))
    assert cfg is not None and not problems, problems
    spec = TensorSpec("output0", np.dtype("float32"), (-1, out.shape[1], out.shape[2]))
    post = Postprocessor(cfg, [spec], (size, size))
    return post.run({"output0": out}, [Transform.identity(size, size)] * len(out))


def map50(dets: list[np.ndarray], boxes: list[np.ndarray], classes: list[np.ndarray]) -> float:
    """COCO mAP@0.5 with edged's own evaluator (pycocotools underneath)."""
    from edged.detect.metrics_map import evaluate_map

    truth = [np.column_stack([b, c]).astype(np.float32) for b, c in zip(boxes, classes,
                                                                         strict=True)]
    return float(evaluate_map(dets, truth).map50)


@cache
def variant_map(variant: str) -> float:
    """Held-out mAP@0.5 of one variant, boxes mapped back to scene pixels."""
    size = VARIANTS[variant]
    images, boxes, classes = val()
    dets: list[np.ndarray] = []
    for i in range(0, len(images), 8):
        (out,) = session(variant).run(None, {"images": preprocess(images[i : i + 8], size)})
        for d in decode_yolov8(out, size, conf=0.001, iou=0.5, max_det=100):
            d[:, :4] *= SCENE / size
            dets.append(d)
    return map50(dets, boxes, classes)


def test_val_set_is_plain_arrays_with_consistent_boxes() -> None:
    images, boxes, classes = val()
    assert images.dtype == np.uint8 and images.shape[1:] == (SCENE, SCENE, 3)
    assert sum(len(b) for b in boxes) >= 100, "too few objects for a meaningful mAP"
    allb = np.concatenate(boxes)
    assert (allb[:, 2] > allb[:, 0]).all() and (allb[:, 3] > allb[:, 1]).all()
    assert allb.min() >= 0 and allb.max() <= SCENE
    assert set(np.concatenate(classes).tolist()) == set(range(NUM_CLASSES))
    assert (MODEL_DIR / "val.npz").stat().st_size < 2_200_000


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_io_is_the_yolov8_layout(variant: str) -> None:
    size = VARIANTS[variant]
    n = sum((size // s) ** 2 for s in STRIDES)
    (inp,), (out,) = session(variant).get_inputs(), session(variant).get_outputs()
    assert (inp.name, inp.type) == (meta()["input"], "tensor(float)")
    assert (out.name, out.type) == (meta()["output"], "tensor(float)")
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [3, size, size]
    assert out.shape[1:] == [4 + NUM_CLASSES, n]
    assert meta()["variants"][variant]["input_size"] == [size, size]
    images, _, _ = val()
    (y,) = session(variant).run(None, {inp.name: preprocess(images[:3], size)})
    assert y.shape == (3, 4 + NUM_CLASSES, n) and y.dtype == np.float32
    scores = y[:, 4:]
    assert scores.min() >= 0.0 and scores.max() <= 1.0, "class scores must be post-sigmoid"
    assert (y[:, 2:4] >= 0).all(), "w, h must be non-negative"


def test_labels_in_metadata_match_model_json() -> None:
    names = session("det-fp32").get_modelmeta().custom_metadata_map["names"]
    assert list(json.loads(names).values()) == meta()["labels"] == [str(i) for i in range(10)]


def test_fp32_reaches_its_held_out_map() -> None:
    got = variant_map("det-fp32")
    assert got >= MIN_MAP, f"det-fp32 mAP@0.5 {got:.4f} < {MIN_MAP}"
    assert got == pytest.approx(meta()["map50"]["det-fp32"], abs=0.005)


def test_int8_within_two_points_of_fp32() -> None:
    fp32, int8 = variant_map("det-fp32"), variant_map("det-int8")
    assert fp32 - int8 <= MAX_INT8_DROP, f"int8 {int8:.4f} vs fp32 {fp32:.4f}"
    # Looser: int8 kernels differ a little between CPUs (VNNI or not).
    assert int8 == pytest.approx(meta()["map50"]["det-int8"], abs=0.01)


def test_low_resolution_rung_matches_model_card() -> None:
    got = variant_map("det128-fp32")
    assert got == pytest.approx(meta()["map50"]["det128-fp32"], abs=0.005)
    assert got < variant_map("det-fp32") + 0.02, "a cheaper rung should not be clearly better"


def test_sample_scene_is_found_with_its_digits() -> None:
    """A committed sample PNG, decoded from disk as a client would send it."""
    images, _, classes = val()
    path = sorted((MODEL_DIR / "samples").glob("scene*.png"))[-1]
    row = int(path.name[len("scene") : len("scene") + 3])
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    assert np.array_equal(rgb, images[row])
    (out,) = session("det-fp32").run(None, {"images": preprocess(rgb[None], 160)})
    (d,) = decode_yolov8(out, 160, conf=meta()["postprocess"]["conf"], iou=0.5, max_det=100)
    assert sorted(d[:, 5].astype(int).tolist()) == sorted(classes[row].tolist())
