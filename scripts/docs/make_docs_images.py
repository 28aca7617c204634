#!/usr/bin/env python3
"""Render the images under ``docs/images/`` from the shipped models.

Why a script: a picture in the docs must show what the committed model really
does, and be rebuilt when the model changes, not edited by hand. One function per
image, registered in ``SECTIONS`` under a short name; run all of them or name some::

    .venv/bin/python scripts/docs/make_docs_images.py            # every section
    .venv/bin/python scripts/docs/make_docs_images.py person     # only these
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"


# ------------------------------------------------------------------- drawing


def draw_box(img: np.ndarray, box: tuple[float, float, float, float], text: str) -> None:
    """A box with a filled label tab above it (inside the frame when at the top edge)."""
    x1, y1, x2, y2 = (round(v) for v in box)
    color = (0, 200, 255)  # BGR amber: visible on flags, faces and dark jackets
    cv2.rectangle(img, (x1, y1), (x2 - 1, y2 - 1), color, 3)
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.7, 2)
    top = y1 - th - base - 6 if y1 - th - base - 6 >= 0 else y1
    cv2.rectangle(img, (x1, top), (x1 + tw + 8, top + th + base + 6), color, -1)
    cv2.putText(img, text, (x1 + 4, top + th + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.7,
                (0, 0, 0), 2, cv2.LINE_AA)


# -------------------------------------------------------------------- person


def person_photos() -> dict[str, np.ndarray]:
    """BGR photos that ship inside packages (matplotlib, scikit-image)."""
    from matplotlib import cbook
    from skimage import data

    return {
        "grace_hopper": cv2.imread(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)),
        "astronaut": cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR),
    }


def person_boxes(sess: ort.InferenceSession, bgr: np.ndarray,
                 conf: float) -> list[tuple[tuple[float, ...], float]]:
    """People above ``conf``: ((x1, y1, x2, y2) in the photo's pixels, score).

    Preprocessing as models/person/README.md says: RGB, bilinear stretch to
    300x300, uint8 NHWC; boxes come back normalised ymin, xmin, ymax, xmax.
    """
    x = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (300, 300),
                   interpolation=cv2.INTER_LINEAR)[None]
    _, boxes, scores, classes = sess.run(
        ["num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0"],
        {"image_tensor:0": x},
    )
    h, w = bgr.shape[:2]
    keep = (scores[0] >= conf) & (classes[0] == 1)
    pix = boxes[0, keep][:, [1, 0, 3, 2]] * [w, h, w, h]
    return [(tuple(b.tolist()), float(s)) for b, s in zip(pix, scores[0, keep], strict=True)]


def person(out_dir: Path) -> Path:
    """grace_hopper and astronaut side by side, each with the detector's person boxes."""
    sess = ort.InferenceSession(str(ROOT / "models" / "person" / "ssdlite-fp32.onnx"),
                                providers=["CPUExecutionProvider"])
    panels = []
    for bgr in person_photos().values():
        img = bgr.copy()
        for box, score in person_boxes(sess, bgr, conf=0.5):
            draw_box(img, box, f"person {score:.2f}")
        scale = 512 / img.shape[0]  # equal heights so the panels line up
        panels.append(cv2.resize(img, (round(img.shape[1] * scale), 512),
                                 interpolation=cv2.INTER_AREA))
    gap = np.full((512, 8, 3), 255, np.uint8)
    path = out_dir / "person-detections.jpg"
    cv2.imwrite(str(path), np.hstack([panels[0], gap, panels[1]]),
                [cv2.IMWRITE_JPEG_QUALITY, 85])
    return path


# ------------------------------------------------------------------ pipeline


def pipeline(out_dir: Path) -> Path:
    """The shipped digits-reader pipeline through the daemon on held-out scenes: each box
    labelled "detector's class > the digit the second stage read from its crop", green
    where they agree, red where they differ (two sample scenes, then the first held-out
    scene with a disagreement: the picture shows the stage as it is)."""
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT))
    from edged.testing.harness import Daemon

    names = ["scene010_5digits.png", "scene000_4digits.png"]
    scenes = [cv2.imread(str(ROOT / "models" / "digits-det" / "samples" / n)) for n in names]
    with np.load(ROOT / "models" / "digits-det" / "val.npz") as z:
        held_out = z["images"]
    panels = []
    with tempfile.TemporaryDirectory(prefix="edged-docs-") as tmp:
        d = Daemon(ROOT / "examples" / "pipelines" / "digits-reader.toml", Path(tmp))
        try:
            with d.client(timeout_s=60) as c:
                replies = [c.infer("digits-reader", s).detections for s in scenes]
                # and the first held-out scene where the stage reads a box differently
                for img in held_out:
                    r = c.infer("digits-reader", img).detections
                    if any(r.stage_label("digit", k) != str(int(r.classes[k]))
                           for k in range(len(r))):
                        scenes.append(img)
                        replies.append(r)
                        break
        finally:
            d.stop()
    scale = 3  # the scenes are 160x160: enlarged so the labels can be read
    for img, dets in zip(scenes, replies, strict=True):
        big = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
        for k in range(len(dets)):
            det = int(dets.classes[k])
            read = dets.stage_label("digit", k)
            agree = read == str(det)
            colour = (60, 180, 60) if agree else (40, 40, 220)
            box = tuple(float(v) * scale for v in dets.boxes[k])
            draw_label(big, box, f"{det} > {read if read is not None else '-'}", colour)
        panels.append(big)
    gap = np.full((panels[0].shape[0], 8, 3), 255, np.uint8)
    row = [x for p in panels for x in (p, gap)][:-1]
    path = out_dir / "pipeline-digits.jpg"
    cv2.imwrite(str(path), np.hstack(row), [cv2.IMWRITE_JPEG_QUALITY, 88])
    return path


def crops(out_dir: Path) -> Path:
    """How a pipeline stage cuts a crop (docs/pipelines.md, "How a crop is cut"): a held-out
    digit on a light sign over a dark photograph and its box; the window the stage's
    ``square`` and ``padding`` make; the old rule's crop (that window read from the frame:
    the photograph in it) and its ``contrast = "border"``; the rule now (the box's own
    pixels, widened with the box's border colour) and its contrast; under each contrast,
    what ``digits-crops`` reads. The first digit (labels 0-9, in turn) the old rule reads
    wrong: the picture shows the failure the rule removed."""
    import dataclasses
    import sys

    sys.path.insert(0, str(ROOT))
    from edged.config.file import load_config
    from edged.model.pipeline.crops import border_contrast, box_region, crop_window, cut
    from edged.preprocess.preprocessor import Preprocessor
    from edged.testing.signs import held_out_digit, on_photo, photo, sign

    cfg = load_config(ROOT / "examples" / "pipelines" / "digits-reader.toml")
    (stage,) = cfg.pipelines[0].stages
    model = cfg.model(stage.model)
    assert model is not None and model.preprocess is not None
    pre = Preprocessor(model.preprocess)
    sess = ort.InferenceSession(str(ROOT / "models" / "digits-crops" / "cnn-fp32.onnx"),
                                providers=["CPUExecutionProvider"])

    def reads(crop: np.ndarray) -> int:
        return int(sess.run(None, {"input": pre.from_frame(crop, "bgr")})[0].argmax())

    bg = photo("hubble_deep_field", 640, 360)
    for label in range(10):
        board = sign(held_out_digit(label), 110)
        frame = on_photo(bg, board, 260, 120)
        m = round(0.12 * 110)
        box = np.array([260 + m, 120 + m, 260 + board.shape[1] - m, 120 + board.shape[0] - m],
                       np.float32)
        a, b, c, d = crop_window(box, stage)
        old = frame[max(b, 0):d, max(a, 0):c]
        old_g = border_contrast(old)
        new = cut(frame, box, dataclasses.replace(stage, contrast="none"))
        new_g = cut(frame, box, stage, (28, 28))
        if reads(old_g) != label and reads(new_g) == label:
            break
    side = 150
    x1, y1, x2, y2 = box_region(box, frame.shape[1], frame.shape[0])
    pad = (c - a) // 2
    view = frame[max(b - pad, 0):d + pad, max(a - pad, 0):c + pad].copy()
    ox, oy = max(a - pad, 0), max(b - pad, 0)
    cv2.rectangle(view, (x1 - ox, y1 - oy), (x2 - ox - 1, y2 - oy - 1), (60, 200, 60), 1)
    cv2.rectangle(view, (a - ox, b - oy), (c - ox - 1, d - oy - 1), (40, 160, 255), 1)

    def panel(img: np.ndarray, caption: str) -> np.ndarray:
        img = img if img.ndim == 3 else cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
        big = cv2.resize(img, (side, side), interpolation=cv2.INTER_NEAREST)
        bar = np.full((24, side, 3), 255, np.uint8)
        cv2.putText(bar, caption, (4, 17), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1,
                    cv2.LINE_AA)
        return np.vstack([big, bar])

    panels = [panel(view, "box (green), window"),
              panel(old, "old: window of frame"),
              panel(old_g, f"old contrast: reads {reads(old_g)}"),
              panel(new, "now: box + its colour"),
              panel(new_g, f"now contrast: reads {reads(new_g)}")]
    gap = np.full((panels[0].shape[0], 8, 3), 255, np.uint8)
    row = [x for p in panels for x in (p, gap)][:-1]
    path = out_dir / "pipeline-crops.png"
    cv2.imwrite(str(path), np.hstack(row))
    return path


def draw_label(img: np.ndarray, box: tuple[float, ...], text: str,
               color: tuple[int, int, int]) -> None:
    """A thin box with a filled tab above it (inside the image at the top edge)."""
    x1, y1, x2, y2 = (round(v) for v in box)
    cv2.rectangle(img, (x1, y1), (x2 - 1, y2 - 1), color, 2)
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.55, 1)
    top = y1 - th - base - 4 if y1 - th - base - 4 >= 0 else y1
    cv2.rectangle(img, (x1, top), (x1 + tw + 6, top + th + base + 4), color, -1)
    cv2.putText(img, text, (x1 + 3, top + th + 2), cv2.FONT_HERSHEY_SIMPLEX, 0.55,
                (255, 255, 255), 1, cv2.LINE_AA)


# ---------------------------------------------------------------------- main

SECTIONS: dict[str, Callable[[Path], Path]] = {
    "person": person,
    "pipeline": pipeline,
    "crops": crops,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sections", nargs="*", metavar="SECTION",
                    help=f"which images to make (default: all of {', '.join(SECTIONS)})")
    ap.add_argument("--out", type=Path, default=IMAGES, help="output directory")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {unknown}; known: {', '.join(SECTIONS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.sections or list(SECTIONS):
        print(f"{name}: {SECTIONS[name](args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
