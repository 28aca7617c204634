"""A crop reads what its box holds: a digit on a sign over a photograph (issue 41).

The old rule cut the squared, padded window from the frame: around a small sign it took in
the photograph, and with ``contrast = "border"`` the border colour was then the
photograph's, so the sign's own paper read as ink. The rule now (``crops.cut``) reads only
the box's pixels and widens the crop with the box's own border colour. Held-out digits
(``models/digits/validation.npz``, never trained on) on light and dark signs over dark and
light photographs, their boxes where the detector puts them (the strokes, jittered), cut
by the real crop code with the shipped stage's options and read by the real
``digits-crops`` model (ONNX Runtime, the example's preprocessing).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from support.ort import ort_session
from support.paths import ROOT
from support.pipelines import EXAMPLE

from edged.config.file import load_config
from edged.config.pipelines import StageConfig
from edged.model.pipeline.crops import border_contrast, box_region, crop_window, cut
from edged.preprocess.preprocessor import Preprocessor
from edged.testing.signs import held_out_digit, on_photo, photo, sign

MARGIN = 0.12  # the sign's paper beyond the strokes, of their height (signs.sign)


@cache
def reader() -> tuple[StageConfig, Preprocessor, object]:
    cfg = load_config(EXAMPLE)
    (stage,) = cfg.pipelines[0].stages
    model = cfg.model("digits-crops")
    assert model is not None and model.preprocess is not None
    sess = ort_session(ROOT / "models" / "digits-crops" / "cnn-fp32.onnx")
    return stage, Preprocessor(model.preprocess), sess


def old_rule(frame: np.ndarray, box: np.ndarray, stage: StageConfig) -> np.ndarray:
    """What the pipeline cut before: the window read from the frame (clipped to it), the
    border colour that window's edge."""
    h, w = frame.shape[:2]
    a, b, c, d = crop_window(box, stage)
    a, b = max(a, 0), max(b, 0)
    c, d = min(c, w), min(d, h)
    return border_contrast(frame[b:d, a:c])


def read(crops: list[np.ndarray]) -> np.ndarray:
    _, pre, sess = reader()
    x = np.concatenate([pre.from_frame(c, "bgr") for c in crops])
    return sess.run(None, {"input": x})[0].argmax(axis=1)  # type: ignore[attr-defined]


def scenes() -> list[tuple[np.ndarray, np.ndarray, int]]:
    """(frame, box, label): 3 held-out digits of each label, light signs on a dark
    photograph and dark signs on a light one, 70-150 px tall, the box jittered by a few
    pixels as a detector's is."""
    rng = np.random.default_rng(41)
    out = []
    for label in range(10):
        for k in range(3):
            dark_sign = k == 2
            bg = photo("hubble_deep_field" if not dark_sign else "text", 640, 360)
            paper, ink = ((30, 30, 30), (230, 230, 230)) if dark_sign else \
                ((225, 225, 225), (30, 30, 30))
            h = int(rng.integers(70, 150))
            board = sign(held_out_digit(label, k), h, paper=paper, ink=ink, margin=MARGIN)
            x = int(rng.integers(0, 640 - board.shape[1]))
            y = int(rng.integers(0, 360 - board.shape[0]))
            m = round(MARGIN * h)
            box = np.array([x + m, y + m, x + board.shape[1] - m, y + board.shape[0] - m],
                           np.float32) + rng.normal(0, 0.03 * h, 4).astype(np.float32)
            out.append((on_photo(bg, board, x, y), box, label))
    return out


def test_a_digit_on_a_sign_over_a_photograph_reads_right_from_its_box() -> None:
    stage = reader()[0]
    cases = scenes()
    labels = np.array([lab for _, _, lab in cases])
    new = read([cut(f, b, stage, (28, 28)) for f, b, _ in cases])
    old = read([old_rule(f, b, stage) for f, b, _ in cases])
    new_right, old_right = new == labels, old == labels
    assert new_right.mean() >= 0.9, (new.tolist(), labels.tolist())
    assert new_right.sum() >= old_right.sum() + 5, (new_right.sum(), old_right.sum())
    assert (new_right & ~old_right).any()  # read right where the old rule read it wrong


def test_the_crop_holds_none_of_the_photograph() -> None:
    stage = reader()[0]
    frame, box, _ = scenes()[0]
    a, b, c, d = box_region(box, frame.shape[1], frame.shape[0])
    crop = cut(frame, box, StageConfig("s", "m", padding=stage.padding, square=True))
    inside = frame[b:d, a:c].reshape(-1, 3)
    # every pixel of the crop is one of the box's own or its border colour
    colours = {tuple(p) for p in inside.tolist()}
    assert {tuple(p) for p in crop.reshape(-1, 3).tolist()} <= colours | {
        tuple(int(v) for v in np.rint(np.median(np.concatenate(
            [frame[b, a:c], frame[d - 1, a:c], frame[b:d, a], frame[b:d, c - 1]]), axis=0)))}
