"""The shipped digits model (models/digits/) is what its README and model.json say it is.

Why: the daemon's default config, the tests of other parts and the governor's
ladder all rely on these files. A regenerated or hand-edited model that changed
its I/O names, lost its dynamic batch dim or its accuracy, or stopped agreeing
with the documented preprocessing would break them in confusing ways; this
catches it at the source. Real ONNX Runtime sessions, real image files; no torch.
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

DIGITS = Path(__file__).resolve().parent.parent / "models" / "digits"
VARIANTS = ["cnn-fp32", "cnn-int8", "small-fp32"]  # heaviest first, the ladder order
MIN_ACCURACY = 0.95
SAMPLE_NAME = re.compile(r"^digit(\d)_(\d+)\.(png|jpg)$")


@cache
def meta() -> dict:
    return json.loads((DIGITS / "model.json").read_text())


def session(variant: str) -> ort.InferenceSession:
    return ort_session(DIGITS / f"{variant}.onnx")


def preprocess(path: Path) -> np.ndarray:
    """The client preprocessing documented in model.json, driven by its fields."""
    pp = meta()["preprocess"]
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert img is not None, f"cv2 cannot decode {path}"
    assert pp["color"] == "gray"
    if img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2GRAY if img.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    h, w = pp["size"]
    if img.shape != (h, w):
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    x = img.astype(np.float32) * np.float32(pp["scale"])
    x = (x - np.float32(pp["mean"][0])) / np.float32(pp["std"][0])
    assert pp["layout"] == "NCHW"
    return x[None, None].astype(pp["dtype"])


def test_model_json_describes_the_files() -> None:
    m = meta()
    assert m["input"] == "input" and m["output"] == "logits"
    assert m["labels"] == [str(i) for i in range(10)]
    assert m["preprocess"]["size"] == [28, 28]
    assert m["preprocess"]["scale"] == pytest.approx(1 / 255)
    assert set(m["accuracy"]) == set(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_io_and_dynamic_batch(variant: str) -> None:
    path = DIGITS / f"{variant}.onnx"
    assert path.stat().st_size < 5 * 1024 * 1024
    sess = session(variant)
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type) == ("input", "tensor(float)")
    assert (out.name, out.type) == ("logits", "tensor(float)")
    # A symbolic (string) batch dim is what lets the batcher send any batch size.
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [1, 28, 28]
    assert isinstance(out.shape[0], str) and out.shape[1:] == [10]
    rng = np.random.default_rng(0)
    for n in (1, 3, 8):
        x = rng.random((n, 1, 28, 28), dtype=np.float32)
        (logits,) = sess.run(["logits"], {"input": x})
        assert logits.shape == (n, 10) and logits.dtype == np.float32
        # Rows are independent: batching must not change a request's answer.
        (single,) = sess.run(["logits"], {"input": x[:1]})
        np.testing.assert_allclose(logits[:1], single, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_held_out_accuracy(variant: str) -> None:
    with np.load(DIGITS / "validation.npz", allow_pickle=False) as data:
        x, y = data["x"], data["y"]
    assert x.dtype == np.uint8 and x.ndim == 3 and x.shape[1:] == (28, 28)
    assert y.dtype == np.int64 and len(y) == len(x) and len(x) >= 100
    inputs = (x.astype(np.float32) / 255.0)[:, None]
    (logits,) = session(variant).run(["logits"], {"input": inputs})
    acc = float((logits.argmax(1) == y).mean())
    assert acc >= MIN_ACCURACY, f"{variant}: held-out accuracy {acc:.4f}"
    # model.json must report what the file actually does.
    assert acc == pytest.approx(meta()["accuracy"][variant], abs=0.002)


def sample_files() -> list[Path]:
    return sorted(p for p in (DIGITS / "samples").iterdir() if SAMPLE_NAME.match(p.name))


def test_samples_cover_every_class_and_format() -> None:
    files = sample_files()
    labels = {int(SAMPLE_NAME.match(p.name).group(1)) for p in files}
    assert labels == set(range(10))
    assert any(p.suffix == ".jpg" for p in files)
    decoded = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED) for p in files]
    assert any(img is not None and img.ndim == 3 and img.shape[2] == 3 for img in decoded), (
        "need one colour (3-channel) sample to exercise colour->gray conversion"
    )


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: p.name)
def test_sample_classified_as_its_label(path: Path) -> None:
    label = int(SAMPLE_NAME.match(path.name).group(1))
    (logits,) = session("cnn-fp32").run(["logits"], {"input": preprocess(path)})
    assert int(logits.argmax()) == label
