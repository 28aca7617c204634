"""The scene evaluation set (``models/scenes-eval``) sent through a daemon, and scored.

Why here: the figures in docs/pipelines.md (``scripts/docs/scene_accuracy.py``) and the
floors a test holds the shipped pipeline to (``tests/test_scene_eval.py``) must be the
same measure of the same replies. The frames are digit signs on photographs no model of
the project trains on (``scripts/models/make_scene_eval.py`` made them; their card is
``models/scenes-eval/README.md``); they go to the daemon as the JPEG files they are, as a
camera app would send them.

How a reply is scored: each returned box is matched to at most one digit and each digit
to at most one box (best score first, IoU >= 0.5), so a second box on the same digit is a
false box, as it is to whoever draws or counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "models" / "scenes-eval"
IOU = 0.5


def load(root: Path = SET) -> tuple[list[Path], list[np.ndarray]]:
    """The frames' files and, per frame, its digits as rows x1, y1, x2, y2, class."""
    with np.load(root / "truth.npz") as z:
        boxes, photos = z["boxes"], z["photos"]
    frames = [root / "frames" / f"{i:03d}.jpg" for i in range(len(photos))]
    return frames, [boxes[boxes[:, 0] == i][:, 1:] for i in range(len(frames))]


def ask(daemon: Any, model: str, frames: list[Path], window: int = 16,
        **opts: Any) -> list[Any]:
    """Every frame to ``model``, at most ``window`` in flight (they batch in the daemon;
    more would fill its decode queue); each reply's ``Detections``, in order. ``opts`` go
    into each request (``conf``, ``max_det``)."""
    from edged.client import build_infer

    out: list[Any] = [None] * len(frames)
    with daemon.client(timeout_s=120) as c:
        sent = 0
        for _ in frames:
            while sent < len(frames) and sent - sum(o is not None for o in out) < window:
                c.send(*build_infer(model, frames[sent], id=sent, **opts))
                sent += 1
            r = c.recv()
            r.raise_for_status()
            out[r.header["id"]] = r.detections
    return out


@dataclass(frozen=True)
class Score:
    """What the issue's done-when asks, over one set of replies."""

    frames: int
    digits: int
    returned: int  #: boxes returned on frames with digits
    matched: int  #: digits a box matches (one box per digit)
    right: int  #: matched digits whose label (the stage's, else the detector's) is right
    empty_frames: int
    empty_boxes: int  #: boxes returned on frames with no digit

    @property
    def accuracy(self) -> float:
        """Of the matched boxes, the share that carry the right digit."""
        return self.right / max(self.matched, 1)

    @property
    def recall(self) -> float:
        return self.matched / max(self.digits, 1)

    @property
    def precision(self) -> float:
        """Of every box returned (digit-free frames included), the share that match a digit."""
        return self.matched / max(self.returned + self.empty_boxes, 1)

    @property
    def false_per_empty(self) -> float:
        """Boxes per digit-free frame (every one of them is false)."""
        return self.empty_boxes / max(self.empty_frames, 1)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes ``[N, 4+]`` and ``[M, 4+]`` (x1, y1, x2, y2 first)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(a[:, 2:4] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:4] - b[:, :2], axis=1)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def labels_of(det: Any, stage: str | None) -> list[str | None]:
    """Each box's label: ``stage``'s (None where it gave none), else the detector's."""
    if stage is None:
        return [det.label(k) for k in range(len(det))]
    return [det.stage_label(stage, k) for k in range(len(det))]


def match(boxes: np.ndarray, scores: np.ndarray, truth: np.ndarray) -> list[tuple[int, int]]:
    """(box, digit) pairs: best score first, each box and digit used once, IoU >= 0.5."""
    if not len(boxes) or not len(truth):
        return []
    m = iou(boxes, truth[:, :4])
    free = np.ones(len(truth), bool)
    pairs = []
    for k in np.argsort(-scores, kind="stable"):
        cand = np.where(free & (m[k] >= IOU), m[k], -1.0)
        g = int(np.argmax(cand))
        if cand[g] >= IOU:
            free[g] = False
            pairs.append((int(k), g))
    return pairs


def score(dets: list[Any], truth: list[np.ndarray], stage: str | None = None,
          min_score: float = 0.0) -> Score:
    """Score replies against the truth; boxes under ``min_score`` are left out (to try
    a threshold on replies asked at a lower one)."""
    returned = matched = right = empty_frames = empty_boxes = 0
    for det, gt in zip(dets, truth, strict=True):
        keep = np.flatnonzero(det.scores >= min_score)
        if not len(gt):
            empty_frames += 1
            empty_boxes += len(keep)
            continue
        returned += len(keep)
        labels = labels_of(det, stage)
        for k, g in match(det.boxes[keep], det.scores[keep], gt):
            matched += 1
            right += int(labels[keep[k]] == str(int(gt[g, 4])))
    return Score(len(dets), int(sum(len(g) for g in truth)), returned, matched, right,
                 empty_frames, empty_boxes)
