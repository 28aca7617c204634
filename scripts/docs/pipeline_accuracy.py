#!/usr/bin/env python3
"""The shipped pipeline's end-to-end accuracy, written into docs/pipelines.md.

    PYTHONPATH=. .venv/bin/python scripts/docs/pipeline_accuracy.py          # rewrite the docs
    PYTHONPATH=. .venv/bin/python scripts/docs/pipeline_accuracy.py --check  # print only

Why a script: the figure in the docs must be what the committed models and config do
through the daemon, and be measured again when either changes. It starts the daemon on
``examples/pipelines/digits-reader.toml`` (edged's own harness, real sockets), sends each
held-out scene of ``models/digits-det/val.npz`` to the detector alone and to the
pipeline, and scores both with the same mAP code the model card and ``edged compile``
use (``edged.detect.metrics_map``, pycocotools' COCO rules). Only the daemon and numpy
compute: no training framework is imported.

Three mAP@0.5 figures, so the stage's effect is not mixed with the operating point:

1. the detector alone, every box down to conf 0.001 (the model card's measure, here with
   the example's one NMS across classes);
2. the detector alone, only the boxes the stage reads (score >= its ``min_score``, at
   most ``max_crops`` per frame): the same boxes as 3, with the detector's classes;
3. the pipeline: those boxes with the second stage's labels as their class;

and, to compare, 3 again with the first digits classifier (``models/digits``, trained on
light digits on black, served by the example beside the stage's model) as the stage, cut
as that classifier wants its crops (``square`` and ``contrast``, no padding): a second
pipeline beside the example in the daemon this script starts.

Plus, over the ground-truth digits that a read box matches (IoU >= 0.5), how often the
detector's class and each stage's label are right, and the first classifier's label on
plain crops (without ``square`` and ``contrast``, a third pipeline).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import doc_section
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "pipelines" / "digits-reader.toml"
VAL = ROOT / "models" / "digits-det" / "val.npz"
DOC = ROOT / "docs" / "pipelines.md"
BEGIN = "<!-- pipeline-accuracy:begin (scripts/docs/pipeline_accuracy.py writes this part) -->"
END = "<!-- pipeline-accuracy:end -->"
STAGE = "digit"
#: the first digits classifier as the stage, with its crop options and on plain crops,
#: beside the example in the daemon the script starts
FIRST, PLAIN = "digits-reader-first", "digits-reader-plain"
COMPARE = f"""
[[models]]
name = "{FIRST}"
kind = "pipeline"
detector = "digits-det"
[[models.stages]]
name = "digit"
model = "digits"
min_score = 0.25
max_crops = 16
square = true
contrast = "border"

[[models]]
name = "{PLAIN}"
kind = "pipeline"
detector = "digits-det"
[[models.stages]]
name = "digit"
model = "digits"
min_score = 0.25
max_crops = 16
"""


def held_out() -> tuple[np.ndarray, list[np.ndarray]]:
    with np.load(VAL) as z:
        images, boxes = z["images"], z["boxes"]
    return images, [boxes[boxes[:, 0] == i][:, 1:] for i in range(len(images))]


def ask(d: object, model: str, images: np.ndarray) -> list[object]:
    """Every scene to ``model``, pipelined (they batch in the daemon), replies in order."""
    from edged.client import build_infer

    replies: list[object] = [None] * len(images)
    with d.client(timeout_s=120) as c:  # type: ignore[attr-defined]
        for i, img in enumerate(images):
            c.send(*build_infer(model, img, id=i, conf=0.001, max_det=100))
        for _ in images:
            r = c.recv()
            r.raise_for_status()
            replies[r.header["id"]] = r
    return replies


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each box of ``a`` [N, 4] with each of ``b`` [M, 4]."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(x[:, 2:4] - x[:, :2], axis=1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def read(replies: list[object], truth: list[np.ndarray]) -> dict[str, object]:
    """One pipeline's replies: the boxes its stage read (with the detector's classes and
    with the stage's labels), and over the held-out digits a read box finds (IoU >= 0.5,
    the best-scored such box) how many each labels right."""
    det_read, stage_read = [], []
    right_det = right_stage = matched = boxes = 0
    for r, gt in zip(replies, truth, strict=True):
        p = r.detections  # type: ignore[attr-defined]
        state = p.column(f"{STAGE}_state")
        fresh = np.flatnonzero([p.states.get(int(s)) == "fresh" for s in state])
        boxes += fresh.size
        base = p.rows[fresh][:, :6]
        labelled = base.copy()
        labelled[:, 5] = p.column(f"{STAGE}_class")[fresh]
        det_read.append(base)
        stage_read.append(labelled)
        if fresh.size and gt.size:
            m = iou(base[:, :4], gt[:, :4])
            for g in range(gt.shape[0]):
                hits = np.flatnonzero(m[:, g] >= 0.5)
                if hits.size:
                    k = hits[np.argmax(base[hits, 4])]
                    matched += 1
                    right_det += int(base[k, 5] == gt[g, 4])
                    right_stage += int(labelled[k, 5] == gt[g, 4])
    return {"det": det_read, "stage": stage_read, "boxes": boxes, "matched": matched,
            "acc_det": right_det / max(matched, 1), "acc_stage": right_stage / max(matched, 1)}


def measure() -> dict[str, float | int | str]:
    from edged.detect.metrics_map import evaluate_map
    from edged.testing.harness import Daemon

    images, truth = held_out()
    with tempfile.TemporaryDirectory(prefix="edged-pipeline-acc-") as tmp:
        text = CONFIG.read_text().replace('path = "../../models/', f'path = "{ROOT}/models/')
        config = Path(tmp) / "edged.toml"
        config.write_text(text + COMPARE)
        d = Daemon(config, Path(tmp))
        try:
            alone = ask(d, "digits-det", images)
            piped = ask(d, "digits-reader", images)
            first = ask(d, FIRST, images)
            plain = ask(d, PLAIN, images)
        finally:
            d.stop()
    stage = piped[0].header["detections"]["stages"][STAGE]  # type: ignore[attr-defined]
    mine, old, bare = read(piped, truth), read(first, truth), read(plain, truth)
    det_all = [r.detections.rows for r in alone]  # type: ignore[attr-defined]
    return {
        "scenes": len(images), "digits": int(sum(g.shape[0] for g in truth)),
        "detector_variant": alone[0].variant,  # type: ignore[attr-defined]
        "stage_model": stage["model"], "stage_variant": stage["variant"],
        "map_detector_all": evaluate_map(det_all, truth).map50,
        "map_detector_read": evaluate_map(mine["det"], truth).map50,  # type: ignore[arg-type]
        "map_pipeline": evaluate_map(mine["stage"], truth).map50,  # type: ignore[arg-type]
        "map_first": evaluate_map(old["stage"], truth).map50,  # type: ignore[arg-type]
        "read_boxes": mine["boxes"], "first_boxes": old["boxes"], "matched": mine["matched"],
        "acc_detector": mine["acc_det"], "acc_stage": mine["acc_stage"],
        "acc_first": old["acc_stage"], "acc_first_plain": bare["acc_stage"],
    }  # type: ignore[return-value]


def section(r: dict[str, float | int | str]) -> str:
    from edged.config.file import load_config

    stage = load_config(CONFIG).pipelines[0].stages[0]
    pct = lambda v: f"{100 * float(v):.1f}"  # noqa: E731
    read = (f"the {r['read_boxes']} boxes the stage reads (score >= {stage.min_score:g}, "
            f"at most {stage.max_crops} a frame)")
    model = f"`{r['stage_model']}`"
    every = "every box down to conf 0.001 (one NMS across classes, as served)"
    rows = [("the detector alone", every, "the detector's", pct(r["map_detector_all"])),
            ("the detector alone", read, "the detector's", pct(r["map_detector_read"])),
            ("**the pipeline**", f"the same {r['read_boxes']} boxes",
             f"**{model}'s** (the stage's)", f"**{pct(r['map_pipeline'])}**"),
            ("the pipeline with the first classifier", f"the same {r['first_boxes']} boxes",
             "`digits`' (light digits on black)", pct(r["map_first"]))]
    table = "\n".join(f"| {' | '.join(row)} |" for row in rows)
    return f"""{BEGIN}

Measured by `scripts/docs/pipeline_accuracy.py` through the daemon on
`examples/pipelines/digits-reader.toml` (detector `{r['detector_variant']}`, stage model
{model} `{r['stage_variant']}`), on the {r['scenes']} held-out scenes of
`models/digits-det/val.npz` ({r['digits']} digits); mAP@0.5 with pycocotools, as the model
card. The last row is the same pipeline with the first digits classifier (`models/digits`)
as its stage, cut as it wants its crops (`square`, `contrast = "border"`, no padding):

| what | boxes | class of each box | mAP@0.5 % |
|---|---|---|---|
{table}

Of the {r['matched']} held-out digits a read box finds (IoU >= 0.5), the detector's class is
right for {pct(r['acc_detector'])} %, {model}'s label for {pct(r['acc_stage'])} % and the first
classifier's for {pct(r['acc_first'])} % (on plain crops, without `square` and `contrast`:
{pct(r['acc_first_plain'])} %).

{END}"""


def main(argv: list[str] | None = None) -> int:
    return doc_section.main(DOC, BEGIN, END, lambda: section(measure()),
                            __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
