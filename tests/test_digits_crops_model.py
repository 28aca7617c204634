"""The digit reader for pipeline crops (models/digits-crops/) is what its README and
model.json say, and the shipped pipeline cuts its crops the way it was trained.

Why: the model reads crops cut with particular stage options (padding, square, contrast)
and made into its tensor by a particular ``[models.preprocess]``; a pipeline that cuts
them otherwise feeds it pixels it never saw, and reads worse without any error. So the
example's stage and preprocessing are held to model.json here, beside the checks every
shipped model gets (I/O, dynamic batch, held-out accuracy as recorded, samples). Real
ONNX Runtime sessions; no torch.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from support.ort import ort_session
from support.pipelines import EXAMPLE

from edged.config.file import load_config

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "digits-crops"
VARIANTS = ["cnn-fp32", "cnn-int8"]  # heaviest first, the ladder order
MIN_ACCURACY = 0.95
SAMPLE_NAME = re.compile(r"^digit(\d)_(\d+)\.png$")


@cache
def meta() -> dict:
    return json.loads((MODEL_DIR / "model.json").read_text())


def session(variant: str) -> ort.InferenceSession:
    return ort_session(MODEL_DIR / f"{variant}.onnx")


def test_model_json_describes_the_files() -> None:
    m = meta()
    assert (m["input"], m["output"]) == ("input", "logits")
    assert m["labels"] == [str(i) for i in range(10)]
    assert m["preprocess"]["color"] == "gray" and m["preprocess"]["size"] == [28, 28]
    assert m["preprocess"]["scale"] == pytest.approx(1 / 255)
    assert set(m["crops"]) == {"padding", "square", "contrast"}
    assert set(m["accuracy"]) == set(VARIANTS)
    total = sum(p.stat().st_size for p in MODEL_DIR.rglob("*") if p.is_file())
    assert total < 1024 * 1024, f"models/digits-crops is {total} bytes"


def test_the_shipped_pipeline_cuts_the_crops_the_model_was_trained_on() -> None:
    cfg = load_config(EXAMPLE)
    (stage,) = cfg.pipelines[0].stages
    assert stage.model == "digits-crops"
    crops = meta()["crops"]
    assert (stage.padding, stage.square, stage.contrast) == \
        (crops["padding"], crops["square"], crops["contrast"])
    assert stage.activation == "softmax"  # the model's output is logits
    model = cfg.model("digits-crops")
    assert model is not None and model.preprocess is not None
    pre, want = model.preprocess, meta()["preprocess"]
    assert (pre.color, [pre.height, pre.width], pre.layout, pre.dtype) == \
        (want["color"], want["size"], want["layout"], want["dtype"])
    assert pre.scale == pytest.approx(want["scale"]) and pre.interpolation == "linear"
    assert list(pre.mean) == want["mean"] and list(pre.std) == want["std"]
    assert [v.name for v in model.variants] == VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_io_and_dynamic_batch(variant: str) -> None:
    sess = session(variant)
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type) == ("input", "tensor(float)")
    assert (out.name, out.type) == ("logits", "tensor(float)")
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [1, 28, 28]
    assert isinstance(out.shape[0], str) and out.shape[1:] == [10]
    x = np.random.default_rng(0).random((8, 1, 28, 28), dtype=np.float32)
    (logits,) = sess.run(["logits"], {"input": x})
    (single,) = sess.run(["logits"], {"input": x[:1]})
    assert logits.shape == (8, 10)
    np.testing.assert_allclose(logits[:1], single, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_held_out_accuracy(variant: str) -> None:
    with np.load(MODEL_DIR / "validation.npz", allow_pickle=False) as data:
        x, y = data["x"], data["y"]
    assert x.dtype == np.uint8 and x.shape[1:] == (28, 28) and len(y) == len(x) >= 500
    assert set(y.tolist()) == set(range(10))
    (logits,) = session(variant).run(["logits"], {"input": (x.astype(np.float32) / 255)[:, None]})
    acc = float((logits.argmax(1) == y).mean())
    assert acc >= MIN_ACCURACY, f"{variant}: held-out accuracy {acc:.4f}"
    assert acc == pytest.approx(meta()["accuracy"][variant], abs=0.002)


def sample_files() -> list[Path]:
    return sorted(p for p in (MODEL_DIR / "samples").iterdir() if SAMPLE_NAME.match(p.name))


def test_samples_cover_every_class() -> None:
    assert {int(SAMPLE_NAME.match(p.name).group(1)) for p in sample_files()} == set(range(10))


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: p.name)
def test_sample_is_read_as_its_label(path: Path) -> None:
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert img is not None and img.shape == (28, 28)
    (logits,) = session("cnn-fp32").run(["logits"], {"input": (img / 255.0).astype(np.float32)
                                                     [None, None]})
    assert int(logits.argmax()) == int(SAMPLE_NAME.match(path.name).group(1))
