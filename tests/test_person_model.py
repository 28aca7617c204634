"""The shipped person detector (models/person) finds people in real photos, in process.

Why in process: these tests pin the model file itself (its I/O contract, batching,
what it detects, that the card's checksums match); the daemon path is tested
elsewhere. The input goes through edged's own preprocessing with the settings the
model card documents, so a wrong colour order or resize would fail here too.
Photos come from packages (matplotlib, scikit-image), never from the repository.
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import onnxruntime as ort
import pytest
from support.ort import ort_session
from support.paths import PERSON_MODELS
from support.person import TRUE_BOX, iou, photo, preprocessor

from edged.preprocess.preprocessor import decode_image

MODEL_DIR = PERSON_MODELS
VARIANTS = ("ssdlite-fp32", "ssdlite-int8")
INPUT = "image_tensor:0"
OUTPUTS = ["num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0"]
PERSON = 1

def session(variant: str) -> ort.InferenceSession:
    return ort_session(MODEL_DIR / f"{variant}.onnx")


@pytest.mark.parametrize("variant", VARIANTS)
def test_io_contract(variant: str) -> None:
    sess = session(variant)
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type) == (INPUT, "tensor(uint8)")
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [300, 300, 3]
    outs = {o.name: (o.type, o.shape[1:]) for o in sess.get_outputs()}
    assert list(outs) == OUTPUTS
    assert outs == {
        "num_detections:0": ("tensor(float)", []),
        "detection_boxes:0": ("tensor(float)", [100, 4]),
        "detection_scores:0": ("tensor(float)", [100]),
        "detection_classes:0": ("tensor(float)", [100]),
    }
    meta = sess.get_modelmeta().custom_metadata_map
    assert json.loads(meta["labels"]) == {"1": "person"}
    assert meta["decoder"] == "ssd"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(TRUE_BOX))
def test_finds_the_person(variant: str, name: str) -> None:
    bgr, encoded = photo(name)
    pre = preprocessor()
    # From the JPEG bytes where the package ships a file, else from a raw BGR frame.
    x = (pre.from_frame(decode_image(encoded, 1 << 25), source_color="bgr")
         if encoded is not None else pre.from_frame(bgr))
    num, boxes, scores, classes = session(variant).run(OUTPUTS, {INPUT: x})
    assert num.shape == (1,) and boxes.shape == (1, 100, 4)
    person = (classes[0] == PERSON) & (scores[0] >= 0.5)
    assert person.any(), f"no person above 0.5; best scores {scores[0, :3]}"
    best = int(np.argmax(np.where(person, scores[0], -1.0)))
    h, w = bgr.shape[:2]
    y1, x1, y2, x2 = boxes[0, best] * [h, w, h, w]
    got = (x1, y1, x2, y2)
    # The issue asks IoU >= 0.5; 0.8 here because on these near-square photos a box
    # read in the wrong coordinate order (x for y) still scores 0.52-0.71.
    assert iou(got, TRUE_BOX[name]) >= 0.8, f"{name}: box {got} vs {TRUE_BOX[name]}"
    # One person per photo: nothing else as confident (NMS ran in the graph).
    assert int(person.sum()) == 1, scores[0, :5]


def test_batch_rows_match_single_runs() -> None:
    """Dynamic batching must not change answers: batch-2 rows equal batch-1 runs."""
    pre = preprocessor()
    x = np.concatenate([pre.from_frame(photo(n)[0]) for n in sorted(TRUE_BOX)])
    sess = session("ssdlite-fp32")
    both = sess.run(OUTPUTS, {INPUT: x})
    for i in range(len(x)):
        one = sess.run(OUTPUTS, {INPUT: x[i : i + 1]})
        for b, o in zip(both, one, strict=True):
            np.testing.assert_allclose(b[i], o[0], atol=1e-5)


def test_model_card_matches_the_files() -> None:
    """The card's sha256 lines name the committed files, and model.json agrees."""
    card = (MODEL_DIR / "README.md").read_text()
    listed = dict(
        (f, h) for h, f in re.findall(r"^\s+([0-9a-f]{64})\s+(\S+\.onnx)$", card, re.M)
    )
    assert set(listed) == {f"{v}.onnx" for v in VARIANTS}
    for f, h in listed.items():
        assert hashlib.sha256((MODEL_DIR / f).read_bytes()).hexdigest() == h, f
    facts = json.loads((MODEL_DIR / "model.json").read_text())
    assert facts["input"] == INPUT and facts["outputs"] == OUTPUTS
    assert facts["labels"] == {"1": "person"}
    assert "MIT License" in (MODEL_DIR / "LICENSE").read_text()
