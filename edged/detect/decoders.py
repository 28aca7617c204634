"""One decoder per output layout: raw outputs of one image -> candidate boxes.

Why per layout: detectors disagree on everything (transposed or not, objectness or
not, centre or corner boxes, pixels or 0..1, NMS inside the graph or not). Each
decoder turns its layout into the same :class:`Candidates` (xyxy in model-input
pixels), vectorised over candidates. :func:`check_outputs` runs at load, so a model
whose outputs do not fit the configured decoder fails then, with a message saying
what was expected and what the model has, rather than with garbage boxes later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edged.detect.nms import Candidates
from edged.errors import ArtifactError

YOLOX_STRIDES = (8, 16, 32)


class OutputMismatch(ArtifactError):
    """The model's outputs do not have the layout the configured decoder reads."""


class OutputSpec(Protocol):
    """What the decoders need to know about a model output (``backends.base.TensorSpec``)."""

    name: str
    dtype: Any
    shape: tuple[int, ...]


@dataclass(frozen=True)
class DecodeParams:
    """Constants of one model variant, fixed at load."""

    input_w: int
    input_h: int
    box_format: str = "pixels"  # or "normalized"
    box_order: str = "xyxy"  # end2end / ssd only
    label_offset: int = 0
    max_candidates: int = 3000  # yolov8: gather at most this many columns (best first)
    grid: np.ndarray | None = None  # yolox: [N, 2] cell x, y
    strides: np.ndarray | None = None  # yolox: [N] stride of each cell


def yolox_grid(input_w: int, input_h: int,
               strides: Sequence[int] = YOLOX_STRIDES) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets and strides in YOLOX's output order (stride 8 first, row-major)."""
    grids, per_cell = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(input_h // s), np.arange(input_w // s), indexing="ij")
        grids.append(np.stack((xs, ys), axis=-1).reshape(-1, 2))
        per_cell.append(np.full(grids[-1].shape[0], s))
    return (np.concatenate(grids).astype(np.float32),
            np.concatenate(per_cell).astype(np.float32))


def _cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty((b.shape[0], 4), np.float32)
    half = b[:, 2:4] * 0.5
    out[:, :2] = b[:, :2] - half
    out[:, 2:] = b[:, :2] + half
    return out


def _to_pixels(boxes: np.ndarray, p: DecodeParams) -> np.ndarray:
    """Never in place: ``boxes`` may be a view of the model's output."""
    if p.box_format == "normalized":
        return boxes * np.array([p.input_w, p.input_h, p.input_w, p.input_h], np.float32)
    return boxes


def decode_yolov8(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[4+C, N]``: cx, cy, w, h then one score per class, one column per candidate."""
    x = outs[0]
    best = x[4:].max(axis=0)  # a max over rows is fast; argmax only on the survivors
    keep = np.flatnonzero(best > conf)
    if keep.size == 0:
        return Candidates.empty()
    if keep.size > p.max_candidates:  # cap before the column gather, the costly part
        keep = keep[np.argpartition(best[keep], -p.max_candidates)[-p.max_candidates:]]
    sub = x[:, keep]
    classes = sub[4:].argmax(axis=0).astype(np.int64)
    boxes = _to_pixels(_cxcywh_to_xyxy(sub[:4].T), p)
    return Candidates(boxes, best[keep].astype(np.float32), classes)


def _objectness_rows(x: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray, np.ndarray]:
    """YOLOv5/YOLOX rows ``[5+C]``: keep rows whose obj x best class score beats ``conf``."""
    rows = np.flatnonzero(x[:, 4] > conf)  # obj <= conf cannot give obj * cls > conf
    sub = x[rows]
    classes = sub[:, 5:].argmax(axis=1)
    scores = sub[:, 4] * sub[np.arange(sub.shape[0]), 5 + classes]
    good = scores > conf
    return rows[good], sub[good], scores[good].astype(np.float32), classes[good].astype(np.int64)


def decode_yolov5(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]``: cx, cy, w, h, objectness, class scores (score = obj x class)."""
    _, sub, scores, classes = _objectness_rows(outs[0], conf)
    if sub.shape[0] == 0:
        return Candidates.empty()
    return Candidates(_to_pixels(_cxcywh_to_xyxy(sub[:, :4]), p), scores, classes)


def decode_yolox(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]`` raw head: xy = (out + cell) * stride, wh = exp(out) * stride."""
    x = outs[0]
    if p.grid is None or p.strides is None:
        raise ValueError("decode_yolox needs DecodeParams.grid/strides (see yolox_grid)")
    if x.shape[0] != p.grid.shape[0]:
        raise OutputMismatch(f"decoder 'yolox': the output has {x.shape[0]} rows but a "
                             f"{p.input_w}x{p.input_h} input has {p.grid.shape[0]} cells "
                             f"at strides {YOLOX_STRIDES}")
    rows, sub, scores, classes = _objectness_rows(x, conf)
    if rows.size == 0:
        return Candidates.empty()
    stride = p.strides[rows, None]
    cxcywh = np.empty((rows.size, 4), np.float32)
    cxcywh[:, :2] = (sub[:, :2] + p.grid[rows]) * stride
    with np.errstate(over="ignore"):  # a huge logit gives inf, dropped as non-finite later
        cxcywh[:, 2:] = np.exp(sub[:, 2:4]) * stride
    return Candidates(_cxcywh_to_xyxy(cxcywh), scores, classes)


def _corner_boxes(b: np.ndarray, p: DecodeParams) -> np.ndarray:
    boxes = np.ascontiguousarray(b[:, [1, 0, 3, 2]] if p.box_order == "yxyx" else b[:, :4],
                                 dtype=np.float32)
    return _to_pixels(boxes, p)


def _with_classes(boxes: np.ndarray, scores: np.ndarray, raw_classes: np.ndarray,
                  p: DecodeParams) -> Candidates:
    classes = np.rint(raw_classes).astype(np.int64) - p.label_offset
    scores = scores.astype(np.float32, copy=False)
    ok = classes >= 0  # a background class below the offset is not a detection
    if ok.all():
        return Candidates(boxes, scores, classes)
    return Candidates(boxes[ok], scores[ok], classes[ok])


def decode_end2end(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 6]``: x1, y1, x2, y2, score, class (NMS already done by the graph)."""
    x = outs[0]
    sub = x[x[:, 4] > conf]
    return _with_classes(_corner_boxes(sub[:, :4], p), sub[:, 4], sub[:, 5], p)


def decode_ssd(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """num ``[]``/``[1]``, boxes ``[N, 4]``, scores ``[N]``, classes ``[N]`` (TF OD API)."""
    num, boxes, scores, classes = outs
    n = int(np.clip(np.nan_to_num(np.asarray(num, np.float64).reshape(-1)[0]), 0,
                    boxes.shape[0]))
    scores = scores.reshape(-1)[:n]
    keep = np.flatnonzero(scores > conf)
    return _with_classes(_corner_boxes(boxes[keep], p), scores[keep],
                         classes.reshape(-1)[:n][keep], p)


Decoder = Callable[[Sequence[np.ndarray], float, DecodeParams], Candidates]
DECODE: dict[str, Decoder] = {
    "yolov8": decode_yolov8,
    "yolov5": decode_yolov5,
    "yolox": decode_yolox,
    "end2end": decode_end2end,
    "ssd": decode_ssd,
}


def _fmt(spec: OutputSpec) -> str:
    dims = ", ".join("?" if d is None or d < 0 else str(d) for d in spec.shape)
    return f"{spec.name} {np.dtype(spec.dtype).name} [{dims}]"


def _dim(spec: OutputSpec, i: int) -> int | None:
    d = spec.shape[i]
    return None if d is None or d < 0 else int(d)


def _problem(decoder: str, expected: str, specs: Sequence[OutputSpec], why: str) -> OutputMismatch:
    have = "; ".join(_fmt(s) for s in specs) or "none"
    return OutputMismatch(f"the model's outputs do not fit decoder {decoder!r}: {why}. "
                          f"Expected {expected}; the model has: {have}")


_EXPECTED = {
    "yolov8": "one float output [B, 4+C, N] (cx, cy, w, h, C class scores per column)",
    "yolov5": "one float output [B, N, 5+C] (cx, cy, w, h, objectness, C class scores per row)",
    "yolox": "one float output [B, N, 5+C] (raw head: x, y, log w, log h, objectness, C scores; "
             "N = the cells at strides 8, 16, 32)",
    "end2end": "one float output [B, N, 6] (x1, y1, x2, y2, score, class per row)",
    "ssd": "4 outputs num [B], boxes [B, N, 4], scores [B, N], classes [B, N]",
}
_SSD_KEYS = ("num", "box", "score", "class")


def resolve_decoder(decoder: str, specs: Sequence[OutputSpec]) -> str:
    """``yolo`` -> ``yolov8`` for ``[B, 4+C, N]`` or ``yolov5`` for ``[B, N, 5+C]``."""
    if decoder != "yolo":
        return decoder
    s = specs[0] if specs else None
    a, b = (_dim(s, 1), _dim(s, 2)) if s is not None and len(s.shape) == 3 else (None, None)
    if a is None or b is None or a == b:
        have = "; ".join(_fmt(x) for x in specs) or "none"
        raise OutputMismatch(f"decoder 'yolo' cannot tell YOLOv8 [B, 4+C, N] from YOLOv5 "
                             f"[B, N, 5+C] by the output shape; set decoder = 'yolov8' or "
                             f"'yolov5'. The model has: {have}")
    return "yolov8" if a < b else "yolov5"


def check_outputs(decoder: str, specs: Sequence[OutputSpec], *, input_size: tuple[int, int],
                  num_labels: int | None = None,
                  names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The model outputs the decoder reads, in its order; OutputMismatch if they do not fit.

    Single-output decoders read the first output (extra outputs, like segmentation
    prototypes, are ignored). ``num_labels`` (when labels are known) must equal C.
    ``names`` picks the ssd outputs when their names do not say which is which.
    """
    expected = _EXPECTED[decoder]
    if decoder == "ssd":
        return _check_ssd(specs, expected, names)
    if not specs:
        raise _problem(decoder, expected, specs, "the model has no outputs")
    s = specs[0]
    if len(s.shape) != 3 or np.dtype(s.dtype).kind != "f":
        raise _problem(decoder, expected, specs, f"output {s.name!r} is not a rank-3 float tensor")
    a, b = _dim(s, 1), _dim(s, 2)
    if decoder == "yolov8":
        c = None if a is None else a - 4
        if a is not None and b is not None and a > b:
            raise _problem(decoder, expected, specs, f"dim 1 ({a}) is larger than dim 2 ({b}): "
                           "this looks like rows per candidate, [B, N, 5+C] (decoder 'yolov5' "
                           "or 'yolox')")
    elif decoder == "end2end":
        c = None
        if b is not None and b != 6:
            raise _problem(decoder, expected, specs, f"the last dim is {b}, not 6")
    else:
        c = None if b is None else b - 5
        if a is not None and b is not None and b > a:
            raise _problem(decoder, expected, specs, f"dim 2 ({b}) is larger than dim 1 ({a}): "
                           "this looks like columns per candidate, [B, 4+C, N] (decoder 'yolov8')")
        if decoder == "yolox" and a is not None:
            cells = yolox_grid(*input_size)[0].shape[0]
            if a != cells:
                raise _problem(decoder, expected, specs, f"a {input_size[0]}x{input_size[1]} "
                               f"input has {cells} cells but the output has {a} rows")
    if c is not None and c < 1:
        raise _problem(decoder, expected, specs, "there is no room for a class score")
    if c is not None and num_labels is not None and c != num_labels:
        raise _problem(decoder, expected, specs, f"the output has {c} class scores but "
                       f"{num_labels} labels are configured")
    return (s.name,)


def _check_ssd(specs: Sequence[OutputSpec], expected: str,
               names: Sequence[str] | None) -> tuple[str, ...]:
    by_name = {s.name: s for s in specs}
    if names is not None:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise _problem("ssd", expected, specs, f"postprocess.outputs names {missing}, "
                           "which the model does not have")
        chosen = [by_name[n] for n in names]
    elif len(specs) < 4:
        raise _problem("ssd", expected, specs, f"the model has {len(specs)} outputs, not 4")
    else:
        chosen = []
        for key in _SSD_KEYS:
            hits = [s for s in specs if key in s.name.lower()]
            if len(hits) != 1:
                raise _problem("ssd", expected, specs, f"{len(hits)} output names contain "
                               f"{key!r}, so set postprocess.outputs = [num, boxes, scores, "
                               "classes] to name them")
            chosen.append(hits[0])
    num, boxes, scores, classes = chosen
    if len(num.shape) not in (1, 2) or (len(num.shape) == 2 and _dim(num, 1) not in (None, 1)):
        raise _problem("ssd", expected, specs, f"{num.name!r} (num) must be [B] or [B, 1]")
    if len(boxes.shape) != 3 or _dim(boxes, 2) not in (None, 4):
        raise _problem("ssd", expected, specs, f"{boxes.name!r} (boxes) must be [B, N, 4]")
    for role, s in (("scores", scores), ("classes", classes)):
        if len(s.shape) != 2:
            raise _problem("ssd", expected, specs, f"{s.name!r} ({role}) must be [B, N]")
    n = {_dim(s, 1) for s in (boxes, scores, classes)} - {None}
    if len(n) > 1:
        raise _problem("ssd", expected, specs, f"boxes, scores and classes disagree on N: "
                       f"{sorted(n)}")
    if np.dtype(boxes.dtype).kind != "f" or np.dtype(scores.dtype).kind != "f":
        raise _problem("ssd", expected, specs, "boxes and scores must be float")
    return tuple(s.name for s in chosen)
